// The causal softmax kernels (kernels/softmax.h) on 64 rows (half the core's
// query block) against N keys, at the diagonal: the normalised one, and the
// attention core's unnormalised ones (fp32 in place, bf16 out). bytes/s
// counts the fp32 tile read and the probabilities written.
#include <benchmark/benchmark.h>

#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "hwy/base.h"
#include "kernels/softmax.h"

namespace attn::bench {
namespace {

constexpr size_t kRows = 64;

enum class Variant { kNormalized, kUnnormalized, kUnnormalizedToBF16 };

void Softmax(benchmark::State& state, Variant variant) {
  const auto cols = static_cast<size_t>(state.range(0));
  const std::vector<float> init = RandomFloats(kRows * cols, 8.0f, 1);
  std::vector<float> scores = init;
  std::vector<hwy::bfloat16_t> probs(kRows * cols);
  std::vector<float> row_scale(kRows);
  const auto diagonal = static_cast<ptrdiff_t>(cols - kRows);
  for (auto _ : state) {
    // Softmax of probabilities stays finite: re-running in place is fair.
    switch (variant) {
      case Variant::kNormalized:
        kernels::CausalSoftmax(scores.data(), kRows, cols, cols, diagonal,
                               0.125f);
        break;
      case Variant::kUnnormalized:
        kernels::CausalSoftmaxUnnormalized(scores.data(), kRows, cols, cols,
                                           diagonal, 0.125f, row_scale.data());
        break;
      case Variant::kUnnormalizedToBF16:
        kernels::CausalSoftmaxUnnormalizedToBF16(
            scores.data(), kRows, cols, cols, diagonal, 0.125f, probs.data(),
            cols, row_scale.data());
        break;
    }
    benchmark::DoNotOptimize(scores.data());
    benchmark::ClobberMemory();
  }
  const double out_bytes = variant == Variant::kUnnormalizedToBF16 ? 2.0 : 4.0;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kRows *
                                               cols * (4.0 + out_bytes)));
  state.counters["rows"] = kRows;
}

}  // namespace

void RegisterAll() {
  const std::pair<const char*, Variant> variants[] = {
      {"softmax/f32", Variant::kNormalized},
      {"softmax/f32_unnormalized", Variant::kUnnormalized},
      {"softmax/f32_to_bf16_unnormalized", Variant::kUnnormalizedToBF16}};
  for (const auto& [name, variant] : variants) {
    benchmark::RegisterBenchmark(
        name, [variant = variant](benchmark::State& s) { Softmax(s, variant); })
        ->ArgName("keys")
        ->RangeMultiplier(4)
        ->Range(64, 4096)
        ->UseRealTime();
  }
}

}  // namespace attn::bench
