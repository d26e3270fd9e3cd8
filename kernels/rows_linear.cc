// Dynamic dispatch and the OpenMP split of RowsLinear: fixed blocks of
// columns, one HWY_DYNAMIC_DISPATCH each, for f32 and bf16 weights.
#include "kernels/rows_linear.h"

#include <algorithm>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rows_linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/rows_linear-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

// HWY_EXPORT takes no templates: one entry per weight type.
void RowsLinearColumns(const float* x, size_t rows, size_t k, const float* w,
                       const float* bias, size_t n, size_t j0, size_t j1,
                       float* y) {
  RowsLinearT(hn::ScalableTag<float>(), x, rows, k, w, bias, n, j0, j1, y);
}

void RowsLinearColumnsBF16(const float* x, size_t rows, size_t k,
                           const hwy::bfloat16_t* w, const float* bias,
                           size_t n, size_t j0, size_t j1, float* y) {
  RowsLinearT(hn::ScalableTag<float>(), x, rows, k, w, bias, n, j0, j1, y);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(RowsLinearColumns);
HWY_EXPORT(RowsLinearColumnsBF16);

namespace {

// Columns in blocks of kRowsLinearColumns, statically over the team: which
// thread computes a column never changes its bits.
template <typename TW, class Columns>
void RowsLinearSplit(Columns columns, const float* x, size_t rows, size_t k,
                     const TW* w, const float* bias, size_t n, float* y,
                     int num_threads) {
  constexpr size_t kColumns = kRowsLinearColumns;
  const auto blocks = static_cast<int64_t>((n + kColumns - 1) / kColumns);
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t j0 = static_cast<size_t>(b) * kColumns;
    columns(x, rows, k, w, bias, n, j0, std::min(n, j0 + kColumns), y);
  }
}

}  // namespace

void RowsLinear(const float* x, size_t rows, size_t k, const float* w,
                const float* bias, size_t n, float* y, int num_threads) {
  RowsLinearSplit(HWY_DYNAMIC_DISPATCH(RowsLinearColumns), x, rows, k, w, bias,
                  n, y, num_threads);
}

void RowsLinear(const float* x, size_t rows, size_t k, const hwy::bfloat16_t* w,
                const float* bias, size_t n, float* y, int num_threads) {
  RowsLinearSplit(HWY_DYNAMIC_DISPATCH(RowsLinearColumnsBF16), x, rows, k, w,
                  bias, n, y, num_threads);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
