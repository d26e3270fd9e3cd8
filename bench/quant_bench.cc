// QuantRowsLinear (kernels/quant.h), the decode step's projections on q8_0
// and q4_0 weights, on Llama 3.2 1B's and GPT-2's shapes at 1 and 8 rows and
// 1 and 2 threads.
// Decode reads every weight once per step, far more than the caches hold,
// so each benchmark cycles through copies of its packed weights
// (ATTN_QUANT_MIB in all, 1024 by default; the smoke test uses 8), and
// bytes/s counts the packed bytes read: compare it with stream_read, run
// right before or after (the host is shared). tokens/s counts rows: batch 8
// against batch 1 is the gain of reading each weight once for all rows.
//
//   quant/<type>/k:<k>/n:<n>/rows:<r>/threads:<t>      one linear
//   quant/<type>/llama-layer/reading:<g>/rows:<r>/threads:<t>
//       q, k, v, o, gate, up and down of one layer, read group-by-group
//       and side-by-side (QuantReading); the single linears read as this
//       CPU's choice.
//
//   quant_bench --benchmark_repetitions=3 --benchmark_filter=llama
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
#include "kernels/quant.h"

namespace attn::bench {
namespace {

using kernels::QuantType;

struct Linear {
  size_t k, n;
};

constexpr Linear kLlamaLayer[] = {{2048, 2048}, {2048, 512},  {2048, 512},
                                  {2048, 2048}, {2048, 8192}, {2048, 8192},
                                  {8192, 2048}};
constexpr Linear kLlamaShapes[] = {
    {2048, 2048}, {2048, 512}, {2048, 8192}, {8192, 2048}, {2048, 128256}};
constexpr Linear kGpt2Shapes[] = {
    {768, 768}, {768, 2304}, {768, 3072}, {3072, 768}, {768, 50257}};

using Buffer = std::unique_ptr<void, FreeDeleter>;

// Rows of llama.cpp blocks of weights uniform in +-0.05: kPoolRows rows
// of k, which the packing repeats to n rows (packing whole groups at a time
// is packing the whole).
constexpr size_t kPoolRows = 256;
std::vector<uint8_t> BlockPool(QuantType t, size_t k) {
  const std::vector<float> w = RandomFloats(kPoolRows * k, 0.05f, 3);
  const size_t row_bytes =
      k / kernels::kQuantBlock * kernels::QuantBlockBytes(t);
  std::vector<uint8_t> blocks(kPoolRows * row_bytes);
  for (size_t r = 0; r < kPoolRows; ++r) {
    kernels::QuantizeRow(t, &w[r * k], k, &blocks[r * row_bytes]);
  }
  return blocks;
}

// W [n, k] packed at `packed`, from the pool's rows over and over.
void PackFromPool(QuantType t, const std::vector<uint8_t>& pool, Linear l,
                  uint8_t* packed, int threads) {
  const size_t chunk_bytes = kernels::QuantPackedBytes(t, kPoolRows, l.k);
  for (size_t j = 0; j < l.n; j += kPoolRows, packed += chunk_bytes) {
    kernels::PackQuantRows(t, pool.data(), std::min(kPoolRows, l.n - j), l.k,
                           packed, threads);
  }
}

// The linears of one pass, each with its own weights, in copies that add
// up to the budget (at least one), aligned and on huge pages as the
// engine's weights are.
struct PackedPasses {
  Buffer buffer;
  size_t pass_bytes = 0, copies = 0;
};
PackedPasses PackPasses(QuantType t, const std::vector<Linear>& linears,
                        int threads) {
  PackedPasses out;
  for (const Linear& l : linears) {
    out.pass_bytes += kernels::QuantPackedBytes(t, l.n, l.k);
  }
  out.copies =
      std::max<size_t>(1, WeightBudgetBytes("ATTN_QUANT_MIB") / out.pass_bytes);
  out.buffer.reset(AllocateStreamed(out.copies * out.pass_bytes));
  if (!out.buffer) std::abort();
  std::vector<std::vector<uint8_t>> pools;
  for (const Linear& l : linears) pools.push_back(BlockPool(t, l.k));
  auto* p = static_cast<uint8_t*>(out.buffer.get());
  for (size_t c = 0; c < out.copies; ++c) {
    for (size_t i = 0; i < linears.size(); ++i) {
      PackFromPool(t, pools[i], linears[i], p, threads);
      p += kernels::QuantPackedBytes(t, linears[i].n, linears[i].k);
    }
  }
  return out;
}

void SetByteAndTokenRates(benchmark::State& state, double bytes, double rows) {
  state.counters["bytes/s"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["tokens/s"] =
      benchmark::Counter(rows, benchmark::Counter::kIsIterationInvariantRate);
}

void QuantLinearBench(benchmark::State& state, QuantType t,
                      const std::vector<Linear>& linears, size_t rows,
                      int threads, kernels::QuantReading reading) {
  const PackedPasses w = PackPasses(t, linears, threads);
  size_t max_k = 0, max_n = 0;
  for (const Linear& l : linears) {
    max_k = std::max(max_k, l.k);
    max_n = std::max(max_n, l.n);
  }
  const std::vector<float> x = RandomFloats(rows * max_k, 1.0f, 1);
  const std::vector<float> bias = RandomFloats(max_n, 0.1f, 2);
  std::vector<float> y(rows * max_n);
  std::vector<uint8_t> scratch(
      kernels::QuantRowsLinearScratchBytes(rows, max_k));
  size_t copy = 0;
  for (auto _ : state) {
    const uint8_t* packed =
        static_cast<const uint8_t*>(w.buffer.get()) + copy * w.pass_bytes;
    for (const Linear& l : linears) {
      kernels::QuantRowsLinear(t, x.data(), rows, l.k, packed, bias.data(), l.n,
                               y.data(), scratch.data(), threads, reading);
      packed += kernels::QuantPackedBytes(t, l.n, l.k);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    copy = (copy + 1) % w.copies;
  }
  SetByteAndTokenRates(state, double(w.pass_bytes), double(rows));
}

std::string Shape(Linear l) {
  return "k:" + std::to_string(l.k) + "/n:" + std::to_string(l.n);
}

void Register(QuantType t, const char* type) {
  const std::string prefix = std::string("quant/") + type + "/";
  for (int threads : {1, 2}) {
    const std::string suffix = "/threads:" + std::to_string(threads);
    for (size_t rows : {size_t{1}, size_t{8}}) {
      struct Case {
        std::string name;
        std::vector<Linear> linears;
        kernels::QuantReading reading = kernels::QuantReadingOfThisCpu();
      };
      std::vector<Case> cases;
      for (const Linear& l : kLlamaShapes) cases.push_back({Shape(l), {l}});
      for (const Linear& l : kGpt2Shapes) cases.push_back({Shape(l), {l}});
      const std::vector<Linear> layer(std::begin(kLlamaLayer),
                                      std::end(kLlamaLayer));
      cases.push_back({"llama-layer/reading:group-by-group", layer,
                       kernels::QuantReading::kGroupByGroup});
      cases.push_back({"llama-layer/reading:side-by-side", layer,
                       kernels::QuantReading::kSideBySide});
      for (const Case& c : cases) {
        const std::string full =
            prefix + c.name + "/rows:" + std::to_string(rows) + suffix;
        benchmark::RegisterBenchmark(
            full.c_str(),
            [t, c, rows, threads](benchmark::State& st) {
              QuantLinearBench(st, t, c.linears, rows, threads, c.reading);
            })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace

void RegisterAll() {
  Register(QuantType::kQ8_0, "q8_0");
  Register(QuantType::kQ4_0, "q4_0");
}

}  // namespace attn::bench
