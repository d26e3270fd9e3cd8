// Per-target body of RowsLinear (rows_linear.h).

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_ROWS_LINEAR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_ROWS_LINEAR_INL_H_
#undef ATTN_KERNELS_ROWS_LINEAR_INL_H_
#else
#define ATTN_KERNELS_ROWS_LINEAR_INL_H_
#endif

#include <stddef.h>

#include <algorithm>
#include <cstring>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/rows_linear.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) weights at p as floats. The tiles below take w as float or bf16
// through these two loads and nothing else: bf16 widens to f32 exactly (a
// 16-bit shift), so every product and sum is the one the f32 path makes on
// the widened weights, bit for bit.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}

// The first count < Lanes(d) weights at p, zeros in the other lanes; reads
// nothing past p + count. Once per column and block of k: a cold path.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeightsTail(D d, const float* p, size_t count) {
  return LoadTail(d, p, count);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeightsTail(D d, const hwy::bfloat16_t* p,
                                      size_t count) {
  const hn::Rebind<hwy::bfloat16_t, D> dbf;
  alignas(64) hwy::bfloat16_t buf[hn::MaxLanes(dbf)] = {};
  std::memcpy(buf, p, std::min(count, hn::MaxLanes(dbf)) * sizeof(*p));
  return hn::PromoteTo(d, hn::Load(dbf, buf));
}

// y[r0 + r, j + c] for r < kRows, c < kCols, j + c < j1: kCols rows of w
// streamed together (memory-level parallelism), each of their vectors used
// for kRows rows of x, so kRows * kCols accumulators hide the FMA latency.
// Every output is one vector accumulator over k in order, then its lanes
// summed: the same bits whatever tile computes it.
template <size_t kRows, size_t kCols, class D, typename TW>
HWY_INLINE void RowsLinearTile(D d, const float* x, size_t r0, size_t k,
                               const TW* w, const float* bias, size_t n,
                               size_t j, size_t j1, float* y) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // A short last group repeats its last column and drops the results.
  const TW* wc[kCols];
  for (size_t c = 0; c < kCols; ++c) wc[c] = w + std::min(j + c, j1 - 1) * k;
  const float* xr[kRows];
  for (size_t r = 0; r < kRows; ++r) xr[r] = x + (r0 + r) * k;
  V acc[kRows][kCols];
  for (auto& row : acc) {
    for (V& a : row) a = hn::Zero(d);
  }
  size_t i = 0;
  for (; i + N <= k; i += N) {
    V xv[kRows];
    for (size_t r = 0; r < kRows; ++r) xv[r] = hn::LoadU(d, xr[r] + i);
    for (size_t c = 0; c < kCols; ++c) {
      const V wv = LoadWeights(d, wc[c] + i);
      for (size_t r = 0; r < kRows; ++r) {
        acc[r][c] = hn::MulAdd(xv[r], wv, acc[r][c]);
      }
    }
  }
  if (i < k) {  // zero-filled past k
    for (size_t c = 0; c < kCols; ++c) {
      const V wv = LoadWeightsTail(d, wc[c] + i, k - i);
      for (size_t r = 0; r < kRows; ++r) {
        acc[r][c] = hn::MulAdd(LoadTail(d, xr[r] + i, k - i), wv, acc[r][c]);
      }
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t c = 0; c < kCols && j + c < j1; ++c) {
      y[(r0 + r) * n + j + c] = (bias ? bias[j + c] : 0.0f) +
                                hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
    }
  }
}

