// attn: the command-line front end (run, bench, info). Uses only the public
// API, exactly as an embedder would; every error is one line on stderr.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "tools/cli.h"

namespace attn::cli {

int Fail(const std::string& message) {
  std::fprintf(stderr, "attn: error: %s\n", message.c_str());
  return kExitError;
}

int UseConfigFile(const std::string& path) {
  if (path.empty()) return 0;
  const attn::Result<int> threads = attn::ReadTunedThreads(path);
  if (!threads.ok()) return Fail(threads.status().message());
  setenv("ATTN_CONFIG", path.c_str(), 1);
  return 0;
}

}  // namespace attn::cli

int main(int argc, char** argv) {
  using namespace attn::cli;
  CLI::App app{"attn: batched causal multi-head attention on the CPU"};
  app.require_subcommand(1);
  const std::vector<Command> commands = {
      AddRunCommand(app), AddBenchCommand(app), AddInfoCommand(app),
      AddSoakCommand(app), AddTuneCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::string known;
    bool named = false;  // does argv[1] name a subcommand?
    for (const Command& command : commands) {
      known += (known.empty() ? "" : ", ") + command.app->get_name();
      named = named || (argc > 1 && command.app->get_name() == argv[1]);
    }
    if (argc > 1 && argv[1][0] != '-' && !named) {
      message = "unknown subcommand '" + std::string(argv[1]) +
                "', want one of " + known;
    }
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(stderr, "attn: usage error: %s (see --help)\n",
                 message.c_str());
    return kExitUsage;
  }
  for (const Command& command : commands) {
    if (!*command.app) continue;
    // Last resorts: every size is checked before it is allocated, and an
    // exception's own text ("std::bad_alloc") would tell a user nothing.
    try {
      return command.run();
    } catch (const std::bad_alloc&) {
      return Fail("out of memory in 'attn " + command.app->get_name() +
                  "': lower the sizes asked for");
    } catch (const std::exception&) {
      return Fail("internal error in 'attn " + command.app->get_name() +
                  "' (a bug: please report the command line)");
    }
  }
  return kExitUsage;
}
