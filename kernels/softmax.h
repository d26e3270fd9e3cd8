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

// As CausalSoftmax, but writes the probabilities as bfloat16 (rounded to
// nearest even) to `probs` (`probs_stride` elements between rows); `scores`
// is clobbered.
void CausalSoftmaxToBF16(float* scores, size_t rows, size_t cols, size_t stride,
                         ptrdiff_t diagonal, float scale,
                         hwy::bfloat16_t* probs, size_t probs_stride);

// Name of the Highway target the kernels dispatch to on this machine.
const char* SimdTargetName();

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_SOFTMAX_H_
