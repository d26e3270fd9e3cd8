// The attention core alone (kernels/attention.h): softmax(q k^T, causal) v
// over every (batch, head, query block) of a grid shape, from the head-major
// q/k/v the fused projection writes, at 1..N threads. FLOP/s counts the
// causal half, 2*b*T^2*d_out, as the peers' convention does; the query
// block size swept on one thread; grouped-query K/V heads (gpt2-1k with 12
// query heads over 12, 6, 3 and 1 K/V heads, long-4k with 8 over 8 and 2)
// and a sliding window at T = 8192 against full causal attention, at 1 and
// 2 threads.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/runtime/buffer.h"
#include "kernels/attention.h"

namespace attn::bench {
namespace {

using kernels::DataType;

// Grouped-query heads and the window of a run; zeros: plain causal MHA.
struct Variant {
  int64_t num_kv_heads = 0, window = 0;
};

void Core(benchmark::State& state, const GridShape& s, DataType type,
          int threads, int64_t query_block, Variant variant = {}) {
  kernels::AttentionShape shape;
  shape.query_block = query_block;
  shape.num_kv_heads = variant.num_kv_heads;
  shape.window = variant.window;
  shape.batch = s.batch;
  shape.seq_len = s.seq_len;
  shape.num_heads = s.heads;
  shape.head_dim = s.d_out / s.heads;
  shape.type = type;
  Result<kernels::CausalAttention> core =
      kernels::CausalAttention::Create(shape);
  if (!core.ok()) {
    state.SkipWithError(core.status().message().c_str());
    return;
  }
  const size_t rows = static_cast<size_t>(s.batch * s.seq_len);
  const size_t elem = kernels::SizeOf(type);
  // q/k/v (at most 3 * d_out per row) of small random floats; as bf16 their bit
  // patterns are small numbers too, so no inf or NaN slows the exp.
  const std::vector<float> qkv =
      RandomFloats(rows * size_t(3 * s.d_out) * elem / 4, 0.5f, 3);
  Result<AlignedBuffer> ctx = AlignedBuffer::Allocate(rows * s.d_out * elem);
  Result<AlignedBuffer> scratch =
      AlignedBuffer::Allocate(core->worker_scratch_bytes() * threads);
  if (!ctx.ok() || !scratch.ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    core->Run(qkv.data(), ctx->data(), scratch->data(), threads);
    benchmark::ClobberMemory();
  }
  SetRates(state, CoreFlops(s), double(rows));
  state.counters["threads"] = threads;
}

const GridShape kWindowShape = {"win-8k", 1, 8192, 256, 256, 4, 0, 0.0};

void RegisterVariant(const std::string& name, const GridShape& s,
                     Variant variant) {
  for (int threads : {1, 2}) {
    const std::string full = name + "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(full.c_str(),
                                 [&s, threads, variant](benchmark::State& st) {
                                   Core(st, s, DataType::kF32, threads,
                                        kernels::AttentionShape().query_block,
                                        variant);
                                 })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

// Grouped-query attention on gpt2-1k, long-4k and llama-2k, and a 512-key
// window at T = 8192.
void RegisterVariants() {
  const GridShape& gpt2_1k = PeerGrid()[2];
  for (int64_t kv_heads : {12, 6, 3, 1}) {
    RegisterVariant("core_gqa/gpt2-1k/f32/kv_heads:" + std::to_string(kv_heads),
                    gpt2_1k, {kv_heads, 0});
  }
  // At T = 4096 a head's K (1 MiB) outgrows L2: where sharing it counts.
  const GridShape& long_4k = PeerGrid()[4];
  for (int64_t kv_heads : {8, 2}) {
    RegisterVariant("core_gqa/long-4k/f32/kv_heads:" + std::to_string(kv_heads),
                    long_4k, {kv_heads, 0});
  }
  // llama-2k's core (32 query heads on 8 K/V heads, T = 2048; RoPE is
  // applied before the core, so not here): the block's attention share.
  RegisterVariant("core_gqa/llama-2k/f32/kv_heads:8", kLlama2k, {8, 0});
  for (int64_t window : {0, 512}) {
    RegisterVariant("core_window/win-8k/f32/window:" + std::to_string(window),
                    kWindowShape, {0, window});
  }
}

}  // namespace

void RegisterAll() {
  for (DataType type : {DataType::kF32, DataType::kBF16}) {
    if (type == DataType::kBF16 && !GetRuntimeInfo().native_bf16) continue;
    for (const GridShape& s : PeerGrid()) {
      for (int threads : ThreadCounts()) {
        const std::string name = std::string("core/") + s.name + "/" +
                                 (type == DataType::kF32 ? "f32" : "bf16") +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [&s, type, threads](benchmark::State& st) {
              Core(st, s, type, threads, kernels::AttentionShape().query_block);
            })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  RegisterVariants();
  // The query block (kernels/attention.h fixes 128 rows), swept on one
  // thread.
  for (const GridShape& s : PeerGrid()) {
    if (s.seq_len < 1024) continue;
    for (int64_t rows : {32, 64, 128, 256}) {
      const std::string name = std::string("core_query_block/") + s.name +
                               "/f32/rows:" + std::to_string(rows);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&s, rows](benchmark::State& st) {
                                     Core(st, s, DataType::kF32, 1, rows);
                                   })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace attn::bench
