// Element-wise kernels of the graph runner: the book's tanh GELU, Llama's
// SiLU, the residual add and the gating product. Each splits its range over
// OpenMP threads and dispatches once per chunk to the best SIMD target (bodies
// in elementwise-inl.h).
#ifndef ATTN_KERNELS_ELEMENTWISE_H_
#define ATTN_KERNELS_ELEMENTWISE_H_

#include <cstddef>

namespace attn::kernels {

// y[i] = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), x = x[i], for
// i < count. x and y may be the same array.
void Gelu(const float* x, float* y, size_t count, int num_threads);

// y[i] = a[i] + b[i] for i < count. y may be a or b.
void Add(const float* a, const float* b, float* y, size_t count,
         int num_threads);

// y[i] = x / (1 + exp(-x)), x = x[i], for i < count, within 3 ulp of the
// exact value over [-90, 90]. Large negative x gives -0 (at -inf too, the
// limit, where PyTorch gives NaN); large positive x gives x; NaN stays NaN.
// x and y may be the same array.
void Silu(const float* x, float* y, size_t count, int num_threads);

// y[i] = a[i] * b[i] for i < count. y may be a or b.
void Mul(const float* a, const float* b, float* y, size_t count,
         int num_threads);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ELEMENTWISE_H_
