// Dynamic dispatch and OpenMP split for the row norms: one
// HWY_DYNAMIC_DISPATCH per block of rows.
#include "kernels/layernorm.h"

#include <algorithm>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layernorm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/layernorm-inl.h"

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

// Calls run_block(first_row, n) for blocks of whole rows, split statically
// over up to num_threads threads (a single block runs on the caller). A row
// is never split, so its result does not depend on the team.
template <class RunBlock>
void ForEachRowBlock(size_t rows, size_t cols, int num_threads,
                     const RunBlock& run_block) {
  // About 16 KiB of input per block: a few blocks per thread even at b*T = 8.
  const size_t block = std::max<size_t>(1, 4096 / std::max<size_t>(cols, 1));
  const auto blocks = static_cast<int64_t>((rows + block - 1) / block);
#pragma omp parallel for num_threads(num_threads) \
    schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t r = static_cast<size_t>(b) * block;
    run_block(r, std::min(block, rows - r));
  }
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
