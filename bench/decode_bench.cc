// Decode with a KV cache against recomputing the prefix (the chapter-3 way),
// and the machine's memory bandwidth measured STREAM-style, so the decode
// step's K/V read can be put next to what the memory can deliver.
//
//   BM_StreamCopy   a[i] = b[i] over 2 x 256 MiB: STREAM's copy, counting
//                   read + write bytes as STREAM does.
//   BM_StreamRead   sum of 256 MiB: read-only, the access pattern of decode.
//   BM_DecodeStep   one MhaDecoder::Decode step of `batch` sequences whose
//                   new token attends to `context` keys; bytes = K/V read.
//   BM_RecomputePrefix  MhaSession::Run over [batch, context]: what one new
//                   token per sequence costs without a cache.
//   BM_DecodeKernel kernels::DecodeAttention alone, 12 query heads (32 in
//                   the Llama-shaped cases) over kv_heads K/V heads (12:
//                   plain MHA; 3: groups of 4), each
//                   row at `keys` keys of a cache of `capacity`, token major
//                   ([B, capacity, Hkv, Dp]) or head major ([B, Hkv,
//                   capacity, Dp]; the engine picks by
//                   kernels::DecodeBlocksHeads), at 1 and 2 threads, with this
//                   CPU's DecodePrefetch (prefetch 2) or each choice (0 none,
//                   1 keys ahead); bytes = K/V read. Small caches are
//                   repeated to about 1 GiB and taken in turn, as a model's
//                   layers are, so that calls read from memory (a Xeon we
//                   measure on has 480 MiB of L3): keys 160 of
//                   capacity 192 at batch 1 and 8 is a GPT-2 `attn bench
//                   --model` step (128-token prompts, 64 steps); of 1024, a
//                   cache of GPT-2's whole context (head major: heads 1024 keys
//                   apart).
// Model: d_in = d_out = 768, 12 heads (gpt2). Run with OMP_PROC_BIND=close
// for stable numbers (engine/README.md, "Threads").
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "bench/grid.h"
#include "engine/runtime/huge_pages.h"
#include "kernels/decode.h"

namespace {

constexpr size_t kStreamFloats = size_t{64} << 20;  // 256 MiB per array
constexpr int64_t kDim = 768, kHeads = 12;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeDeleter>;

// Aligned and on huge pages as the engine's buffers (engine/huge_pages.h),
// first touched by the threads that will use it.
Floats AllocateTouched(size_t n, float value) {
  Floats p(static_cast<float*>(attn::AllocateStreamed(n * sizeof(float))));
  if (!p) std::abort();
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) p[static_cast<size_t>(i)] = value;
  return p;
}

