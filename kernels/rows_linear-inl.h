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

// Columns [j0, j1) of y, four at a time: four rows of w are streamed
// together (memory-level parallelism) and each x row is read once per
// group. Every output is one vector accumulator over k in order, then its
// lanes summed: a fixed order for a given target.
template <class D>
HWY_INLINE void RowsLinearT(D d, const float* x, size_t rows, size_t k,
                            const float* w, const float* bias, size_t n,
                            size_t j0, size_t j1, float* y) {
  using V = hn::Vec<D>;
  constexpr size_t kGroup = 4;
  const size_t N = hn::Lanes(d);
  for (size_t j = j0; j < j1; j += kGroup) {
    // A short last group repeats its last column and drops the results.
    const float* wc[kGroup];
    for (size_t c = 0; c < kGroup; ++c) {
      wc[c] = w + std::min(j + c, j1 - 1) * k;
    }
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = x + r * k;
      V acc[kGroup];
      for (V& a : acc) a = hn::Zero(d);
      size_t i = 0;
      for (; i + N <= k; i += N) {
        const V xv = hn::LoadU(d, xr + i);
        for (size_t c = 0; c < kGroup; ++c) {
          acc[c] = hn::MulAdd(xv, hn::LoadU(d, wc[c] + i), acc[c]);
        }
      }
      if (i < k) {  // zero-filled past k
        const V xv = LoadTail(d, xr + i, k - i);
        for (size_t c = 0; c < kGroup; ++c) {
          acc[c] = hn::MulAdd(xv, LoadTail(d, wc[c] + i, k - i), acc[c]);
        }
      }
      for (size_t c = 0; c < kGroup && j + c < j1; ++c) {
        y[r * n + j + c] = (bias ? bias[j + c] : 0.0f) +
                           hn::GetLane(hn::SumOfLanes(d, acc[c]));
      }
    }
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ROWS_LINEAR_INL_H_
