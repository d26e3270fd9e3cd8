// Dynamic dispatch and the OpenMP split of RowsLinear (one
// HWY_DYNAMIC_DISPATCH per group of units of columns, RowsLinearUnitColumns,
// for f32 and bf16 weights), the CPU's choice of reading, and the packing of
// its weights.
#include "kernels/rows_linear.h"

#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rows_linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu.h"
#include "kernels/rows_linear-inl.h"
#include "kernels/unit_split.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

// HWY_EXPORT takes no templates: one entry per weight type.
void RowsLinearGroupF32(const float* x, size_t rows, size_t k,
                        const float* packed, const float* bias, size_t n,
                        float* y, size_t first, size_t count,
                        RowsLinearActivation activation,
                        RowsLinearReading reading) {
  RowsLinearGroup(x, rows, k, packed, bias, n, y, first, count, activation,
                  reading);
}

void RowsLinearGroupBF16(const float* x, size_t rows, size_t k,
                         const hwy::bfloat16_t* packed, const float* bias,
                         size_t n, float* y, size_t first, size_t count,
                         RowsLinearActivation activation,
                         RowsLinearReading reading) {
  RowsLinearGroup(x, rows, k, packed, bias, n, y, first, count, activation,
                  reading);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(RowsLinearGroupF32);
HWY_EXPORT(RowsLinearGroupBF16);

namespace {

size_t Panels(size_t n) {
  return (n + kRowsLinearPanel - 1) / kRowsLinearPanel;
}

// w[j, i] of w [n, k], zero past row n.
template <typename T>
T Weight(const T* w, size_t n, size_t k, size_t j, size_t i) {
  return j < n ? w[j * k + i] : T{};
}

// Row i of the panel of columns [j0, j0 + 32): fp32 in column order.
void PackPanelRow(const float* w, size_t n, size_t k, size_t j0, size_t i,
                  float* out) {
  for (size_t c = 0; c < kRowsLinearPanel; ++c) {
    out[c] = Weight(w, n, k, j0 + c, i);
  }
}

// bf16: columns c and c + 16 in one 32-bit word, the low half and the high
// half, as the tiles widen them (LoadPanelRow).
void PackPanelRow(const hwy::bfloat16_t* w, size_t n, size_t k, size_t j0,
                  size_t i, hwy::bfloat16_t* out) {
  constexpr size_t kHalf = kRowsLinearPanel / 2;
  for (size_t c = 0; c < kHalf; ++c) {
    const uint32_t high = Weight(w, n, k, j0 + kHalf + c, i).bits;
    const uint32_t word = (high << 16) | Weight(w, n, k, j0 + c, i).bits;
    std::memcpy(out + 2 * c, &word, sizeof(word));
  }
}

// Panel by panel, each written as k rows of 32 weights that
// RowsLinearStrides places, gathered from 32 rows of w, whose cache lines
// stay in L1 while they are used up.
template <typename T>
void Pack(const T* w, size_t n, size_t k, T* packed, int num_threads) {
  const auto panels = static_cast<int64_t>(Panels(n));
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    const size_t j0 = static_cast<size_t>(p) * kRowsLinearPanel;
    const size_t item_j0 = j0 / kRowsLinearColumns * kRowsLinearColumns;
    const RowsLinearItemStrides at =
        RowsLinearStrides<T>(RowsLinearItemPanels(n, item_j0), k);
    T* out =
        packed + item_j0 * k + (j0 - item_j0) / kRowsLinearPanel * at.panel;
    for (size_t i = 0; i < k; ++i) {
      PackPanelRow(w, n, k, j0, i, out + i * at.row);
    }
  }
}

// The most units of TW weights in one group.
template <typename TW>
constexpr uint32_t GroupUnits() {
  return kRowsLinearGroupColumns / RowsLinearUnitColumns<TW>();
}
static_assert(kRowsLinearSidePanels <= GroupUnits<float>(),
              "a group holds the panels read side by side");

// Units (RowsLinearUnitColumns) split over the team by SplitUnits, in
// groups of at most GroupUnits, each computed by `group`.
template <typename TW, class GroupFn>
void Split(GroupFn group, const float* x, size_t rows, size_t k,
           const TW* packed, const float* bias, size_t n, float* y,
           int num_threads, RowsLinearActivation activation,
           RowsLinearReading reading) {
  constexpr size_t kUnit = RowsLinearUnitColumns<TW>();
  const size_t units = (n + kUnit - 1) / kUnit;
  const size_t least =
      RowsLinearReadsSidePanels<TW>(rows, reading) ? kRowsLinearSidePanels : 1;
  SplitUnits(units, static_cast<uint32_t>(least), GroupUnits<TW>(), num_threads,
             [&](size_t first, size_t count) {
               group(x, rows, k, packed, bias, n, y, first, count, activation,
                     reading);
             });
}

}  // namespace

RowsLinearReading RowsLinearReadingOfThisCpu() {
  static const RowsLinearReading reading = {
      IsIntelCpu() ? RowsLinearPrefetch::kEveryTile
                   : RowsLinearPrefetch::kManyFmasPerLine,
      RowsLinearPanels::kSideBySide};
  return reading;
}

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
                const float* bias, size_t n, float* y, int num_threads,
                RowsLinearActivation activation, RowsLinearReading reading) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearGroupF32), x, rows, k, packed, bias, n,
        y, num_threads, activation, reading);
}

void RowsLinear(const float* x, size_t rows, size_t k,
                const hwy::bfloat16_t* packed, const float* bias, size_t n,
                float* y, int num_threads, RowsLinearActivation activation,
                RowsLinearReading reading) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearGroupBF16), x, rows, k, packed, bias, n,
        y, num_threads, activation, reading);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
