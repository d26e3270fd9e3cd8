// y = x W^T + b for a few rows of x: the projections of a decode step. They
// are bound by reading W once, and oneDNN's matmul, cut into tiles that do
// not depend on the team size, reads a step's weights at half the speed
// (bench/RESULTS.md). Here each output is one dot product in a fixed order
// and the columns are spread over threads, so every bit of the result is the
// same for every num_threads. Per-target bodies in rows_linear-inl.h.
#ifndef ATTN_KERNELS_ROWS_LINEAR_H_
#define ATTN_KERNELS_ROWS_LINEAR_H_

#include <cstddef>

#include "hwy/base.h"

namespace attn::kernels {

// The most rows RowsLinear takes: past a few rows, reading W once no longer
// bounds the time and a blocked matmul wins.
constexpr size_t kRowsLinearMaxRows = 8;
// Columns each OpenMP work item computes: 64 columns of 768 floats are 192
// KiB of w, enough to amortise the dispatch, few enough to spread one
// projection over many threads.
constexpr size_t kRowsLinearColumns = 64;

// y[r, j] = bias[j] + sum_i x[r, i] * w[j, i] for r < rows <= 8, j < n,
// i < k: x [rows, k], w [n, k] (nn.Linear's layout), y [rows, n], dense;
// bias [n] or null.
void RowsLinear(const float* x, size_t rows, size_t k, const float* w,
                const float* bias, size_t n, float* y, int num_threads);

// As above with bf16 weights: each weight is widened to fp32 exactly, so the
// result has the bits of the fp32 overload on the widened weights.
void RowsLinear(const float* x, size_t rows, size_t k, const hwy::bfloat16_t* w,
                const float* bias, size_t n, float* y, int num_threads);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ROWS_LINEAR_H_
