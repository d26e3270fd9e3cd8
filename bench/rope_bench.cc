// The RoPE pass alone (kernels/rope.h) as the block runs it on llama-2k
// (bench/grid.h's kLlama2k): after the projection, the 32 q and 8 k
// head-major planes of T rows of head_dim 64 rotated in place, position
// r for row r: the most that fusing it into the projection's epilogue
// could save, next to the block's
// (`attn bench --shape llama-2k`). bytes/s counts each plane read and
// written once.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/rope.h"

namespace attn::bench {
namespace {

void Rope(benchmark::State& state, const GridShape& s, int threads) {
  const auto rows = static_cast<size_t>(s.batch * s.seq_len);
  const auto head_dim = static_cast<size_t>(s.d_out / s.heads);
  const auto heads = static_cast<size_t>(s.heads + s.kv_heads);
  kernels::RopeConfig config;
  config.theta = static_cast<float>(s.rope_theta);
  Result<kernels::RopeTable> table = kernels::RopeTable::Create(
      config, static_cast<int64_t>(head_dim), s.seq_len);
  if (!table.ok()) {
    state.SkipWithError(table.status().message().c_str());
    return;
  }
  std::vector<float> planes =
      RandomFloats(heads * rows * head_dim, 1.0f, 1);  // q planes, then k
  std::vector<int64_t> positions(rows);
  std::iota(positions.begin(), positions.end(), int64_t{0});
  const kernels::RopeRows view{planes.data(), rows, head_dim, heads,
                               rows * head_dim};
  for (auto _ : state) {
    // A rotation keeps the values bounded: re-running in place is fair.
    kernels::ApplyRope(*table, view, positions.data(), threads);
    benchmark::DoNotOptimize(planes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(double(state.iterations()) *
                                               8.0 * double(planes.size())));
  state.counters["threads"] = threads;
}

}  // namespace

void RegisterAll() {
  for (int threads : ThreadCounts()) {
    const std::string name = std::string("rope/") + kLlama2k.name +
                             "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [threads](benchmark::State& st) { Rope(st, kLlama2k, threads); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

}  // namespace attn::bench
