// Dynamic dispatch and OpenMP split for the row norms: one
// HWY_DYNAMIC_DISPATCH per block of rows.
#include "kernels/layernorm.h"

#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/layernorm-inl.h"
#include "kernels/threads.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

void LayerNormBlock(const float* x, const float* scale, const float* shift,
                    float* y, size_t rows, size_t cols, float eps) {
  LayerNormRowsT(x, scale, shift, y, rows, cols, eps);
}

void RmsNormBlock(const float* x, const float* weight, float* y, size_t rows,
                  size_t cols, float eps) {
  RmsNormRowsT(x, weight, y, rows, cols, eps);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(LayerNormBlock);
HWY_EXPORT(RmsNormBlock);

namespace {

// Calls run_block(first_row, n) for blocks of whole rows (ParallelForChunks).
// A row is never split, so its result does not depend on the team.
template <class RunBlock>
void ForEachRowBlock(size_t rows, size_t cols, int num_threads,
                     const RunBlock& run_block) {
  ParallelForChunks(rows, cols, 1, num_threads, run_block);
}

}  // namespace

void LayerNorm(const float* x, const float* scale, const float* shift, float* y,
               size_t rows, size_t cols, float eps, int num_threads) {
  ForEachRowBlock(rows, cols, num_threads, [&](size_t r, size_t n) {
    HWY_DYNAMIC_DISPATCH(LayerNormBlock)
    (x + r * cols, scale, shift, y + r * cols, n, cols, eps);
  });
}

void RmsNorm(const float* x, const float* weight, float* y, size_t rows,
             size_t cols, float eps, int num_threads) {
  ForEachRowBlock(rows, cols, num_threads, [&](size_t r, size_t n) {
    HWY_DYNAMIC_DISPATCH(RmsNormBlock)
    (x + r * cols, weight, y + r * cols, n, cols, eps);
  });
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
