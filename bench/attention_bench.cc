// The attention core alone (kernels/attention.h): softmax(q k^T, causal) v
// over every (batch, head, query block) of a grid shape, from the head-major
// q/k/v the fused projection writes, at 1..N threads. FLOP/s counts the
// causal half, 2*b*T^2*d_out, as the peers' convention does; and the query
// block size swept on one thread.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/buffer.h"
#include "kernels/attention.h"

namespace attn::bench {
namespace {

using kernels::DataType;

void Core(benchmark::State& state, const GridShape& s, DataType type,
          int threads, int64_t query_block) {
  kernels::AttentionShape shape;
  shape.query_block = query_block;
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
  // q/k/v of small random floats; as bf16 their bit patterns are small
  // numbers too, so no inf or NaN slows the exp.
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
