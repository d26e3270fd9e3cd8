// RowsLinear (kernels/rows_linear.h), the decode step's projections, on
// GPT-2 124M's shapes with f32 and bf16 weights, at 1 and 8 rows and 1 and 2
// threads. Decode reads every weight once per step, far more than the
// caches hold, so each benchmark cycles through copies of its weights
// (ATTN_ROWS_LINEAR_MIB in all, 1024 by default: a Xeon we measure on has
// 480 MiB of L3; the smoke test uses 8) and bytes/s counts the weight
// bytes read: compare it with stream_read.
//
//   rows_linear/<dtype>/k:<k>/n:<n>/rows:<r>/threads:<t>   one linear
//   rows_linear/<dtype>/gpt2-step/<choice>/rows:<r>/threads:<t>
//       a decode step's 49: per layer qkv (768 -> 2304), attention out
//       (768 -> 768), MLP up (768 -> 3072) and down (3072 -> 768), then the
//       head (768 -> 50257); prefetch:every-tile and prefetch:many-fmas
//       read panel by panel, panels:side-by-side with this CPU's prefetch
//       (only one row of fp32 weights reads side by side; the line of this
//       CPU's prefetch is the one-by-one line to set it against). The single
//       linears use this CPU's choice (RowsLinearReading).
//   rows_linear/<dtype>/k:768/n:3072/gelu:<g>/rows:<r>/threads:<t>
//       the MLP up projection with GELU: `fused` as RowsLinear writes y,
//       `after` as a kernels::Gelu pass over y.
//
//   rows_linear_bench --benchmark_repetitions=3 --benchmark_filter=gpt2-step
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/runtime/huge_pages.h"
#include "hwy/base.h"
#include "kernels/elementwise.h"
#include "kernels/rows_linear.h"

