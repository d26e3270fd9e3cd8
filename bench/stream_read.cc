// STREAM-style read bandwidth: the sum of one large float array (1 GiB by
// default, far above the caches), at 1 and 2 OpenMP threads (and at the
// machine's team size when it is larger). Decode at batch 1 reads every
// weight once per token, so this is the ceiling its tokens/s is read against.
//
// Each thread reads one contiguous, 64-byte aligned part (a static schedule)
// with a Highway kernel chosen at run time (the project builds without
// -march), as one stream or as 8 equal pieces side by side: one stream a
// thread leaves memory idle between the core's requests on some CPUs (an
// Ice Lake Xeon reads 12-13 GB/s a thread from one, 14-16 from 8), so the
// floor is the faster of the two. Independent vector accumulators let the
// loops vectorise without reassociation flags; the order of the sum does
// not matter here. The array is touched before timing, by the widest team,
// on huge pages where Linux allows, as the engine keeps its weights
// (engine/huge_pages.h).
//
// One benchmark iteration is one pass over the array. Counters:
//   bytes/s       bytes read / mean pass time (Google Benchmark's rate)
//   best_bytes/s  bytes read / fastest pass (STREAM's "best of NTIMES")
//   threads       the team size of the pass
//   streams       the streams each thread reads side by side (1 or 8)
// ATTN_STREAM_MIB sets the array size in MiB (the smoke test uses 64).
//
//   stream_read --benchmark_repetitions=3
//
// Unlike decode_bench's BM_StreamRead (256 MiB, SSE-width vectors, the team
// size from OMP_NUM_THREADS), this one fixes its thread counts and uses the
// machine's widest vectors, so one run gives both points.
#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/stream_read.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attn::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of p[0, n): n is a multiple of 4 vectors' lanes (the caller keeps
// the parts 64-byte aligned and a multiple of 64 floats).
float SumAligned(const float* HWY_RESTRICT p, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  for (size_t i = 0; i < n; i += 4 * N) {
    s0 = hn::Add(s0, hn::Load(d, p + i));
    s1 = hn::Add(s1, hn::Load(d, p + i + N));
    s2 = hn::Add(s2, hn::Load(d, p + i + 2 * N));
    s3 = hn::Add(s3, hn::Load(d, p + i + 3 * N));
  }
  return hn::GetLane(
      hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

// Sum of p[0, n) read as 8 equal pieces side by side, two vectors of each
// at a time; the rest (under 16 vectors) as one stream. n is a multiple of
// 4 vectors' lanes.
float SumEightStreams(const float* HWY_RESTRICT p, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t piece = n / (8 * 2 * N) * (2 * N);
  const float* q[8];
  for (size_t s = 0; s < 8; ++s) q[s] = p + s * piece;
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  auto s4 = hn::Zero(d), s5 = hn::Zero(d), s6 = hn::Zero(d), s7 = hn::Zero(d);
  for (size_t i = 0; i < piece; i += 2 * N) {
    s0 = hn::Add(s0, hn::Add(hn::Load(d, q[0] + i), hn::Load(d, q[0] + i + N)));
    s1 = hn::Add(s1, hn::Add(hn::Load(d, q[1] + i), hn::Load(d, q[1] + i + N)));
    s2 = hn::Add(s2, hn::Add(hn::Load(d, q[2] + i), hn::Load(d, q[2] + i + N)));
    s3 = hn::Add(s3, hn::Add(hn::Load(d, q[3] + i), hn::Load(d, q[3] + i + N)));
    s4 = hn::Add(s4, hn::Add(hn::Load(d, q[4] + i), hn::Load(d, q[4] + i + N)));
    s5 = hn::Add(s5, hn::Add(hn::Load(d, q[5] + i), hn::Load(d, q[5] + i + N)));
    s6 = hn::Add(s6, hn::Add(hn::Load(d, q[6] + i), hn::Load(d, q[6] + i + N)));
    s7 = hn::Add(s7, hn::Add(hn::Load(d, q[7] + i), hn::Load(d, q[7] + i + N)));
  }
  const auto sum = hn::Add(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)),
                           hn::Add(hn::Add(s4, s5), hn::Add(s6, s7)));
  return hn::GetLane(hn::SumOfLanes(d, sum)) +
         SumAligned(p + 8 * piece, n - 8 * piece);
}

}  // namespace attn::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/huge_pages.h"
#include "hwy/targets.h"

