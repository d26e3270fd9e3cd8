// Causal, scaled softmax over a tile of attention scores, in place.
// Dispatches once per call to the best SIMD target; the per-target body is in
// softmax-inl.h, so the attention core can inline the same row kernel.
#ifndef ATTN_KERNELS_SOFTMAX_H_
#define ATTN_KERNELS_SOFTMAX_H_

#include <cstddef>

#include "hwy/base.h"

namespace attn::kernels {

// scores: `rows` x `cols`, row-major, `stride` floats between rows (>= cols).
// Row r may attend to keys [0, valid_r) with valid_r = clamp(r + diagonal + 1,
// 0, cols): for a query block starting at position i0, diagonal = i0.
// Writes softmax(scale * s) over [0, valid_r) and 0 to [valid_r, cols).
// A row with no valid key (valid_r == 0, or every valid score -inf) becomes
// zeros. A row whose valid scores hold a NaN or +inf becomes NaN over
// [0, valid_r), as in PyTorch. Requires scale > 0.
void CausalSoftmax(float* scores, size_t rows, size_t cols, size_t stride,
                   ptrdiff_t diagonal, float scale);

// The attention core's softmax, split around the P x V matmul so that no
// pass rescales the whole tile: as CausalSoftmax, but row r holds the
// unnormalised exp(scale * (s - row max)) over [0, valid_r), and
// row_scale[r] the factor 1 / sum that normalises it (1 for rows written as
// zeros or NaN). The ...ToBF16 variant writes those values as bfloat16
// (rounded to nearest) to `probs`, `probs_stride` elements between
// rows, and clobbers `scores`.
void CausalSoftmaxUnnormalized(float* scores, size_t rows, size_t cols,
                               size_t stride, ptrdiff_t diagonal, float scale,
                               float* row_scale);
void CausalSoftmaxUnnormalizedToBF16(float* scores, size_t rows, size_t cols,
                                     size_t stride, ptrdiff_t diagonal,
                                     float scale, hwy::bfloat16_t* probs,
                                     size_t probs_stride, float* row_scale);

// Finishes the split softmax: dst row r := src row r * row_scale[r], for
// `rows` dense rows of `cols` floats; `dst_stride` elements between rows of
// dst. The ...ToBF16 variant rounds to nearest.
void ScaleRows(const float* src, size_t rows, size_t cols,
               const float* row_scale, float* dst, size_t dst_stride);
void ScaleRowsToBF16(const float* src, size_t rows, size_t cols,
                     const float* row_scale, hwy::bfloat16_t* dst,
                     size_t dst_stride);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_SOFTMAX_H_
