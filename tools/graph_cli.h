// The CLI's graph runner pieces (issue 4): `attn run --graph` and
// `attn bench --graph`. Defined in run_graph.cc and bench_graph.cc so that
// cmd_run.cc and cmd_bench.cc only call in.
#ifndef ATTN_TOOLS_GRAPH_CLI_H_
#define ATTN_TOOLS_GRAPH_CLI_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/cli.h"

namespace attn::cli {

struct GraphRunArgs {
  std::string graph, weights, input, output, input_name, dtype;
  int64_t heads = 0, context_length = 0, layers = 0;
  int threads = 0;
  bool allow_nonfinite = false, incremental = false;
};

// Runs the graph on tensor `input_name` [b, T, e] of `input` and writes
// 'output' [b, T, e_out] to `output`; returns the exit code.
int RunGraph(const GraphRunArgs& args);

// Adds --graph (and --weights) to `bench`. The returned function is non-null
// when --graph was given (check after parsing: call it with the bench's
// --shape, --threads, --dtype, --min-time and --json).
using GraphBench = std::function<int(
    const std::string& shapes, const std::vector<int>& threads,
    const std::string& dtype, double min_time, bool json)>;
std::function<GraphBench()> AddGraphBenchOptions(CLI::App& bench);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_GRAPH_CLI_H_
