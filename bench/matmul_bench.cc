// The attention core's tile matmuls (kernels/matmul.h), single-threaded as
// each worker runs them: scores = q_blk [64, D] x k^T [D, N] and
// ctx_blk = p [64, N] x v [N, D], for head_dim D = 64, in f32 and bf16.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/matmul.h"

namespace attn::bench {
namespace {

using kernels::DataType;
using kernels::MatMul;

constexpr int64_t kRows = 64, kHeadDim = 64;

void Tile(benchmark::State& state, bool scores, DataType type) {
  const int64_t M = kRows, D = kHeadDim, N = state.range(0);
  Result<MatMul> mm =
      scores ? MatMul::Create({{M, D}, {}, type}, {{D, N}, {1, D}, type},
                              nullptr, {{M, N}, {}, DataType::kF32}, true)
             : MatMul::Create({{M, N}, {}, type}, {{N, D}, {D, 1}, type},
                              nullptr, {{M, D}, {}, type}, true);
  if (!mm.ok()) {
    state.SkipWithError(mm.status().message().c_str());
    return;
  }
  // Random bytes are fine for bf16 timing too: no value is ever inspected;
  // they are small floats read either way.
  const std::vector<float> a = RandomFloats(size_t(M * std::max(D, N)), 1, 1);
  const std::vector<float> b = RandomFloats(size_t(N * D), 1, 2);
  std::vector<float> out(size_t(M * std::max(D, N)));
  std::vector<char> scratch(mm->scratch_bytes() + 64);
  for (auto _ : state) {
    mm->Run(a.data(), b.data(), nullptr, out.data(), scratch.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, 2.0 * M * N * D, 0);
  state.SetLabel(mm->impl_name());
}

}  // namespace

void RegisterAll() {
  for (DataType type : {DataType::kF32, DataType::kBF16}) {
    if (type == DataType::kBF16 && !GetRuntimeInfo().native_bf16) continue;
    const std::string t = type == DataType::kF32 ? "f32" : "bf16";
    for (bool scores : {true, false}) {
      benchmark::RegisterBenchmark(
          ((scores ? "tile/scores/" : "tile/context/") + t).c_str(),
          [scores, type](benchmark::State& s) { Tile(s, scores, type); })
          ->ArgName("keys")
          ->RangeMultiplier(4)
          ->Range(64, 4096)
          ->UseRealTime();
    }
  }
}

}  // namespace attn::bench
