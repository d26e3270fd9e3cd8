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

// fp32 panel by panel, each k rows of 32 weights in column order, gathered
// from 32 rows of w, whose cache lines stay in L1 while they are used up.
void Pack(const float* w, size_t n, size_t k, float* packed, int num_threads) {
  const auto panels = static_cast<int64_t>(Panels(n));
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    const size_t j0 = static_cast<size_t>(p) * kRowsLinearPanel;
    float* out = packed + j0 * k;
    for (size_t i = 0; i < k; ++i) {
      for (size_t c = 0; c < kRowsLinearPanel; ++c) {
        out[i * kRowsLinearPanel + c] = Weight(w, n, k, j0 + c, i);
      }
    }
  }
}

// bf16 item by item, each RowsLinearPaddedK(k) / 2 rows of 64 words, the
// word of column j holding w[j, 2p] in its low half and w[j, 2p + 1] in
// its high half, gathered from 64 rows of w.
void Pack(const hwy::bfloat16_t* w, size_t n, size_t k, hwy::bfloat16_t* packed,
          int num_threads) {
  const auto items =
      static_cast<int64_t>((n + kRowsLinearColumns - 1) / kRowsLinearColumns);
  const size_t pairs = RowsLinearPaddedK<hwy::bfloat16_t>(k) / 2;
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const size_t j0 = static_cast<size_t>(item) * kRowsLinearColumns;
    hwy::bfloat16_t* out = packed + 2 * pairs * j0;
    for (size_t p = 0; p < pairs; ++p) {
      for (size_t c = 0; c < kRowsLinearColumns; ++c) {
        const size_t j = j0 + c, i = 2 * p;
        const uint32_t low = i < k ? Weight(w, n, k, j, i).bits : 0;
        const uint32_t high = i + 1 < k ? Weight(w, n, k, j, i + 1).bits : 0;
        const uint32_t word = (high << 16) | low;
        std::memcpy(out + 2 * (p * kRowsLinearColumns + c), &word, 4);
      }
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
