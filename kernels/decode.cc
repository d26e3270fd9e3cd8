// Dynamic dispatch for the decode attention: one HWY_DYNAMIC_DISPATCH per
// call, covering every row, head and key chunk (see decode.h).
#include "kernels/decode.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu.h"
#include "kernels/decode-inl.h"
#include "kernels/threads.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

void DecodeAttentionF32(const DecodeParams& params, const DecodeRow* rows,
                        size_t num_rows, float* partials, int num_threads,
                        DecodePrefetch prefetch) {
  DecodeAttentionT(params, rows, num_rows, partials, num_threads, prefetch);
}

bool DecodeBlocksHeadsF32(const DecodeParams& params) {
  return DecodeBlocksHeadsT(hn::ScalableTag<float>(), DecodeGroup(params),
                            params.padded_dim);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(DecodeAttentionF32);
HWY_EXPORT(DecodeBlocksHeadsF32);

bool DecodeBlocksHeads(const DecodeParams& params) {
  return HWY_DYNAMIC_DISPATCH(DecodeBlocksHeadsF32)(params);
}

DecodePrefetch DecodePrefetchOfThisCpu() {
  static const DecodePrefetch prefetch =
      IsIntelCpu() ? DecodePrefetch::kKeysAhead : DecodePrefetch::kNone;
  return prefetch;
}

void DecodeAttention(const DecodeParams& params, const DecodeRow* rows,
                     size_t num_rows, float* partials, int num_threads,
                     DecodePrefetch prefetch) {
  HWY_DYNAMIC_DISPATCH(DecodeAttentionF32)
  (params, rows, num_rows, partials, num_threads, prefetch);
}

void DecodeAppend(const DecodeParams& params, const float* qkv,
                  const DecodeRow* rows, size_t num_rows, int num_threads) {
  const size_t H = params.num_heads, Hkv = DecodeKvHeads(params);
  const size_t D = params.head_dim, Dp = params.padded_dim;
  const size_t row_floats = (H + 2 * Hkv) * D;
  // One row: its query into its padded heads, its key and value appended.
  const auto append = [&](size_t r) {
    const DecodeRow& row = rows[r];
    const float* q_src = qkv + r * row_floats;
    const float* k_src = q_src + H * D;
    const float* v_src = k_src + Hkv * D;
    const size_t pos = row.num_keys - 1;
    for (size_t h = 0; h < H; ++h) {
      auto* q = const_cast<float*>(row.q) + h * Dp;
      std::memcpy(q, q_src + h * D, D * sizeof(float));
      std::fill(q + D, q + Dp, 0.0f);
    }
    for (size_t g = 0; g < Hkv; ++g) {
      const size_t at = g * params.head_stride + pos * params.key_stride;
      float* k = const_cast<float*>(row.k) + at;
      float* v = const_cast<float*>(row.v) + at;
      std::memcpy(k, k_src + g * D, D * sizeof(float));
      std::memcpy(v, v_src + g * D, D * sizeof(float));
      std::fill(k + D, k + Dp, 0.0f);  // padding lanes must be zero
      std::fill(v + D, v + Dp, 0.0f);
    }
  };
  ParallelForChunks(num_rows, row_floats, 1, num_threads,
                    [&](size_t first, size_t n) {
                      for (size_t r = first; r < first + n; ++r) append(r);
                    });
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
