// attn bench --model: a whole language model's prefill and decode
// (bench_lm.cc), so that cmd_bench.cc only calls in.
#ifndef ATTN_TOOLS_BENCH_LM_H_
#define ATTN_TOOLS_BENCH_LM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "tools/cli.h"

namespace attn::cli {

// The bench flags the model benchmark shares with the others.
struct ModelBenchFlags {
  std::string weights;           // a model file; empty: random weights
  std::vector<int> threads;      // empty: the library's default
  std::vector<int64_t> batches;  // empty: 1, 8
  uint64_t max_memory = 0;
  std::string config;
  bool json = false;
  DType dtype = DType::kF32;  // bf16: the matrices held in bf16
};

// Adds --model, --prompt and --steps to `bench`. The returned function is
// non-null when --model was given (check after parsing); calling what it
// returns runs the model benchmark (on --weights when given).
using ModelBench = std::function<int(const ModelBenchFlags& flags)>;
std::function<ModelBench()> AddModelBenchOptions(CLI::App& bench);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_BENCH_LM_H_
