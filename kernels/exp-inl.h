// Per-target exp for the softmaxes (the attention core's and the decode
// kernel's), whose arguments are logits minus their row max, so never > 0.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_EXP_INL_H_
#undef ATTN_KERNELS_EXP_INL_H_
#else
#define ATTN_KERNELS_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(t) for t <= 0, a softmax's shifted logits: hn::Exp's range
// reduction and polynomial, but one exponent add instead of hn::Exp's sign
// handling and two-step scaling, which only its t > 0 range needs. Results
// below exp(-87) (< 2e-38, beneath any row sum >= 1) are 0.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V t) {
  const hn::RebindToSigned<D> di;
  // t = n ln2 + r with |r| <= ln2 / 2; clamped so that n >= -127 and the
  // exponent arithmetic below stays in range even for t = -inf.
  const auto n = hn::NearestInt(hn::Max(
      hn::Mul(t, hn::Set(d, 1.44269504088896341f)), hn::Set(d, -127.0f)));
  const V nf = hn::ConvertTo(d, n);
  // ln2 in two parts: nf * the first part is exact.
  V r = hn::MulAdd(nf, hn::Set(d, -0.693145751953125f), t);
  r = hn::MulAdd(nf, hn::Set(d, -1.428606765330187045e-6f), r);
  // exp(r) = 1 + r + r^2 (c0 + c1 r + ... + c5 r^5), minimax coefficients.
  V p = hn::Set(d, 0.000198527617612853646278381f);
  p = hn::MulAdd(p, r, hn::Set(d, 0.00139304355252534151077271f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.00833336077630519866943359f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.0416664853692054748535156f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.166666671633720397949219f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  // times 2^n: add n to the exponent field (the result is normal here).
  const V scaled =
      hn::BitCast(d, hn::Add(hn::BitCast(di, p), hn::ShiftLeft<23>(n)));
  return hn::IfThenElseZero(hn::Ge(t, hn::Set(d, -87.0f)), scaled);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_EXP_INL_H_
