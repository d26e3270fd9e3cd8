// What handing work to a second thread costs, the figures behind
// kernels::kParallelGrainFloats (kernels/threads.h):
//
//   BM_Region          an empty `omp parallel` region of `threads` threads
//   BM_RegionIfOff     the same region with an `if` clause that turns it off
//   BM_Barrier         an `omp barrier` inside one long region
//   BM_LinePingPong    one cache line passed between two threads and back
//                      (two core-to-core transfers)
//   BM_SmallChunks     ParallelForChunks over a decode step's residual add
//                      (8 rows of 768), one chunk: runs on the caller
//
// Run with OMP_PROC_BIND=close for stable numbers (engine/README.md,
// "Threads").
#include <benchmark/benchmark.h>
#include <omp.h>

#include <atomic>
#include <cstddef>
#include <vector>

#include "kernels/threads.h"

namespace {

void BM_Region(benchmark::State& state) {
  const auto threads = static_cast<int>(state.range(0));
  int sink = 0;
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      if (omp_get_thread_num() == 0) sink = omp_get_num_threads();
    }
    benchmark::DoNotOptimize(sink);
  }
}
BENCHMARK(BM_Region)->Arg(2)->UseRealTime();

void BM_RegionIfOff(benchmark::State& state) {
  int sink = 0;
  volatile bool on = false;
  for (auto _ : state) {
#pragma omp parallel num_threads(2) if (on)
    { sink = omp_get_num_threads(); }
    benchmark::DoNotOptimize(sink);
  }
}
BENCHMARK(BM_RegionIfOff)->UseRealTime();

// A thousand barriers in one region, timed by hand (ns_each: one barrier): a
// region per barrier would time BM_Region instead.
void BM_Barrier(benchmark::State& state) {
  double total = 0;
  for (auto _ : state) {
    double seconds = 0;
    int team = 0;
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) team = omp_get_num_threads();
#pragma omp barrier
      const double t0 = omp_get_wtime();
      for (int i = 0; i < 1000; ++i) {
#pragma omp barrier
      }
      if (omp_get_thread_num() == 0) seconds = omp_get_wtime() - t0;
    }
    if (team != 2) return state.SkipWithError("no team of two threads");
    state.SetIterationTime(seconds);
    total += seconds;
  }
  state.counters["ns_each"] =
      1e9 * total / (1000.0 * static_cast<double>(state.iterations()));
}
BENCHMARK(BM_Barrier)->UseManualTime();

// A thousand round trips between two OpenMP threads (on two cores, as the
// kernels' threads are), timed by hand (ns_each: one round trip).
void BM_LinePingPong(benchmark::State& state) {
  constexpr int kTrips = 1000;
  double total = 0;
  for (auto _ : state) {
    alignas(64) std::atomic<int> turn{0};
    double seconds = 0;
    bool paired = true;
#pragma omp parallel num_threads(2)
    {
      const int self = omp_get_thread_num();
      if (omp_get_num_threads() != 2) {
        paired = false;  // a lone thread would wait for its partner forever
      } else {
#pragma omp barrier
        const double t0 = omp_get_wtime();
        for (int trip = 0; trip < kTrips; ++trip) {
          // Thread 0 writes 2 trip + 1 when it sees 2 trip, thread 1 the
          // next even number when it sees that.
          const int mine = 2 * trip + self;
          while (turn.load(std::memory_order_acquire) != mine) {
          }
          turn.store(mine + 1, std::memory_order_release);
        }
        if (self == 0) seconds = omp_get_wtime() - t0;
      }
    }
    if (!paired) return state.SkipWithError("no team of two threads");
    state.SetIterationTime(seconds);
    total += seconds;
  }
  state.counters["ns_each"] =
      1e9 * total / (double(kTrips) * static_cast<double>(state.iterations()));
}
BENCHMARK(BM_LinePingPong)->UseManualTime();

void BM_SmallChunks(benchmark::State& state) {
  std::vector<float> a(8 * 768, 1.0f), b(a.size(), 2.0f);
  for (auto _ : state) {
    attn::kernels::ParallelForChunks(
        a.size(), 1, 16, 2, [&](size_t first, size_t n) {
          for (size_t i = first; i < first + n; ++i) a[i] += b[i];
        });
    benchmark::DoNotOptimize(a.data());
  }
}
BENCHMARK(BM_SmallChunks)->UseRealTime();

}  // namespace
