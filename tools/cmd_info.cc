// attn info: versions, the SIMD target, oneDNN ISA and the thread count.
#include <cstdio>
#include <memory>

#include "attn/attn.h"
#include "attn/attn.hpp"
#include "tools/cli.h"
#include "tools/flags.h"

namespace attn::cli {
namespace {

int Info(int threads) {
  // Without --threads, the team `attn run` would get: a malformed
  // ATTN_NUM_THREADS or ATTN_CONFIG fails here as it fails there.
  if (threads == 0) {
    threads = attn_default_num_threads();
    if (threads < 0) return Fail(attn_last_error_message());
  }
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  std::printf("attn %s\n", info.version.c_str());
  std::printf("highway target: %s\n", info.simd_target.c_str());
  std::printf("oneDNN %s, isa: %s, native bf16: %s\n",
              info.onednn_version.c_str(), info.onednn_isa.c_str(),
              info.native_bf16 ? "yes" : "no");
  std::printf("threads: %d\n", threads);
  return 0;
}

}  // namespace

Command AddInfoCommand(CLI::App& app) {
  auto threads = std::make_shared<int>(0);
  CLI::App* info_cmd = app.add_subcommand(
      "info", "Print versions, the SIMD target, oneDNN ISA and threads");
  info_cmd->add_option("--threads", *threads, "threads to report")
      ->check(IntegerIn(1, kMaxThreads));

  return {info_cmd, [threads] { return Info(*threads); }};
}

}  // namespace attn::cli
