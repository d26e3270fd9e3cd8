// Element-wise kernels of the graph runner: the book's tanh GELU and the
// residual add. Each splits its range over OpenMP threads and dispatches once
// per chunk to the best SIMD target (bodies in elementwise-inl.h).
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

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ELEMENTWISE_H_
