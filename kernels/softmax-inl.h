// Per-target body of the causal softmax (see softmax.h for the contract).
// Included once per Highway target by softmax.cc and by the tests.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_SOFTMAX_INL_H_
#undef ATTN_KERNELS_SOFTMAX_INL_H_
#else
#define ATTN_KERNELS_SOFTMAX_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "kernels/exp-inl.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Stores the first `count` lanes of v to p as float.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreProbs(D d, V v, float* p, size_t count) {
  StoreTail(d, v, p, count);
}

// The bfloat16 bits of v rounded to nearest (ties away from zero: one add;
// Highway 1.0.3's DemoteTo truncates, which would bias every probability
// downwards), in the low 16 bits of each lane. NaNs as arithmetic makes them
// (payload in the top mantissa bits) stay NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> RoundToBF16Bits(D /*d*/, V v) {
  const hn::RebindToSigned<D> di32;
  const hn::RebindToUnsigned<D> du32;
  return hn::BitCast(di32, hn::ShiftRight<16>(hn::Add(hn::BitCast(du32, v),
                                                      hn::Set(du32, 0x8000))));
}

// Stores the first `count` lanes of v to p as bfloat16 (RoundToBF16Bits).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreProbs(D d, V v, hwy::bfloat16_t* p, size_t count) {
  const hn::Rebind<uint16_t, D> du16;
  StoreTail(du16, hn::DemoteTo(du16, RoundToBF16Bits(d, v)),
            reinterpret_cast<uint16_t*>(p), count);
}

// Stores a, then b: 2 x Lanes(d) values >= 0.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreProbsPair(D d, V a, V b, float* p) {
  hn::StoreU(a, d, p);
  hn::StoreU(b, d, p + hn::Lanes(d));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreProbsPair(D d, V a, V b, hwy::bfloat16_t* p) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // One saturating pack for both (exact: the bits of values >= 0 are below
  // 0x8000). It interleaves 4-lane groups of a and b; one permute of 64-bit
  // lanes puts them back in order.
  const hn::Repartition<int16_t, D> di16;
  const hn::Repartition<uint64_t, D> du64;
  const auto packed =
      hn::ReorderDemote2To(di16, RoundToBF16Bits(d, a), RoundToBF16Bits(d, b));
  alignas(64) static constexpr uint64_t kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const auto ordered = hn::TableLookupLanes(hn::BitCast(du64, packed),
                                            hn::SetTableIndices(du64, kOrder));
  hn::StoreU(hn::BitCast(di16, ordered), di16, reinterpret_cast<int16_t*>(p));
#else
  StoreProbs(d, a, p, hn::Lanes(d));
  StoreProbs(d, b, p + hn::Lanes(d), hn::Lanes(d));
#endif
}

// The max of x[0, n), or NaN when x holds a NaN or +inf (either makes the
// softmax row NaN); -inf when n is 0 or every value is -inf. Max drops NaNs
// on x86, and Exp maps NaN to 0, so NaN is tracked explicitly. Shared by
// the causal softmax and the decode kernel's chunks.
template <class D>
HWY_INLINE float SoftmaxRowMax(D d, const float* HWY_RESTRICT x, size_t n) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const V neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  V vmax = neg_inf;
  auto nan_seen = hn::Lt(vmax, vmax);  // all false
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const V v = hn::LoadU(d, x + i);
    vmax = hn::Max(vmax, v);
    nan_seen = hn::Or(nan_seen, hn::IsNaN(v));
  }
  if (i < n) {
    const V v = LoadTail(d, x + i, n - i, neg_inf);
    vmax = hn::Max(vmax, v);
    nan_seen = hn::Or(nan_seen, hn::IsNaN(v));
  }
  const float row_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  // NaN first: a row of NaN (or NaN and -inf) may leave the max at -inf.
  if (!hn::AllFalse(d, nan_seen) ||
      row_max == std::numeric_limits<float>::infinity()) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  return row_max;
}

