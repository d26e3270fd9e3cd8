// Dynamic dispatch and the OpenMP split of RowsLinear (two panels per work
// item, one HWY_DYNAMIC_DISPATCH each, for f32 and bf16 weights), and the
// packing of its weights.
#include "kernels/rows_linear.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rows_linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/rows_linear-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

// HWY_EXPORT takes no templates: one entry per weight type.
void RowsLinearColumnsF32(const float* x, size_t rows, size_t k,
                          const float* packed, const float* bias, size_t n,
                          size_t j0, float* y) {
  RowsLinearColumns(hn::ScalableTag<float>(), x, rows, k, packed, bias, n, j0,
                    y);
}

void RowsLinearColumnsBF16(const float* x, size_t rows, size_t k,
                           const hwy::bfloat16_t* packed, const float* bias,
                           size_t n, size_t j0, float* y) {
  RowsLinearColumns(hn::ScalableTag<float>(), x, rows, k, packed, bias, n, j0,
                    y);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(RowsLinearColumnsF32);
HWY_EXPORT(RowsLinearColumnsBF16);

namespace {

size_t Panels(size_t n) {
  return (n + kRowsLinearPanel - 1) / kRowsLinearPanel;
}

// Panel by panel, each written in order: k rows of 32 weights, gathered
// from 32 rows of w, whose cache lines stay in L1 while they are used up.
template <typename T>
void Pack(const T* w, size_t n, size_t k, T* packed, int num_threads) {
  const auto panels = static_cast<int64_t>(Panels(n));
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    const size_t j0 = static_cast<size_t>(p) * kRowsLinearPanel;
    T* out = packed + j0 * k;
    for (size_t i = 0; i < k; ++i) {
      for (size_t c = 0; c < kRowsLinearPanel; ++c) {
        *out++ = j0 + c < n ? w[(j0 + c) * k + i] : T{};
      }
    }
  }
}

// Work items of kRowsLinearColumns statically over the team: which thread
// computes a column never changes its bits.
template <typename TW, class ColumnsFn>
void Split(ColumnsFn columns, const float* x, size_t rows, size_t k,
           const TW* packed, const float* bias, size_t n, float* y,
           int num_threads) {
  const auto items =
      static_cast<int64_t>((n + kRowsLinearColumns - 1) / kRowsLinearColumns);
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    columns(x, rows, k, packed, bias, n,
            static_cast<size_t>(item) * kRowsLinearColumns, y);
  }
}

}  // namespace

size_t RowsLinearPackedSize(size_t n, size_t k) {
  return Panels(n) * kRowsLinearPanel * k;
}

void PackRowsLinear(const float* w, size_t n, size_t k, float* packed,
                    int num_threads) {
  Pack(w, n, k, packed, num_threads);
}

void PackRowsLinear(const hwy::bfloat16_t* w, size_t n, size_t k,
                    hwy::bfloat16_t* packed, int num_threads) {
  Pack(w, n, k, packed, num_threads);
}

void RowsLinear(const float* x, size_t rows, size_t k, const float* packed,
                const float* bias, size_t n, float* y, int num_threads) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearColumnsF32), x, rows, k, packed, bias, n,
        y, num_threads);
}

void RowsLinear(const float* x, size_t rows, size_t k,
                const hwy::bfloat16_t* packed, const float* bias, size_t n,
                float* y, int num_threads) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearColumnsBF16), x, rows, k, packed, bias,
        n, y, num_threads);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