namespace attn::bench {

HWY_EXPORT(SumAligned);
HWY_EXPORT(SumEightStreams);

namespace {

constexpr size_t kBlock = 64;  // floats per part boundary: 256 bytes

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

size_t ArrayFloats() {
  size_t mib = 1024;
  if (const char* env = std::getenv("ATTN_STREAM_MIB")) {
    mib = std::max<size_t>(1, std::strtoull(env, nullptr, 10));
  }
  return (mib << 20) / sizeof(float);
}

int WidestTeam() { return std::max(2, omp_get_num_procs()); }

// Allocated and touched once, by the widest team, for every benchmark.
const float* Array() {
  static const std::unique_ptr<float[], FreeDeleter> array = [] {
    const size_t n = ArrayFloats();
    std::unique_ptr<float[], FreeDeleter> a(
        static_cast<float*>(AllocateStreamed(n * sizeof(float))));
    if (!a) std::abort();
    const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) num_threads(WidestTeam())
    for (int64_t i = 0; i < count; ++i) {
      a[static_cast<size_t>(i)] = static_cast<float>(i & 7);
    }
    // Chooses the target once, before any team calls the kernel.
    benchmark::DoNotOptimize(HWY_DYNAMIC_DISPATCH(SumAligned)(a.get(), kBlock));
    return a;
  }();
  return array.get();
}

// One pass: thread t sums blocks [t * B / T, (t + 1) * B / T) as 1 or 8
// streams.
float ParallelSum(const float* a, size_t n, int threads, int streams) {
  const auto sum = streams == 8 ? HWY_DYNAMIC_DISPATCH(SumEightStreams)
                                : HWY_DYNAMIC_DISPATCH(SumAligned);
  const size_t blocks = n / kBlock;
  std::vector<float> partial(static_cast<size_t>(threads), 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    const auto team = static_cast<size_t>(omp_get_num_threads());
    const size_t begin = blocks * t / team, end = blocks * (t + 1) / team;
    partial[t] = sum(a + begin * kBlock, (end - begin) * kBlock);
  }
  float total = 0.0f;
  for (float s : partial) total += s;
  return total;
}

void BM_StreamRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int streams = static_cast<int>(state.range(1));
  const float* a = Array();
  const size_t n = ArrayFloats() / kBlock * kBlock;
  const double bytes = double(n) * sizeof(float);
  double best_s = 1e30;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    float total = ParallelSum(a, n, threads, streams);
    benchmark::DoNotOptimize(total);
    const std::chrono::duration<double> pass =
        std::chrono::steady_clock::now() - start;
    best_s = std::min(best_s, pass.count());
  }
  state.counters["bytes/s"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["best_bytes/s"] =
      benchmark::Counter(bytes / best_s, benchmark::Counter::kDefaults,
                         benchmark::Counter::kIs1000);
  state.counters["threads"] = threads;
  state.counters["streams"] = streams;
  state.SetLabel(std::to_string(n * sizeof(float) >> 20) + " MiB");
}

void Register() {
  std::vector<int> counts = {1, 2};
  if (omp_get_num_procs() > 2) counts.push_back(omp_get_num_procs());
  for (int t : counts) {
    benchmark::RegisterBenchmark("BM_StreamRead", BM_StreamRead)
        ->ArgNames({"threads", "streams"})
        ->Args({t, 1})
        ->Args({t, 8})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace attn::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext(
      "highway_target",
      hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0]));
  benchmark::AddCustomContext(
      "array_mib",
      std::to_string(attn::bench::ArrayFloats() * sizeof(float) >> 20));
  attn::bench::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
#endif  // HWY_ONCE
