// Dynamic dispatch for the decode attention: one HWY_DYNAMIC_DISPATCH per
// call, covering every row, head and key chunk (see decode.h).
#include "kernels/decode.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

void DecodeAttentionF32(const DecodeParams& params, const DecodeRow* rows,
                        size_t num_rows, float* partials, int num_threads) {
  DecodeAttentionT(params, rows, num_rows, partials, num_threads);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(DecodeAttentionF32);

void DecodeAttention(const DecodeParams& params, const DecodeRow* rows,
                     size_t num_rows, float* partials, int num_threads) {
  if (num_rows == 0) return;
  HWY_DYNAMIC_DISPATCH(DecodeAttentionF32)
  (params, rows, num_rows, partials, num_threads);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
