// attn: main() of the command-line front end. The subcommands (run, bench,
// info, soak, tune, generate, tokenize, chat, quantize, serve) register from
// their cmd_*.cc; this parses, runs the one chosen and makes every error one
// line on stderr. Public API only.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "nlohmann/json.hpp"
#include "tools/cli.h"

namespace attn::cli {

int Fail(const std::string& message) {
  std::fprintf(stderr, "attn: error: %s\n", message.c_str());
  return kExitError;
}

std::string JsonLine(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "attn: usage error: %s (see --help)\n", message.c_str());
  return kExitUsage;
}

int CheckConfigFile(const std::string& path) {
  if (path.empty()) return 0;
  const attn::Result<int> threads = attn::ReadTunedThreads(path);
  if (!threads.ok()) return Fail(threads.status().message());
  return 0;
}

namespace {

// One line for a parse error: an unknown subcommand is named with the known
// ones, and CLI11's multi-line messages are joined. Returns kExitUsage.
int UsageError(const CLI::ParseError& error,
               const std::vector<Command>& commands,
               const std::vector<char*>& args) {
  std::string message = error.what();
  std::string known;
  bool named = false;  // does args[1] name a subcommand?
  for (const Command& command : commands) {
    known += (known.empty() ? "" : ", ") + command.app->get_name();
    named = named || (args.size() > 1 && command.app->get_name() == args[1]);
  }
  if (args.size() > 1 && args[1][0] != '-' && !named) {
    message = "unknown subcommand '" + std::string(args[1]) +
              "', want one of " + known + " or help";
  }
  std::replace(message.begin(), message.end(), '\n', ' ');
  return Usage(message);
}

// `attn help [COMMAND]` is `attn [COMMAND] --help`; `attn help WORD` with
// an unknown WORD is `attn WORD`, refused as an unknown subcommand.
std::vector<char*> WithHelpWord(int argc, char** argv,
                                const std::vector<Command>& commands) {
  static char help_flag[] = "--help";
  std::vector<char*> args(argv, argv + argc);
  if (args.size() < 2 || std::string(args[1]) != "help") return args;
  args.erase(args.begin() + 1);
  const bool known = std::any_of(
      commands.begin(), commands.end(), [&](const Command& command) {
        return args.size() > 1 && command.app->get_name() == args[1];
      });
  if (args.size() == 1 || known) args.push_back(help_flag);
  return args;
}

}  // namespace
}  // namespace attn::cli

int main(int argc, char** argv) {
  using namespace attn::cli;
  CLI::App app{"attn: batched causal multi-head attention on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       [] { return "attn " + attn::GetRuntimeInfo().version; });
  app.footer(
      "Run 'attn help COMMAND' or 'attn COMMAND --help' for a command's "
      "flags.");
  const std::vector<Command> commands = {
      AddRunCommand(app),      AddBenchCommand(app), AddInfoCommand(app),
      AddSoakCommand(app),     AddTuneCommand(app),  AddGenerateCommand(app),
      AddTokenizeCommand(app), AddChatCommand(app),  AddQuantizeCommand(app),
      AddServeCommand(app)};
  std::vector<char*> args = WithHelpWord(argc, argv, commands);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    return UsageError(e, commands, args);
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
