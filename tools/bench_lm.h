// attn bench --model: a whole language model's prefill and decode
// (bench_lm.cc), so that cmd_bench.cc only calls in.
#ifndef ATTN_TOOLS_BENCH_LM_H_
#define ATTN_TOOLS_BENCH_LM_H_

#include <functional>

#include "tools/bench_common.h"
#include "tools/cli.h"

namespace attn::cli {

// Adds --model, --prompt, --steps and --rounds to `bench`. The returned
// function is non-null when --model was given (check after parsing); calling
// what it returns with the bench's flags runs the model benchmark (on
// --weights when given), its --dtype values in turns.
using ModelBench = std::function<int(const BenchFlags& flags)>;
std::function<ModelBench()> AddModelBenchOptions(CLI::App& bench);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_BENCH_LM_H_
