// The causal softmax kernel (kernels/softmax.h) on one query block of 64 rows
// against N keys, the block at the diagonal (as the attention core calls
// it): bytes/s counts the fp32 tile read and the probabilities written.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "hwy/base.h"
#include "kernels/softmax.h"

namespace attn::bench {
namespace {

constexpr size_t kRows = 64;

void Softmax(benchmark::State& state, bool to_bf16) {
  const auto cols = static_cast<size_t>(state.range(0));
  const std::vector<float> init = RandomFloats(kRows * cols, 8.0f, 1);
  std::vector<float> scores = init;
  std::vector<hwy::bfloat16_t> probs(kRows * cols);
  const auto diagonal = static_cast<ptrdiff_t>(cols - kRows);
  for (auto _ : state) {
    // Softmax of probabilities stays finite: re-running in place is fair.
    if (to_bf16) {
      kernels::CausalSoftmaxToBF16(scores.data(), kRows, cols, cols, diagonal,
                                   0.125f, probs.data(), cols);
    } else {
      kernels::CausalSoftmax(scores.data(), kRows, cols, cols, diagonal,
                             0.125f);
    }
    benchmark::DoNotOptimize(scores.data());
    benchmark::ClobberMemory();
  }
  const double out_bytes = to_bf16 ? 2.0 : 4.0;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kRows *
                                               cols * (4.0 + out_bytes)));
  state.counters["rows"] = kRows;
}

}  // namespace

void RegisterAll() {
  for (bool bf16 : {false, true}) {
    benchmark::RegisterBenchmark(
        bf16 ? "softmax/f32_to_bf16" : "softmax/f32",
        [bf16](benchmark::State& s) { Softmax(s, bf16); })
        ->ArgName("keys")
        ->RangeMultiplier(4)
        ->Range(64, 4096)
        ->UseRealTime();
  }
}

}  // namespace attn::bench
