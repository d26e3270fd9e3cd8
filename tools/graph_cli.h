// `attn bench --graph`, defined in bench_graph.cc so that
// cmd_bench.cc only calls in. `attn run --graph` lives in cmd_run.cc.
#ifndef ATTN_TOOLS_GRAPH_CLI_H_
#define ATTN_TOOLS_GRAPH_CLI_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/cli.h"

namespace attn::cli {

// Adds --graph to `bench`. The returned function is non-null when --graph
// was given (check after parsing: call it with the bench's --shape,
// --weights (empty: random weights), --threads, --dtype, --min-time,
// --max-memory, --config and --json).
using GraphBench = std::function<int(
    const std::string& shapes, const std::string& weights,
    const std::vector<int>& threads, const std::string& dtype, double min_time,
    uint64_t max_memory, const std::string& config, bool json)>;
std::function<GraphBench()> AddGraphBenchOptions(CLI::App& bench);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_GRAPH_CLI_H_