namespace attn::bench {
namespace {

struct Linear {
  size_t k, n;
};

// Where the GELU after the linears runs, if anywhere.
enum class Gelu { kNone, kFused, kAfter };

constexpr Linear kGpt2Layer[] = {
    {768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
constexpr Linear kGpt2Head = {768, 50257};
constexpr int kGpt2Layers = 12;

// A random pattern of 1 Mi weights repeated: random enough for timing,
// and quick to make at hundreds of MiB.
template <typename TW>
std::vector<TW> Weights(size_t count) {
  const std::vector<float> f = RandomFloats(size_t{1} << 20, 0.05f, 3);
  std::vector<TW> w(count);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (sizeof(TW) == 4) {
      w[i] = f[i % f.size()];
    } else {
      w[i] = hwy::BF16FromF32(f[i % f.size()]);
    }
  }
  return w;
}

// The linears of one pass, each with its own weights, packed as RowsLinear
// reads them.
template <typename TW>
void RowsLinearBench(benchmark::State& state, std::vector<Linear> linears,
                     size_t rows, int threads,
                     kernels::RowsLinearReading reading, Gelu gelu) {
  size_t max_k = 0, max_n = 0, step_weights = 0, step_packed = 0;
  for (const Linear& l : linears) {
    max_k = std::max(max_k, l.k);
    max_n = std::max(max_n, l.n);
    step_weights += l.k * l.n;
    step_packed += kernels::RowsLinearPackedSize<TW>(l.n, l.k);
  }
  // Copies of the pass, at least one, so that no weight is in a cache.
  const size_t copies =
      std::max<size_t>(1, WeightBudgetBytes("ATTN_ROWS_LINEAR_MIB") /
                              (step_weights * sizeof(TW)));
  const std::vector<TW> plain = Weights<TW>(max_k * max_n);
  // Aligned and on huge pages as the engine's weights are
  // (engine/huge_pages.h; an unaligned w makes every vector of it straddle
  // two cache lines).
  const std::unique_ptr<void, FreeDeleter> w_buffer(
      AllocateStreamed(copies * step_packed * sizeof(TW)));
  if (!w_buffer) std::abort();
  TW* w = static_cast<TW*>(w_buffer.get());
  for (TW* packed = w; packed < w + copies * step_packed;) {
    for (const Linear& l : linears) {
      kernels::PackRowsLinear(plain.data(), l.n, l.k, packed, threads);
      packed += kernels::RowsLinearPackedSize<TW>(l.n, l.k);
    }
  }
  const std::vector<float> x = RandomFloats(rows * max_k, 1.0f, 1);
  const std::vector<float> bias = RandomFloats(max_n, 0.1f, 2);
  std::vector<float> y(rows * max_n);
  const auto activation = gelu == Gelu::kFused
                              ? kernels::RowsLinearActivation::kGelu
                              : kernels::RowsLinearActivation::kNone;
  size_t copy = 0;
  for (auto _ : state) {
    const TW* wl = w + copy * step_packed;
    for (const Linear& l : linears) {
      kernels::RowsLinear(x.data(), rows, l.k, wl, bias.data(), l.n, y.data(),
                          threads, activation, reading);
      if (gelu == Gelu::kAfter) {
        kernels::Gelu(y.data(), y.data(), rows * l.n, threads);
      }
      wl += kernels::RowsLinearPackedSize<TW>(l.n, l.k);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.counters["bytes/s"] =
      benchmark::Counter(double(step_weights * sizeof(TW)),
                         benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * double(rows * step_weights),
                         benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

template <typename TW>
void Register(const char* dtype) {
  std::vector<Linear> step;
  for (int layer = 0; layer < kGpt2Layers; ++layer) {
    step.insert(step.end(), std::begin(kGpt2Layer), std::end(kGpt2Layer));
  }
  step.push_back(kGpt2Head);
  for (int threads : {1, 2}) {
    for (size_t rows : {size_t{1}, size_t{8}}) {
      const std::string suffix = "/rows:" + std::to_string(rows) +
                                 "/threads:" + std::to_string(threads);
      struct Case {
        std::string name;
        std::vector<Linear> linears;
        kernels::RowsLinearReading reading =
            kernels::RowsLinearReadingOfThisCpu();
        Gelu gelu = Gelu::kNone;
      };
      std::vector<Case> cases;
      for (const Linear& l : kGpt2Layer) {
        cases.push_back(
            {"k:" + std::to_string(l.k) + "/n:" + std::to_string(l.n), {l}});
      }
      const Linear& up = kGpt2Layer[2];
      cases.push_back({"k:768/n:3072/gelu:fused", {up}});
      cases.back().gelu = Gelu::kFused;
      cases.push_back({"k:768/n:3072/gelu:after", {up}});
      cases.back().gelu = Gelu::kAfter;
      cases.push_back({"k:768/n:50257", {kGpt2Head}});
      // Each axis once: the prefetch choices panel by panel (so that one
      // row isolates them too), then side panels with this CPU's prefetch.
      using kernels::RowsLinearPanels;
      using kernels::RowsLinearPrefetch;
      const RowsLinearPrefetch cpu =
          kernels::RowsLinearReadingOfThisCpu().prefetch;
      cases.push_back(
          {"gpt2-step/prefetch:every-tile",
           step,
           {RowsLinearPrefetch::kEveryTile, RowsLinearPanels::kOneByOne}});
      cases.push_back({"gpt2-step/prefetch:many-fmas",
                       step,
                       {RowsLinearPrefetch::kManyFmasPerLine,
                        RowsLinearPanels::kOneByOne}});
      cases.push_back({"gpt2-step/panels:side-by-side",
                       step,
                       {cpu, RowsLinearPanels::kSideBySide}});
      for (const Case& c : cases) {
        const std::string full =
            std::string("rows_linear/") + dtype + "/" + c.name + suffix;
        benchmark::RegisterBenchmark(full.c_str(),
                                     [c, rows, threads](benchmark::State& st) {
                                       RowsLinearBench<TW>(st, c.linears, rows,
                                                           threads, c.reading,
                                                           c.gelu);
                                     })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace

void RegisterAll() {
  Register<float>("f32");
  Register<hwy::bfloat16_t>("bf16");
}

}  // namespace attn::bench
