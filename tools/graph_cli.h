// `attn bench --graph`, defined in bench_graph.cc so that
// cmd_bench.cc only calls in. `attn run --graph` lives in cmd_run.cc.
#ifndef ATTN_TOOLS_GRAPH_CLI_H_
#define ATTN_TOOLS_GRAPH_CLI_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/bench_common.h"
#include "tools/cli.h"

namespace attn::cli {

// Adds --graph to `bench`. The returned function is non-null when --graph
// was given (check after parsing: call it with the bench's flags (--shape,
// --weights (empty: random weights), --threads, --min-time, --max-memory,
// --config and --json) and one of its --dtype values).
using GraphBench = std::function<int(const BenchFlags& flags, DType dtype)>;
std::function<GraphBench()> AddGraphBenchOptions(CLI::App& bench);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_GRAPH_CLI_H_
