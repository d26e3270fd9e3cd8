// The whole block through the public API (MhaModel + MhaSession), on the
// grid shapes at 1..N threads, f32 and bf16: what `attn bench` times, in
// Google Benchmark's harness. FLOP/s per the peers' convention.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "bench/bench_util.h"
#include "bench/grid.h"

namespace attn::bench {
namespace {

void Block(benchmark::State& state, const GridShape& s, DType dtype,
           int threads) {
  const auto din = size_t(s.d_in), dout = size_t(s.d_out);
  const auto rows = size_t(s.batch * s.seq_len);
  MhaConfig config;
  config.d_in = s.d_in;
  config.d_out = s.d_out;
  config.num_heads = s.heads;
  const RandomMhaWeights weights = MakeRandomMhaWeights(config, 1);
  const std::vector<float> x = RandomFloats(rows * din, 1.0f, 6);
  std::vector<float> y(rows * dout);
  MhaOptions options;
  options.num_threads = threads;
  options.dtype = dtype;
  auto model = MhaModel::Create(config, weights.view(), options);
  if (!model.ok()) {
    state.SkipWithError(model.status().message().c_str());
    return;
  }
  MhaSession session(*model);
  const Status prepared = session.Prepare(s.batch, s.seq_len);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.message().c_str());
    return;
  }
  for (auto _ : state) {
    const Status st = session.Run(x.data(), s.batch, s.seq_len, y.data());
    if (!st.ok()) state.SkipWithError(st.message().c_str());
    benchmark::ClobberMemory();
  }
  SetRates(state, BlockFlops(s), double(rows));
  state.counters["threads"] = threads;
}

}  // namespace

void RegisterAll() {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    if (dtype == DType::kBF16 && !GetRuntimeInfo().native_bf16) continue;
    for (const GridShape& s : PeerGrid()) {
      for (int threads : ThreadCounts()) {
        const std::string name = std::string("block/") + s.name + "/" +
                                 (dtype == DType::kF32 ? "f32" : "bf16") +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [&s, dtype, threads](benchmark::State& st) {
              Block(st, s, dtype, threads);
            })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace attn::bench