// Columns [j0, j1) (at most kRowsLinearColumns) of y for kRows rows, one
// column at a time: each vector of w serves every row as it streams, and a
// prefetch kAhead columns ahead keeps that one stream ahead of the FMAs. k
// is taken in blocks of kBlock so that the rows' slices of x stay in L1;
// each output's accumulator is kept between blocks, so it still sums over
// k in order, as every other tile does.
template <size_t kRows, class D, typename TW>
HWY_INLINE void RowsLinearByColumn(D d, const float* x, size_t k, const TW* w,
                                   const float* bias, size_t n,
                                   size_t j0, size_t j1, float* y) {
  using V = hn::Vec<D>;
  constexpr size_t kAhead = 4, kBlock = 768;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float acc[kRowsLinearColumns * kRows * HWY_MAX_BYTES / 4];
  // The block's slices of x, side by side: rows of a large k lie a multiple
  // of 4 KiB apart, so in place they would share L1 sets with each other.
  HWY_ALIGN float xb[kRows * kBlock];
  for (size_t k0 = 0; k0 < k; k0 += kBlock) {
    const size_t k1 = std::min(k, k0 + kBlock);
    for (size_t r = 0; r < kRows; ++r) {
      std::copy(x + r * k + k0, x + r * k + k1, xb + r * kBlock);
    }
    for (size_t j = j0; j < j1; ++j) {
      const TW* wj = w + j * k;
      float* a = acc + (j - j0) * kRows * N;
      V sum[kRows];
      for (size_t r = 0; r < kRows; ++r) {
        sum[r] = k0 == 0 ? hn::Zero(d) : hn::Load(d, a + r * N);
      }
      size_t i = k0;
      for (; i + N <= k1; i += N) {
        hwy::Prefetch(wj + kAhead * k + i);
        const V wv = LoadWeights(d, wj + i);
        for (size_t r = 0; r < kRows; ++r) {
          sum[r] =
              hn::MulAdd(hn::Load(d, xb + r * kBlock + i - k0), wv, sum[r]);
        }
      }
      if (i < k1) {  // k's tail, zero-filled (blocks are whole vectors)
        const V wv = LoadWeightsTail(d, wj + i, k1 - i);
        for (size_t r = 0; r < kRows; ++r) {
          sum[r] = hn::MulAdd(LoadTail(d, xb + r * kBlock + i - k0, k1 - i), wv,
                              sum[r]);
        }
      }
      for (size_t r = 0; r < kRows; ++r) hn::Store(sum[r], d, a + r * N);
    }
  }
  for (size_t j = j0; j < j1; ++j) {
    for (size_t r = 0; r < kRows; ++r) {
      const V sum = hn::Load(d, acc + ((j - j0) * kRows + r) * N);
      y[r * n + j] =
          (bias ? bias[j] : 0.0f) + hn::GetLane(hn::SumOfLanes(d, sum));
    }
  }
}

// Columns [j0, j1) of y. One row streams eight columns of w at a time,
// which reads w at the machine's read bandwidth; more rows go column by
// column, every row using each vector of w as it streams (on Zen 3, eight
// rows of GPT-2's head take 1.3x one row's time).
template <class D, typename TW>
HWY_INLINE void RowsLinearT(D d, const float* x, size_t rows, size_t k,
                            const TW* w, const float* bias, size_t n,
                            size_t j0, size_t j1, float* y) {
  switch (rows) {
    case 1:
      for (size_t j = j0; j < j1; j += 8) {
        RowsLinearTile<1, 8>(d, x, 0, k, w, bias, n, j, j1, y);
      }
      return;
    case 2:
      return RowsLinearByColumn<2>(d, x, k, w, bias, n, j0, j1, y);
    case 3:
      return RowsLinearByColumn<3>(d, x, k, w, bias, n, j0, j1, y);
    case 4:
      return RowsLinearByColumn<4>(d, x, k, w, bias, n, j0, j1, y);
    case 5:
      return RowsLinearByColumn<5>(d, x, k, w, bias, n, j0, j1, y);
    case 6:
      return RowsLinearByColumn<6>(d, x, k, w, bias, n, j0, j1, y);
    case 7:
      return RowsLinearByColumn<7>(d, x, k, w, bias, n, j0, j1, y);
    default:
      return RowsLinearByColumn<8>(d, x, k, w, bias, n, j0, j1, y);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ROWS_LINEAR_INL_H_
