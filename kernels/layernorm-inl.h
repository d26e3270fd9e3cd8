// Per-target bodies of the LayerNorm and the RMSNorm (see layernorm.h for the
// contracts).
// Included once per Highway target by layernorm.cc and by the tests.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_LAYERNORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_LAYERNORM_INL_H_
#undef ATTN_KERNELS_LAYERNORM_INL_H_
#else
#define ATTN_KERNELS_LAYERNORM_INL_H_
#endif

#include <stddef.h>

#include <cmath>

#include "hwy/highway.h"
#include "kernels/elementwise-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of term(x[i]) over [0, n), for a term with term(0) = 0: the tail is
// loaded masked with zeros, so it never reads past n and adds nothing.
template <class D, class Term>
HWY_INLINE float SumRowOf(D d, const float* x, size_t n, Term term) {
  const size_t N = hn::Lanes(d);
  auto sum0 = hn::Zero(d), sum1 = hn::Zero(d);  // two chains hide latency
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    sum0 = hn::Add(sum0, term(hn::LoadU(d, x + i)));
    sum1 = hn::Add(sum1, term(hn::LoadU(d, x + i + N)));
  }
  for (; i < n; i += N) sum0 = hn::Add(sum0, term(LoadTail(d, x + i, n - i)));
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
}

template <class D>
HWY_INLINE float SumRow(D d, const float* x, size_t n) {
  return SumRowOf(d, x, n, [](auto v) HWY_ATTR { return v; });
}

template <class D>
HWY_INLINE float SumSquaresRow(D d, const float* x, size_t n) {
  return SumRowOf(d, x, n, [](auto v) HWY_ATTR { return hn::Mul(v, v); });
}

// One row: two passes for the statistics (mean, then the mean squared
// deviation: no cancellation, unlike E[x^2] - mean^2), one for the output.
template <class D>
HWY_INLINE void LayerNormRowT(D d, const float* HWY_RESTRICT x,
                              const float* HWY_RESTRICT scale,
                              const float* HWY_RESTRICT shift,
                              float* HWY_RESTRICT y, size_t cols, float eps) {
  const size_t N = hn::Lanes(d);
  const auto vmean = hn::Set(d, SumRow(d, x, cols) / static_cast<float>(cols));
  auto ss = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    const auto dev = hn::Sub(hn::LoadU(d, x + i), vmean);
    ss = hn::MulAdd(dev, dev, ss);
  }
  if (i < cols) {  // the zero-filled tail lanes must not count
    const auto dev = hn::IfThenElseZero(
        hn::FirstN(d, cols - i), hn::Sub(LoadTail(d, x + i, cols - i), vmean));
    ss = hn::MulAdd(dev, dev, ss);
  }
  const float var =
      hn::GetLane(hn::SumOfLanes(d, ss)) / static_cast<float>(cols);
  const auto inv_std = hn::Set(d, 1.0f / std::sqrt(var + eps));
  for (i = 0; i + N <= cols; i += N) {
    const auto norm = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vmean), inv_std);
    hn::StoreU(
        hn::MulAdd(hn::LoadU(d, scale + i), norm, hn::LoadU(d, shift + i)), d,
        y + i);
  }
  if (i < cols) {
    const size_t n = cols - i;
    const auto norm = hn::Mul(hn::Sub(LoadTail(d, x + i, n), vmean), inv_std);
    StoreTail(
        d,
        hn::MulAdd(LoadTail(d, scale + i, n), norm, LoadTail(d, shift + i, n)),
        y + i, n);
  }
}

HWY_INLINE void LayerNormRowsT(const float* x, const float* scale,
                               const float* shift, float* y, size_t rows,
                               size_t cols, float eps) {
  const hn::ScalableTag<float> d;
  for (size_t r = 0; r < rows; ++r) {
    LayerNormRowT(d, x + r * cols, scale, shift, y + r * cols, cols, eps);
  }
}

// One RMSNorm row, in HF's order: (x * (1 / sqrt(ms + eps))) * weight. The
// statistics pass ends before the first store, so y may be x.
template <class D>
HWY_INLINE void RmsNormRowT(D d, const float* x,
                            const float* HWY_RESTRICT weight, float* y,
                            size_t cols, float eps) {
  const size_t N = hn::Lanes(d);
  const float mean_square =
      SumSquaresRow(d, x, cols) / static_cast<float>(cols);
  const auto inv_rms = hn::Set(d, 1.0f / std::sqrt(mean_square + eps));
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    const auto norm = hn::Mul(hn::LoadU(d, x + i), inv_rms);
    hn::StoreU(hn::Mul(norm, hn::LoadU(d, weight + i)), d, y + i);
  }
  if (i < cols) {
    const size_t n = cols - i;
    const auto norm = hn::Mul(LoadTail(d, x + i, n), inv_rms);
    StoreTail(d, hn::Mul(norm, LoadTail(d, weight + i, n)), y + i, n);
  }
}

HWY_INLINE void RmsNormRowsT(const float* x, const float* weight, float* y,
                             size_t rows, size_t cols, float eps) {
  const hn::ScalableTag<float> d;
  for (size_t r = 0; r < rows; ++r) {
    RmsNormRowT(d, x + r * cols, weight, y + r * cols, cols, eps);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_LAYERNORM_INL_H_
