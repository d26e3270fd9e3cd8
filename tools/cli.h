// Shared pieces of the attn CLI: each subcommand lives in its own cmd_*.cc
// and registers itself on the app; main() runs the one that was chosen.
#ifndef ATTN_TOOLS_CLI_H_
#define ATTN_TOOLS_CLI_H_

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "nlohmann/json_fwd.hpp"

namespace attn::cli {

// Exit codes: 0 success, 1 a library or input error, 2 a usage error.
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// Prints "attn: error: <message>" as one line on stderr; returns kExitError.
int Fail(const std::string& message);

// Prints "attn: usage error: <message> (see --help)" as one line on stderr;
// returns kExitUsage.
int Usage(const std::string& message);

// `j` as one line of JSON. Bytes that are not UTF-8 (a file name's, say)
// become U+FFFD rather than failing after the measurement.
std::string JsonLine(const nlohmann::json& j);

// --config FILE: checks the tuned file up front, so that a bad one fails
// before any work (the commands then pass it as ModelOptions::tuned_config).
// Returns 0, or Fail's code.
int CheckConfigFile(const std::string& path);

struct Command {
  CLI::App* app;
  std::function<int()> run;  // called after a successful parse
};

Command AddRunCommand(CLI::App& app);
Command AddBenchCommand(CLI::App& app);
Command AddInfoCommand(CLI::App& app);
Command AddTuneCommand(CLI::App& app);
Command AddSoakCommand(CLI::App& app);
Command AddGenerateCommand(CLI::App& app);
Command AddTokenizeCommand(CLI::App& app);
Command AddChatCommand(CLI::App& app);
Command AddQuantizeCommand(CLI::App& app);
Command AddServeCommand(CLI::App& app);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_CLI_H_
