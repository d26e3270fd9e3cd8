// Per-target bodies of the element-wise kernels (see elementwise.h).
// Included once per Highway target by elementwise.cc, layernorm-inl.h,
// rows_linear-inl.h (GELU as RowsLinear writes y) and the tests.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_ELEMENTWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_ELEMENTWISE_INL_H_
#undef ATTN_KERNELS_ELEMENTWISE_INL_H_
#else
#define ATTN_KERNELS_ELEMENTWISE_INL_H_
#endif

#include <stddef.h>

#include <limits>

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

// SiLU, x sigmoid(x) = x / (1 + exp(-x)), through e = exp(-|x|), which never
// overflows: x / (1 + e) for x >= 0 and x e / (1 + e) below. Below -80,
// exp(x) heads into the subnormals (from -87) and would lose digits of
// x exp(x), so e = exp(x / 2) there and the numerator is (x e) e; 1 + e is
// then exactly 1 either way.
template <class D>
HWY_INLINE hn::Vec<D> SiluOf(D d, hn::Vec<D> x) {
  const auto negative = hn::Lt(x, hn::Zero(d));
  const auto very_negative = hn::Lt(x, hn::Set(d, -80.0f));
  const auto e =
      hn::Exp(d, hn::IfThenElse(very_negative, hn::Mul(x, hn::Set(d, 0.5f)),
                                hn::Neg(hn::Abs(x))));
  const auto xe = hn::Mul(x, e);
  const auto numerator = hn::IfThenElse(
      negative, hn::IfThenElse(very_negative, hn::Mul(xe, e), xe), x);
  const auto y = hn::Div(numerator, hn::Add(hn::Set(d, 1.0f), e));
  // At x = -inf the numerator is -inf * 0; the limit is -0.
  const auto minus_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  return hn::IfThenElse(hn::Eq(x, minus_inf), hn::Set(d, -0.0f), y);
}

// y[i] = op(d, x[i]) for i < count; x and y may be the same.
template <class Op>
HWY_INLINE void UnaryT(const float* x, float* y, size_t count, Op op) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= count; i += N) {
    hn::StoreU(op(d, hn::LoadU(d, x + i)), d, y + i);
  }
  if (i < count) {
    StoreTail(d, op(d, LoadTail(d, x + i, count - i)), y + i, count - i);
  }
}

// y[i] = op(a[i], b[i]) for i < count; y may be a or b.
template <class Op>
HWY_INLINE void BinaryT(const float* a, const float* b, float* y, size_t count,
                        Op op) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= count; i += N) {
    hn::StoreU(op(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  }
  if (i < count) {
    const size_t n = count - i;
    StoreTail(d, op(LoadTail(d, a + i, n), LoadTail(d, b + i, n)), y + i, n);
  }
}

// y[i] = gelu(x[i]) for i < count; x and y may be the same.
HWY_INLINE void GeluT(const float* x, float* y, size_t count) {
  UnaryT(x, y, count, [](auto d, auto v) HWY_ATTR { return GeluTanh(d, v); });
}

// y[i] = silu(x[i]) for i < count; x and y may be the same.
HWY_INLINE void SiluT(const float* x, float* y, size_t count) {
  UnaryT(x, y, count, [](auto d, auto v) HWY_ATTR { return SiluOf(d, v); });
}

// y[i] = a[i] + b[i] for i < count; y may be a or b.
HWY_INLINE void AddT(const float* a, const float* b, float* y, size_t count) {
  BinaryT(a, b, y, count,
          [](auto u, auto v) HWY_ATTR { return hn::Add(u, v); });
}

// y[i] = a[i] * b[i] for i < count; y may be a or b.
HWY_INLINE void MulT(const float* a, const float* b, float* y, size_t count) {
  BinaryT(a, b, y, count,
          [](auto u, auto v) HWY_ATTR { return hn::Mul(u, v); });
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ELEMENTWISE_INL_H_
