// Dynamic dispatch for the causal softmax: one HWY_DYNAMIC_DISPATCH per tile.
#include "kernels/softmax.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

void CausalSoftmaxF32(float* scores, size_t rows, size_t cols, size_t stride,
                      ptrdiff_t diagonal, float scale) {
  CausalSoftmaxT<true>(scores, rows, cols, stride, diagonal, scale, scores,
                       stride);
}

void CausalSoftmaxUnnormalizedF32(float* scores, size_t rows, size_t cols,
                                  size_t stride, ptrdiff_t diagonal,
                                  float scale, float* row_scale) {
  CausalSoftmaxT<false>(scores, rows, cols, stride, diagonal, scale, scores,
                        stride, row_scale);
}

void CausalSoftmaxUnnormalizedBF16(float* scores, size_t rows, size_t cols,
                                   size_t stride, ptrdiff_t diagonal,
                                   float scale, hwy::bfloat16_t* probs,
                                   size_t probs_stride, float* row_scale) {
  CausalSoftmaxT<false>(scores, rows, cols, stride, diagonal, scale, probs,
                        probs_stride, row_scale);
}

void ScaleRowsF32(const float* src, size_t rows, size_t cols,
                  const float* row_scale, float* dst, size_t dst_stride) {
  ScaleRowsT(src, rows, cols, row_scale, dst, dst_stride);
}

void ScaleRowsBF16(const float* src, size_t rows, size_t cols,
                   const float* row_scale, hwy::bfloat16_t* dst,
                   size_t dst_stride) {
  ScaleRowsT(src, rows, cols, row_scale, dst, dst_stride);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(CausalSoftmaxF32);
HWY_EXPORT(CausalSoftmaxUnnormalizedF32);
HWY_EXPORT(CausalSoftmaxUnnormalizedBF16);
HWY_EXPORT(ScaleRowsF32);
HWY_EXPORT(ScaleRowsBF16);

void CausalSoftmax(float* scores, size_t rows, size_t cols, size_t stride,
                   ptrdiff_t diagonal, float scale) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxF32)
  (scores, rows, cols, stride, diagonal, scale);
}

void CausalSoftmaxUnnormalized(float* scores, size_t rows, size_t cols,
                               size_t stride, ptrdiff_t diagonal, float scale,
                               float* row_scale) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxUnnormalizedF32)
  (scores, rows, cols, stride, diagonal, scale, row_scale);
}

void CausalSoftmaxUnnormalizedToBF16(float* scores, size_t rows, size_t cols,
                                     size_t stride, ptrdiff_t diagonal,
                                     float scale, hwy::bfloat16_t* probs,
                                     size_t probs_stride, float* row_scale) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxUnnormalizedBF16)
  (scores, rows, cols, stride, diagonal, scale, probs, probs_stride, row_scale);
}

void ScaleRows(const float* src, size_t rows, size_t cols,
               const float* row_scale, float* dst, size_t dst_stride) {
  HWY_DYNAMIC_DISPATCH(ScaleRowsF32)
  (src, rows, cols, row_scale, dst, dst_stride);
}

void ScaleRowsToBF16(const float* src, size_t rows, size_t cols,
                     const float* row_scale, hwy::bfloat16_t* dst,
                     size_t dst_stride) {
  HWY_DYNAMIC_DISPATCH(ScaleRowsBF16)
  (src, rows, cols, row_scale, dst, dst_stride);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
