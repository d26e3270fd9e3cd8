// Shared by the Google Benchmark programs in bench/: the peers' named shape
// grid, the FLOP convention, seeded random data, and a main() that records
// the Highway target, oneDNN ISA and default thread count in the context.
#ifndef ATTN_BENCH_BENCH_UTIL_H_
#define ATTN_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.hpp"

namespace attn::bench {

struct GridShape {
  const char* name;
  int64_t batch, seq_len, d_in, d_out, heads;
};

// The grid of ../shared/anchors (the peers' benchmarks use the same).
inline const std::vector<GridShape>& Grid() {
  static const std::vector<GridShape> grid = {
      {"seed", 2, 6, 3, 2, 2},
      {"gpt2-128", 8, 128, 768, 768, 12},
      {"gpt2-1k", 1, 1024, 768, 768, 12},
      {"gpt2-1k-b4", 4, 1024, 768, 768, 12},
      {"long-4k", 1, 4096, 512, 512, 8},
  };
  return grid;
}

// The attention core's FLOPs at its causal half: 2*b*T^2*d_out.
inline double CoreFlops(const GridShape& s) {
  return 2.0 * s.batch * double(s.seq_len) * s.seq_len * s.d_out;
}

// The whole block: 2*b*T*(3*d_in*d_out + d_out^2) + the core.
inline double BlockFlops(const GridShape& s) {
  return 2.0 * s.batch * s.seq_len *
             (3.0 * s.d_in * s.d_out + double(s.d_out) * s.d_out) +
         CoreFlops(s);
}

inline std::vector<float> RandomFloats(size_t n, float bound, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

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

// Registers the program's benchmarks (defined by each *_bench.cc).
void RegisterAll();

}  // namespace attn::bench

#endif  // ATTN_BENCH_BENCH_UTIL_H_
