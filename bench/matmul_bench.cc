// The block's matmuls (kernels/matmul.h), in f32 and bf16:
// - the attention core's tiles, single-threaded as each worker runs them:
//   scores = q_blk [128, D] x k^T [D, N] and ctx_blk = p [128, N] x v [N, D]
//   for head_dim D = 64, N keys;
// - the projections on the grid's shapes at 1..N threads: the fused
//   x [b*T, d_in] -> q/k/v head-major, and out_proj. Their FLOP/s is the
//   ceiling the projection-bound shapes (gpt2-128) can reach; their weights
//   stay in cache.
// - prefill/llama-128: a 128-token prompt through the Llama-3.2-1B shape's
//   linears (qkv 2048 -> 3072, gate or up 2048 -> 8192, down 8192 -> 2048)
//   as a model runs them: weights packed, cycled through copies of
//   ATTN_MATMUL_MIB in all (1024 by default; the smoke test uses 8) so
//   that each is read from memory, as a prefill reads a layer's.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/runtime/huge_pages.h"
#include "hwy/base.h"
#include "kernels/matmul.h"

namespace attn::bench {
namespace {

using kernels::DataType;
using kernels::MatMul;

constexpr int64_t kRows = 128, kHeadDim = 64;  // the core's query block

void Tile(benchmark::State& state, bool scores, DataType type) {
  const int64_t M = kRows, D = kHeadDim, N = state.range(0);
  Result<MatMul> mm =
      scores ? MatMul::Create({{M, D}, {}, type}, {{D, N}, {1, D}, type},
                              nullptr, {{M, N}, {}, DataType::kF32},
                              kernels::Threading::kWorker)
             : MatMul::Create({{M, N}, {}, type}, {{N, D}, {D, 1}, type},
                              nullptr, {{M, D}, {}, DataType::kF32},
                              kernels::Threading::kWorker);
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
    mm->Run(a.data(), b.data(), nullptr, out.data(), scratch.data(), 1);
    benchmark::ClobberMemory();
  }
  SetRates(state, 2.0 * M * N * D, 0);
  state.SetLabel(mm->impl_name());
}

void Projection(benchmark::State& state, const GridShape& s, bool fused_qkv,
                DataType type, int threads) {
  omp_set_num_threads(threads);
  const int64_t R = s.batch * s.seq_len, H = s.heads, D = s.d_out / s.heads;
  const int64_t in = fused_qkv ? s.d_in : s.d_out;
  const int64_t out = fused_qkv ? 3 * s.d_out : s.d_out;
  // As engine/mha.cc creates them (the book's default: no q/k/v bias),
  // weights packed by oneDNN.
  const kernels::Operand out_bias{{1, out}, {}, DataType::kF32};
  Result<MatMul> mm =
      fused_qkv
          ? MatMul::Create({{1, R, in}, {}, type}, {{3 * H, in, D}, {}, type},
                           nullptr, {{3 * H, R, D}, {}, type},
                           kernels::Threading::kTeam)
          : MatMul::Create({{R, in}, {}, type}, {{in, out}, {}, type},
                           &out_bias, {{R, out}, {}, DataType::kF32},
                           kernels::Threading::kTeam);
  if (!mm.ok()) {
    state.SkipWithError(mm.status().message().c_str());
    return;
  }
  const std::vector<float> x = RandomFloats(size_t(R * in), 1, 1);
  const std::vector<float> b = RandomFloats(size_t(out), 1, 2);
  std::vector<char> w(mm->packed_weights_bytes());
  std::vector<float> y(size_t(R * out));
  std::vector<char> scratch(mm->scratch_bytes() * size_t(threads) + 64);
  for (auto _ : state) {
    mm->Run(x.data(), w.data(), b.data(), y.data(), scratch.data(), threads);
    benchmark::ClobberMemory();
  }
  SetRates(state, 2.0 * double(R) * double(in) * double(out), double(R));
  state.counters["threads"] = threads;
  state.SetLabel(mm->impl_name());
}

// The 128 rows of a prompt x [128, k] through packed weights [k, n] into
// fp32 y, on `threads` threads, each run on the next copy of the weights.
void Prefill(benchmark::State& state, int64_t k, int64_t n, DataType type,
             int threads) {
  constexpr int64_t kPrompt = 128;
  omp_set_num_threads(threads);
  Result<MatMul> mm = MatMul::Create(
      {{kPrompt, k}, {}, type}, {{k, n}, {}, type}, nullptr,
      {{kPrompt, n}, {}, DataType::kF32}, kernels::Threading::kTeam);
  if (!mm.ok()) {
    state.SkipWithError(mm.status().message().c_str());
    return;
  }
  const size_t elements = size_t(k * n);
  const std::vector<float> plain = RandomFloats(elements, 0.05f, 3);
  std::vector<hwy::bfloat16_t> plain_bf16(type == DataType::kBF16 ? elements
                                                                  : 0);
  for (size_t i = 0; i < plain_bf16.size(); ++i) {
    plain_bf16[i] = hwy::BF16FromF32(plain[i]);
  }
  const size_t bytes = mm->packed_weights_bytes();
  const size_t copies =
      std::max<size_t>(1, WeightBudgetBytes("ATTN_MATMUL_MIB") / bytes);
  const std::unique_ptr<void, FreeDeleter> buffer(
      AllocateStreamed(copies * bytes));
  if (!buffer) std::abort();
  char* w = static_cast<char*>(buffer.get());
  const Status packed = mm->PackWeights(
      {{k, n}, {}, type},
      type == DataType::kBF16 ? static_cast<const void*>(plain_bf16.data())
                              : plain.data(),
      w);
  if (!packed.ok()) {
    state.SkipWithError(packed.message().c_str());
    return;
  }
  for (size_t c = 1; c < copies; ++c) std::memcpy(w + c * bytes, w, bytes);
  std::vector<float> x_f32 = RandomFloats(size_t(kPrompt * k), 1, 1);
  std::vector<hwy::bfloat16_t> x_bf16(type == DataType::kBF16 ? x_f32.size()
                                                              : 0);
  for (size_t i = 0; i < x_bf16.size(); ++i) {
    x_bf16[i] = hwy::BF16FromF32(x_f32[i]);
  }
  const void* x = type == DataType::kBF16
                      ? static_cast<const void*>(x_bf16.data())
                      : x_f32.data();
  std::vector<float> y(size_t(kPrompt * n));
  std::vector<char> scratch(mm->scratch_bytes() * size_t(threads) + 64);
  size_t copy = 0;
  for (auto _ : state) {
    mm->Run(x, w + copy * bytes, nullptr, y.data(), scratch.data(), threads);
    benchmark::ClobberMemory();
    copy = copy + 1 == copies ? 0 : copy + 1;
  }
  SetRates(state, 2.0 * double(kPrompt) * double(k) * double(n), kPrompt);
  state.counters["threads"] = threads;
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
    for (const GridShape& s : PeerGrid()) {
      if (s.seq_len < 128) continue;  // seed takes the tiny path
      for (bool qkv : {true, false}) {
        for (int threads : ThreadCounts()) {
          const std::string name = std::string("proj/") + s.name +
                                   (qkv ? "/qkv/" : "/out/") + t +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), [&s, qkv, type, threads](
                                                         benchmark::State& st) {
            Projection(st, s, qkv, type, threads);
          })->UseRealTime();
        }
      }
    }
    struct Shape {
      int64_t k, n;
    };
    for (Shape s : {Shape{2048, 3072}, Shape{2048, 8192}, Shape{8192, 2048}}) {
      for (int threads : ThreadCounts()) {
        const std::string name = "prefill/llama-128/k:" + std::to_string(s.k) +
                                 "/n:" + std::to_string(s.n) + "/" + t +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), [s, type, threads](
                                                       benchmark::State& st) {
          Prefill(st, s.k, s.n, type, threads);
        })->UseRealTime();
      }
    }
  }
}

}  // namespace attn::bench
