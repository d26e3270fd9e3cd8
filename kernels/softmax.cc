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
  CausalSoftmaxT(scores, rows, cols, stride, diagonal, scale, scores, stride);
}

void CausalSoftmaxBF16(float* scores, size_t rows, size_t cols, size_t stride,
                       ptrdiff_t diagonal, float scale, hwy::bfloat16_t* probs,
                       size_t probs_stride) {
  CausalSoftmaxT(scores, rows, cols, stride, diagonal, scale, probs,
                 probs_stride);
}

const char* TargetNameOfThisTarget() { return hwy::TargetName(HWY_TARGET); }

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(CausalSoftmaxF32);
HWY_EXPORT(CausalSoftmaxBF16);
HWY_EXPORT(TargetNameOfThisTarget);

void CausalSoftmax(float* scores, size_t rows, size_t cols, size_t stride,
                   ptrdiff_t diagonal, float scale) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxF32)
  (scores, rows, cols, stride, diagonal, scale);
}

void CausalSoftmaxToBF16(float* scores, size_t rows, size_t cols, size_t stride,
                         ptrdiff_t diagonal, float scale,
                         hwy::bfloat16_t* probs, size_t probs_stride) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBF16)
  (scores, rows, cols, stride, diagonal, scale, probs, probs_stride);
}

const char* SimdTargetName() {
  return HWY_DYNAMIC_DISPATCH(TargetNameOfThisTarget)();
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
