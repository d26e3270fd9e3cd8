// Shared by the Google Benchmark programs in bench/: the shape grid, FLOP
// convention and seeded random data (bench/grid.h), rate counters, and a
// main() that records the Highway target, oneDNN ISA and default thread count
// in the context.
#ifndef ATTN_BENCH_BENCH_UTIL_H_
#define ATTN_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <vector>

#include "attn/attn.hpp"
#include "bench/grid.h"

namespace attn::bench {

// Rate counters, divided by real time (every benchmark here uses it).
inline void SetRates(benchmark::State& state, double flops, double tokens) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  if (tokens > 0) {
    state.counters["tokens/s"] = benchmark::Counter(
        tokens, benchmark::Counter::kIsIterationInvariantRate);
  }
}

// Thread counts to sweep: 1 up to the library's default team size.
inline std::vector<int> ThreadCounts() {
  std::vector<int> counts;
  for (int n = 1; n <= GetRuntimeInfo().default_threads; ++n) {
    counts.push_back(n);
  }
  return counts;
}

// Bytes of weights a benchmark cycles through, so that none is still in a
// cache when it is read again: the environment variable `env` in MiB, else
// 1024 (a Xeon we measure on has 480 MiB of L3).
inline size_t WeightBudgetBytes(const char* env) {
  size_t mib = 1024;
  if (const char* value = std::getenv(env)) {
    mib = std::max<size_t>(1, std::strtoull(value, nullptr, 10));
  }
  return mib << 20;
}

// Frees what engine/runtime/huge_pages.h's AllocateStreamed returned.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Registers the program's benchmarks (defined by each *_bench.cc).
void RegisterAll();

}  // namespace attn::bench

#endif  // ATTN_BENCH_BENCH_UTIL_H_
