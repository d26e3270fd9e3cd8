// Per-target bodies of the element-wise kernels (see elementwise.h).
// Included once per Highway target by elementwise.cc, layernorm-inl.h and
// the tests.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_ELEMENTWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_ELEMENTWISE_INL_H_
#undef ATTN_KERNELS_ELEMENTWISE_INL_H_
#else
#define ATTN_KERNELS_ELEMENTWISE_INL_H_
#endif

#include <stddef.h>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The book's GELU: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
template <class D>
HWY_INLINE hn::Vec<D> GeluTanh(D d, hn::Vec<D> x) {
  const auto c = hn::Set(d, 0.7978845608028654f);  // sqrt(2 / pi)
  const auto x2 = hn::Mul(x, x);
  const auto inner = hn::Mul(
      hn::Mul(c, x), hn::MulAdd(hn::Set(d, 0.044715f), x2, hn::Set(d, 1.0f)));
  const auto half_x = hn::Mul(hn::Set(d, 0.5f), x);
  return hn::MulAdd(half_x, hn::Tanh(d, inner), half_x);
}

// y[i] = gelu(x[i]) for i < count; x and y may be the same.
HWY_INLINE void GeluT(const float* x, float* y, size_t count) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= count; i += N) {
    hn::StoreU(GeluTanh(d, hn::LoadU(d, x + i)), d, y + i);
  }
  if (i < count) {
    StoreTail(d, GeluTanh(d, LoadTail(d, x + i, count - i)), y + i, count - i);
  }
}

// y[i] = a[i] + b[i] for i < count; y may be a or b.
HWY_INLINE void AddT(const float* a, const float* b, float* y, size_t count) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= count; i += N) {
    hn::StoreU(hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  }
  if (i < count) {
    const size_t n = count - i;
    StoreTail(d, hn::Add(LoadTail(d, a + i, n), LoadTail(d, b + i, n)), y + i,
              n);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ELEMENTWISE_INL_H_