void BM_StreamCopy(benchmark::State& state) {
  const Floats a = AllocateTouched(kStreamFloats, 0.0f);
  const Floats b = AllocateTouched(kStreamFloats, 1.0f);
  const auto n = static_cast<int64_t>(kStreamFloats);
  for (auto _ : state) {
    float* dst = a.get();
    const float* src = b.get();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] =
      benchmark::Counter(2.0 * sizeof(float) * double(kStreamFloats),
                         benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_StreamCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_StreamRead(benchmark::State& state) {
  const Floats a = AllocateTouched(kStreamFloats, 1.0f);
  // 16-float blocks with independent partial sums: vectorises without
  // reassociation flags.
  typedef float V4 __attribute__((vector_size(16)));
  const auto blocks = static_cast<int64_t>(kStreamFloats / 16);
  for (auto _ : state) {
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
      V4 s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < blocks; ++i) {
        const V4* p = reinterpret_cast<const V4*>(a.get() + i * 16);
        s0 += p[0];
        s1 += p[1];
        s2 += p[2];
        s3 += p[3];
      }
      const V4 s = s0 + s1 + s2 + s3;
      total += s[0] + s[1] + s[2] + s[3];
    }
    benchmark::DoNotOptimize(total);
  }
  state.counters["bytes/s"] =
      benchmark::Counter(sizeof(float) * double(kStreamFloats),
                         benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_StreamRead)->UseRealTime()->Unit(benchmark::kMillisecond);

// Seeded gpt2-sized weights.
std::shared_ptr<const attn::MhaModel> Model() {
  static const std::shared_ptr<const attn::MhaModel> model = [] {
    attn::MhaConfig config;
    config.d_in = config.d_out = kDim;
    config.num_heads = kHeads;
    const attn::bench::RandomMhaWeights weights =
        attn::bench::MakeRandomMhaWeights(config, 0);
    auto created = attn::MhaModel::Create(config, weights.view());
    if (!created.ok()) std::abort();
    return *created;
  }();
  return model;
}

void BM_DecodeStep(benchmark::State& state) {
  const int64_t context = state.range(0), batch = state.range(1);
  const int64_t prompt = context - 1;
  attn::DecoderOptions options;
  options.batch = batch;
  options.max_length = context;
  auto decoder = attn::MhaDecoder::Create(Model(), options);
  if (!decoder.ok()) {
    state.SkipWithError(decoder.status().message().c_str());
    return;
  }
  attn::MhaDecoder& dec = **decoder;
  const auto d = static_cast<size_t>(kDim), b = static_cast<size_t>(batch);
  {  // Not timed: the prompt fills the cache to context - 1 tokens.
    const auto x =
        attn::bench::RandomFloats(b * static_cast<size_t>(prompt) * d, 1.0f, 1);
    std::vector<float> y(x.size());
    if (!dec.Prefill(x.data(), prompt, y.data()).ok()) std::abort();
  }
  const auto x1 = attn::bench::RandomFloats(b * d, 1.0f, 2);
  std::vector<float> y1(b * d);
  const double kv_bytes = double(dec.decode_kv_bytes());
  for (auto _ : state) {
    state.PauseTiming();
    for (int64_t s = 0; s < batch; ++s) (void)dec.Truncate(s, prompt);
    state.ResumeTiming();
    if (!dec.Decode(x1.data(), batch, y1.data()).ok()) std::abort();
  }
  state.counters["tokens/s"] = benchmark::Counter(
      double(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_bytes/s"] = benchmark::Counter(
      kv_bytes, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"context", "batch"})
    ->ArgsProduct({{1024, 4096}, {1, 8}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_RecomputePrefix(benchmark::State& state) {
  const int64_t context = state.range(0), batch = state.range(1);
  const auto x = attn::bench::RandomFloats(
      static_cast<size_t>(batch * context * kDim), 1.0f, 3);
  std::vector<float> y(x.size());
  attn::MhaSession session(Model());
  if (!session.Run(x.data(), batch, context, y.data()).ok()) std::abort();
  for (auto _ : state) {
    if (!session.Run(x.data(), batch, context, y.data()).ok()) std::abort();
  }
  // One new token per sequence per forward pass.
  state.counters["tokens/s"] = benchmark::Counter(
      double(batch), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RecomputePrefix)
    ->ArgNames({"context", "batch"})
    ->ArgsProduct({{1024, 4096}, {1, 8}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One decode step of `batch` rows at `keys` keys, straight on the kernel:
// the grouped K/V cache is what makes GQA decode cheaper.
void BM_DecodeKernel(benchmark::State& state) {
  const auto keys = static_cast<size_t>(state.range(0));
  const auto capacity = static_cast<size_t>(state.range(1));
  const auto heads = static_cast<size_t>(state.range(2));
  const auto kv_heads = static_cast<size_t>(state.range(3));
  const auto batch = static_cast<size_t>(state.range(4));
  const bool token_major = state.range(5) != 0;
  const int threads = static_cast<int>(state.range(6));
  namespace k = attn::kernels;
  const k::DecodePrefetch prefetch =
      state.range(7) == 2   ? k::DecodePrefetchOfThisCpu()
      : state.range(7) == 1 ? k::DecodePrefetch::kKeysAhead
                            : k::DecodePrefetch::kNone;
  k::DecodeParams params;
  params.num_heads = heads;
  params.num_kv_heads = kv_heads;
  params.head_dim = kDim / kHeads;  // 64, GPT-2's and Llama 3.2's
  params.padded_dim = k::DecodePaddedDim(params.head_dim);
  const size_t Dp = params.padded_dim, H = params.num_heads;
  params.key_stride = token_major ? kv_heads * Dp : Dp;
  params.head_stride = token_major ? Dp : capacity * Dp;
  params.scale = 0.125f;
  const size_t sequence = kv_heads * capacity * Dp;  // floats of K (or V)
  const size_t cache = batch * sequence;
  const size_t copies =
      std::max<size_t>(1, (size_t{1} << 30) / (2 * cache * sizeof(float)));
  const Floats kc = AllocateTouched(copies * cache, 0.01f);
  const Floats vc = AllocateTouched(copies * cache, 0.02f);
  const Floats q = AllocateTouched(batch * H * Dp, 0.03f);
  const Floats ctx = AllocateTouched(batch * H * params.head_dim, 0.0f);
  std::vector<k::DecodeRow> rows(batch);
  for (size_t r = 0; r < batch; ++r) {
    rows[r].q = q.get() + r * H * Dp;
    rows[r].num_keys = keys;
    rows[r].ctx = ctx.get() + r * H * params.head_dim;
    rows[r].first_partial = r * k::DecodeRowPartials(params, keys);
  }
  const Floats partials =
      AllocateTouched(k::DecodeNumPartials(params, rows.data(), batch) *
                          k::DecodePartialFloats(Dp),
                      0.0f);
  size_t copy = 0;
  for (auto _ : state) {
    for (size_t r = 0; r < batch; ++r) {
      rows[r].k = kc.get() + copy * cache + r * sequence;
      rows[r].v = vc.get() + copy * cache + r * sequence;
    }
    copy = (copy + 1) % copies;
    k::DecodeAttention(params, rows.data(), batch, partials.get(), threads,
                       prefetch);
    benchmark::ClobberMemory();
  }
  state.counters["kv_bytes/s"] = benchmark::Counter(
      2.0 * sizeof(float) * double(batch * kv_heads * keys * Dp),
      benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DecodeKernel)
    ->ArgNames({"keys", "capacity", "heads", "kv_heads", "batch", "token_major",
                "threads", "prefetch"})
    ->ArgsProduct({{4096}, {4096}, {12}, {12, 3}, {1, 8}, {1, 0}, {1, 2}, {2}})
    ->ArgsProduct(
        {{160}, {192, 1024}, {12}, {12}, {1, 8}, {1, 0}, {1, 2}, {0, 1}})
    // Llama 3.2 1B's grouping: 32 query heads on 8 K/V heads.
    ->ArgsProduct({{4096}, {4096}, {32}, {8}, {1, 8}, {1, 0}, {1, 2}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  benchmark::AddCustomContext("highway_target", info.simd_target);
  benchmark::AddCustomContext("onednn_isa", info.onednn_isa);
  benchmark::AddCustomContext("omp_threads",
                              std::to_string(omp_get_max_threads()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