// x[0, valid) := softmax(scale * x[0, valid)), written to out[0, cols) with
// zeros over [valid, cols). x is clobbered. x and out may alias. Without
// kNormalize, writes exp(scale * (x - max)) instead and returns the factor
// 1 / sum that normalises it (1 for rows written as zeros or NaN).
template <bool kNormalize, class D, typename TOut>
HWY_INLINE float CausalSoftmaxRowT(D d, float* x, size_t valid, size_t cols,
                                   float scale, TOut* out) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);

  // Pass 1: the row max (NaN when the row holds a NaN or +inf).
  const float row_max = SoftmaxRowMax(d, x, valid);
  size_t i = 0;
  float fill = -1.0f;  // >= 0 when the whole valid prefix is one value
  if (std::isnan(row_max)) {
    fill = row_max;
  } else if (valid == 0 || row_max == -std::numeric_limits<float>::infinity()) {
    fill = 0.0f;  // nothing to attend to: zeros, never NaN
  }

  float inv_sum = 1.0f;  // what the unnormalised output still needs
  if (fill != -1.0f) {
    const V vfill = hn::Set(d, fill);
    for (i = 0; i < valid; i += N) {
      StoreProbs(d, vfill, out + i, std::min(N, valid - i));
    }
  } else {
    // Pass 2: e = exp(scale * (x - max)) and its sum. Subtracting the max
    // keeps exp finite; the tail lanes are excluded from the sum. Normalised
    // rows keep e in x for pass 3; the others store it as their output.
    const V vscale = hn::Set(d, scale);
    const V vrow_max = hn::Set(d, row_max);
    V vsum = hn::Zero(d);
    i = 0;
    if constexpr (!kNormalize) {  // by pairs: bf16 packs two at once
      for (; i + 2 * N <= valid; i += 2 * N) {
        const V e0 = ExpNonPositive(
            d, hn::Mul(hn::Sub(hn::LoadU(d, x + i), vrow_max), vscale));
        const V e1 = ExpNonPositive(
            d, hn::Mul(hn::Sub(hn::LoadU(d, x + i + N), vrow_max), vscale));
        StoreProbsPair(d, e0, e1, out + i);
        vsum = hn::Add(vsum, hn::Add(e0, e1));
      }
    }
    for (; i + N <= valid; i += N) {
      const V e = ExpNonPositive(
          d, hn::Mul(hn::Sub(hn::LoadU(d, x + i), vrow_max), vscale));
      if constexpr (kNormalize) {
        hn::StoreU(e, d, x + i);
      } else {
        StoreProbs(d, e, out + i, N);
      }
      vsum = hn::Add(vsum, e);
    }
    if (i < valid) {
      // Tail lanes load the max, a finite value; they are kept out of the sum.
      const V e = ExpNonPositive(
          d, hn::Mul(hn::Sub(LoadTail(d, x + i, valid - i, vrow_max), vrow_max),
                     vscale));
      if constexpr (kNormalize) {
        StoreProbs(d, e, x + i, valid - i);
      } else {
        StoreProbs(d, e, out + i, valid - i);
      }
      vsum = hn::Add(vsum, hn::IfThenElseZero(hn::FirstN(d, valid - i), e));
    }
    // The max element contributes exp(0) = 1, so sum >= 1.
    inv_sum = 1.0f / hn::GetLane(hn::SumOfLanes(d, vsum));
    if constexpr (kNormalize) {
      // Pass 3: normalise.
      const V vinv_sum = hn::Set(d, inv_sum);
      for (i = 0; i + N <= valid; i += N) {
        StoreProbs(d, hn::Mul(hn::LoadU(d, x + i), vinv_sum), out + i, N);
      }
      if (i < valid) {
        const V v = hn::Mul(LoadTail(d, x + i, valid - i), vinv_sum);
        StoreProbs(d, v, out + i, valid - i);
      }
    }
  }
  // Masked suffix.
  const V zero = hn::Zero(d);
  for (i = valid; i < cols; i += N) {
    StoreProbs(d, zero, out + i, std::min(N, cols - i));
  }
  return kNormalize ? 1.0f : inv_sum;
}

// The tile loop shared by every variant. Without kNormalize, row r's factor
// goes to row_scale[r].
template <bool kNormalize, typename TOut>
HWY_INLINE void CausalSoftmaxT(float* scores, size_t rows, size_t cols,
                               size_t stride, ptrdiff_t diagonal, float scale,
                               TOut* out, size_t out_stride,
                               float* row_scale = nullptr) {
  const hn::ScalableTag<float> d;
  for (size_t r = 0; r < rows; ++r) {
    const ptrdiff_t valid =
        std::clamp<ptrdiff_t>(static_cast<ptrdiff_t>(r) + diagonal + 1, 0,
                              static_cast<ptrdiff_t>(cols));
    const float factor = CausalSoftmaxRowT<kNormalize>(
        d, scores + r * stride, static_cast<size_t>(valid), cols, scale,
        out + r * out_stride);
    if constexpr (!kNormalize) row_scale[r] = factor;
  }
}

// dst row r := src row r * row_scale[r], for `rows` dense rows of `cols`.
template <typename TOut>
HWY_INLINE void ScaleRowsT(const float* src, size_t rows, size_t cols,
                           const float* row_scale, TOut* dst,
                           size_t dst_stride) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t r = 0; r < rows; ++r) {
    const float* in = src + r * cols;
    TOut* out = dst + r * dst_stride;
    const auto factor = hn::Set(d, row_scale[r]);
    size_t i = 0;
    for (; i + N <= cols; i += N) {
      StoreProbs(d, hn::Mul(hn::LoadU(d, in + i), factor), out + i, N);
    }
    if (i < cols) {
      const auto v = LoadTail(d, in + i, cols - i);
      StoreProbs(d, hn::Mul(v, factor), out + i, cols - i);
    }
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_SOFTMAX_INL_H_
