// libFuzzer target: the whole load-validate-run path of `attn run` on a tiny
// model, through the CLI's own code (tools/cmd_run.cc): the bytes as the
// weights file with a fixed input, then as the input file with fixed
// weights. Runs on one thread under a 256 MiB memory cap.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tests/hostile_files.h"
#include "tools/cli.h"

namespace attn::cli {
// The CLI's error printers, silenced: errors are the expected outcome here.
int Fail(const std::string&) { return kExitError; }
int Usage(const std::string&) { return kExitUsage; }
// --config is never given here.
int CheckConfigFile(const std::string&) { return kExitUsage; }
}  // namespace attn::cli

namespace {

int RunCli(const std::string& weights, const std::string& input,
           const std::string& output) {
  CLI::App app;
  const attn::cli::Command run = attn::cli::AddRunCommand(app);
  std::vector<std::string> args = {"--max-memory", "256M",  "--threads", "1",
                                   "--output",     output,  "--input",   input,
                                   "--weights",    weights, "run"};  // reversed
  try {
    app.parse(args);
  } catch (const CLI::ParseError&) {
    return attn::cli::kExitUsage;
  }
  return run.run();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static attn::fuzz::MemFile fuzzed("fuzz_run"), weights("weights"),
      input("input");
  static const std::string dir = attn::fuzz::ScratchDir();
  static const std::string output = dir + "/out.safetensors";
  static bool once = [] {
    weights.Set(attn::test::TinyWeights());
    input.Set(attn::test::TinyInput());
    return true;
  }();
  (void)once;
  fuzzed.Set(data, size);
  RunCli(fuzzed.path(), input.path(), output);
  unlink(output.c_str());
  RunCli(weights.path(), fuzzed.path(), output);
  unlink(output.c_str());
  return 0;
}
