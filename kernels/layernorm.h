// The row norms over the rows of a matrix: the book's LayerNorm (chapter 4:
// learnable scale and shift, biased variance) and Llama's RMSNorm. Each
// dispatches once per block of rows to the best SIMD target; the per-target
// bodies are in layernorm-inl.h.
#ifndef ATTN_KERNELS_LAYERNORM_H_
#define ATTN_KERNELS_LAYERNORM_H_

#include <cstddef>

namespace attn::kernels {

// For each row r of x ([rows, cols], dense):
//   y[r] = scale * (x[r] - mean) / sqrt(var + eps) + shift
// with mean and the biased variance over the row. scale and shift: [cols].
// Rows are split over up to num_threads OpenMP threads; each row's result
// does not depend on num_threads. x and y must not overlap.
void LayerNorm(const float* x, const float* scale, const float* shift, float* y,
               size_t rows, size_t cols, float eps, int num_threads);

// For each row r of x ([rows, cols], dense):
//   y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight
// as Hugging Face's LlamaRMSNorm in float32. weight: [cols]. Rows are split
// over up to num_threads OpenMP threads; each row's result does not depend
// on num_threads. y may be x (in place), but must not overlap it otherwise.
void RmsNorm(const float* x, const float* weight, float* y, size_t rows,
             size_t cols, float eps, int num_threads);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_LAYERNORM_H_
