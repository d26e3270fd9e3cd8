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

#include "hwy/highway.h"
#include "kernels/rows_linear.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y[r0 + r, j + c] for r < kRows, c < kCols, j + c < j1: kCols rows of w
// streamed together (memory-level parallelism), each of their vectors used
// for kRows rows of x, so kRows * kCols accumulators hide the FMA latency.
// Every output is one vector accumulator over k in order, then its lanes
// summed: the same bits whatever tile computes it.
template <size_t kRows, size_t kCols, class D>
HWY_INLINE void RowsLinearTile(D d, const float* x, size_t r0, size_t k,
                               const float* w, const float* bias, size_t n,
                               size_t j, size_t j1, float* y) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // A short last group repeats its last column and drops the results.
  const float* wc[kCols];
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
      const V wv = hn::LoadU(d, wc[c] + i);
      for (size_t r = 0; r < kRows; ++r) {
        acc[r][c] = hn::MulAdd(xv[r], wv, acc[r][c]);
      }
    }
  }
  if (i < k) {  // zero-filled past k
    for (size_t c = 0; c < kCols; ++c) {
      const V wv = LoadTail(d, wc[c] + i, k - i);
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

// Columns [j0, j1) of y. One row streams eight columns of w at a time; more
// rows take six columns at a time, two rows per pass (15 of AVX2's 16
// vector registers), so that the second and later passes find those columns
// of w in L1. Measured on Zen 3 for GPT-2's head: 1 row reads w at the
// machine's read bandwidth, 8 rows take 1.9x as long.
template <class D>
HWY_INLINE void RowsLinearT(D d, const float* x, size_t rows, size_t k,
                            const float* w, const float* bias, size_t n,
                            size_t j0, size_t j1, float* y) {
  if (rows == 1) {
    for (size_t j = j0; j < j1; j += 8) {
      RowsLinearTile<1, 8>(d, x, 0, k, w, bias, n, j, j1, y);
    }
    return;
  }
  for (size_t j = j0; j < j1; j += 6) {
    size_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      RowsLinearTile<2, 6>(d, x, r, k, w, bias, n, j, j1, y);
    }
    if (r < rows) RowsLinearTile<1, 6>(d, x, r, k, w, bias, n, j, j1, y);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ROWS_LINEAR_INL_H_
