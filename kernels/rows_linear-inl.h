// Per-target body of RowsLinear (rows_linear.h).

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_ROWS_LINEAR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_ROWS_LINEAR_INL_H_
#undef ATTN_KERNELS_ROWS_LINEAR_INL_H_
#else
#define ATTN_KERNELS_ROWS_LINEAR_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hwy/base.h"
#include "hwy/highway.h"
#include "kernels/cpu.h"
#include "kernels/elementwise-inl.h"
#include "kernels/rows_linear.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How far ahead of the panel row being read the tiles prefetch: about the
// bytes one core reads in one to two memory latencies. A GPT-2 step's
// weights at 8 rows on Zen 5: 25-29 ms f32 and 20-26 bf16 with no
// prefetch, 22-25 and 13 at 8 KiB ahead. On the AMX Xeon of
// RowsLinearPrefetch::kEveryTile, fp32 at 8 rows streams 13% faster 2 KiB ahead
// (once the outputs land in one buffer, RowsLinearGroup), bf16 30% slower.
template <typename TW>
constexpr uintptr_t PrefetchBytes(RowsLinearPrefetch prefetch) {
  return prefetch == RowsLinearPrefetch::kEveryTile && sizeof(TW) == 4 ? 2048
                                                                       : 8192;
}

// Whether the tiles of an item of kRows rows have many FMAs per cache line
// of weights (kRows for fp32, twice that for bf16): enough to slow the
// stream below memory's rate unless they prefetch (RowsLinearPrefetch).
template <size_t kRows, typename TW>
constexpr bool ManyFmasPerLine() {
  return kRows * sizeof(float) / sizeof(TW) >= 6;
}

// Vector registers of the target: x86 before AVX-512 has 16, the others 32.
constexpr size_t kVectorRegisters =
    (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 16 : 32;

// Accumulators of a tile: half the vector registers; the rows of panels
// and x's lane take the rest.
constexpr size_t kTileAccumulators = kVectorRegisters / 2;

template <class D>
constexpr size_t PanelVectors() {
  static_assert(kRowsLinearPanel % hn::MaxLanes(D()) == 0, "whole vectors");
  return kRowsLinearPanel / hn::MaxLanes(D());
}

// Prefetches the 128-byte row of a panel at `row` kPrefetchBytes ahead (0:
// none).
template <uintptr_t kPrefetchBytes>
HWY_INLINE void PrefetchPanelRow(const void* row) {
  if constexpr (kPrefetchBytes != 0) {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(row) + kPrefetchBytes;
    for (uintptr_t b = 0; b < kRowsLinearPanel * sizeof(float); b += 64) {
      PrefetchL2(reinterpret_cast<const void*>(ahead + b));
    }
  }
}

// acc[r][v] += x[r * k + i] * w[v] for every row and vector.
template <size_t kRows, size_t kVectors, class D>
HWY_INLINE void MulAddRows(D d, const float* x, size_t k, size_t i,
                           const hn::Vec<D> (&w)[kVectors],
                           hn::Vec<D> (&acc)[kRows][kVectors]) {
  for (size_t r = 0; r < kRows; ++r) {
    const hn::Vec<D> xv = hn::Set(d, x[r * k + i]);
    for (size_t v = 0; v < kVectors; ++v) {
      acc[r][v] = hn::MulAdd(xv, w[v], acc[r][v]);
    }
  }
}

// Rows of one tile of one panel (AVX-512: all 8, so the panel streams by
// once; AVX2: 2, and the other rows read the panel again from L2).
template <class D>
constexpr size_t TileRows() {
  return std::clamp<size_t>(kTileAccumulators / PanelVectors<D>(), 1,
                            kRowsLinearMaxRows);
}

// One step i of RowsLinearTile over fp32 panels: row i of each (columns
// in order) into every chain of acc.
template <size_t kRows, size_t kPanels, uintptr_t kPrefetchBytes, class D>
HWY_INLINE void RowsLinearTileStep(
    D d, const float* x, size_t k, const float* panel, RowsLinearItemStrides at,
    size_t i, hn::Vec<D> (&acc)[kRows][kPanels * PanelVectors<D>()]) {
  constexpr size_t N = hn::MaxLanes(D());
  constexpr size_t kVectors = kPanels * PanelVectors<D>();
  hn::Vec<D> w[kVectors];
  for (size_t q = 0; q < kPanels; ++q) {
    const float* row = panel + q * at.panel + i * at.row;
    PrefetchPanelRow<kPrefetchBytes>(row);
    for (size_t v = 0; v < PanelVectors<D>(); ++v) {
      w[q * PanelVectors<D>() + v] = hn::LoadU(d, row + v * N);
    }
  }
  MulAddRows<kRows>(d, x, k, i, w, acc);
}

// Steps 2p and 2p + 1 (with kWithOdd; else 2p alone, the last of an odd k)
// over bf16 panels, whose row p holds w[j, 2p] and w[j, 2p + 1] in one
// 32-bit word (low half, high half: PackRowsLinear): one load, then one
// bit operation widens the weights of each i to f32 exactly (a bf16's
// bits are its float's high half), so every product and sum is the one
// the fp32 step makes on the widened weights, bit for bit.
template <size_t kRows, size_t kPanels, uintptr_t kPrefetchBytes, bool kWithOdd,
          class D>
HWY_INLINE void RowsLinearPairStep(
    D d, const float* x, size_t k, const hwy::bfloat16_t* panel,
    RowsLinearItemStrides at, size_t p,
    hn::Vec<D> (&acc)[kRows][kPanels * PanelVectors<D>()]) {
  const hn::RebindToUnsigned<D> du;
  constexpr size_t N = hn::MaxLanes(D());
  constexpr size_t kVectors = kPanels * PanelVectors<D>();
  hn::Vec<decltype(du)> u[kVectors];
  for (size_t q = 0; q < kPanels; ++q) {
    const hwy::bfloat16_t* row = panel + q * at.panel + p * at.row;
    PrefetchPanelRow<kPrefetchBytes>(row);
    const auto* words = reinterpret_cast<const uint32_t*>(row);
    for (size_t v = 0; v < PanelVectors<D>(); ++v) {
      u[q * PanelVectors<D>() + v] = hn::LoadU(du, words + v * N);
    }
  }
  hn::Vec<D> w[kVectors];
  for (size_t v = 0; v < kVectors; ++v) {
    w[v] = hn::BitCast(d, hn::ShiftLeft<16>(u[v]));
  }
  MulAddRows<kRows>(d, x, k, 2 * p, w, acc);
  if constexpr (kWithOdd) {
    const auto high = hn::Set(du, 0xFFFF0000u);
    for (size_t v = 0; v < kVectors; ++v) {
      w[v] = hn::BitCast(d, hn::And(u[v], high));
    }
    MulAddRows<kRows>(d, x, k, 2 * p + 1, w, acc);
  }
}

// kRows rows of y (ldy apart) from those of x (k apart) by kPanels panels
// of one item, the first at `panel`, placed by `at`: each output is one
// chain of FMAs over k in order, from zero, then plus its bias (bias and y
// at the tile's first column, bias null for none). Stores only the first
// `columns`. Two panels give one row four chains to overlap. The tile
// prefetches the weights kPrefetchBytes ahead, or not at 0.
template <size_t kRows, size_t kPanels, uintptr_t kPrefetchBytes, class D,
          typename TW>
HWY_INLINE void RowsLinearTile(D d, const float* x, size_t k, const TW* panel,
                               RowsLinearItemStrides at, const float* bias,
                               size_t columns, float* y, size_t ldy) {
  using V = hn::Vec<D>;
  constexpr size_t N = hn::MaxLanes(D());
  constexpr size_t kVectors = kPanels * PanelVectors<D>();
  V acc[kRows][kVectors];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < kVectors; ++v) acc[r][v] = hn::Zero(d);
  }
  if constexpr (std::is_same_v<TW, hwy::bfloat16_t>) {
    // Unrolled: fewer instructions per weight let the core run further
    // ahead; the bf16 decode step of GPT-2 at 1 row ran 8-11% faster on
    // the AMX Xeon of RowsLinearPrefetch::kEveryTile (fp32: no faster).
    const size_t pairs = k / 2;
    HWY_UNROLL(2)
    for (size_t p = 0; p < pairs; ++p) {
      RowsLinearPairStep<kRows, kPanels, kPrefetchBytes, true>(d, x, k, panel,
                                                               at, p, acc);
    }
    if (k % 2 != 0) {
      RowsLinearPairStep<kRows, kPanels, kPrefetchBytes, false>(d, x, k, panel,
                                                                at, k / 2, acc);
    }
  } else {
    for (size_t i = 0; i < k; ++i) {
      RowsLinearTileStep<kRows, kPanels, kPrefetchBytes>(d, x, k, panel, at, i,
                                                         acc);
    }
  }
  for (size_t v = 0; v < kVectors && v * N < columns; ++v) {
    const size_t c = v * N, count = columns - c;
    const V b = bias ? LoadTail(d, bias + c, count) : hn::Zero(d);
    for (size_t r = 0; r < kRows; ++r) {
      StoreTail(d, hn::Add(b, acc[r][v]), y + r * ldy + c, count);
    }
  }
}

// Whether kRows rows read both panels of an item in one tile: bf16 only
// (its items hold the panels row by row, RowsLinearStrides), where their
// accumulators fit. fp32 items hold one panel after the other, which tiles
// of one panel read as one stream.
template <size_t kRows, class D, typename TW>
constexpr bool BothPanelsInOneTile() {
  return std::is_same_v<TW, hwy::bfloat16_t> &&
         2 * kRows * PanelVectors<D>() <= kTileAccumulators;
}

// kRows rows of y by the item at `item` of `panels` (1 or 2) panels, its
// first `columns` (bias and y as RowsLinearTile's): both panels in one tile
// (BothPanelsInOneTile), else panel by panel in tiles of TileRows.
template <size_t kRows, uintptr_t kPrefetchBytes, class D, typename TW>
HWY_INLINE void RowsLinearItemT(D d, const float* x, size_t k, const TW* item,
                                size_t panels, const float* bias,
                                size_t columns, float* y, size_t ldy) {
  const RowsLinearItemStrides at = RowsLinearStrides<TW>(k);
  if constexpr (BothPanelsInOneTile<kRows, D, TW>()) {
    if (panels == 2) {
      return RowsLinearTile<kRows, 2, kPrefetchBytes>(d, x, k, item, at, bias,
                                                      columns, y, ldy);
    }
  }
  constexpr size_t kTile = std::min(kRows, TileRows<D>());
  for (size_t q = 0; q < panels; ++q) {
    const TW* one = item + q * at.panel;
    const size_t c = q * kRowsLinearPanel;
    const float* bias_q = bias ? bias + c : nullptr;
    size_t r = 0;
    for (; r + kTile <= kRows; r += kTile) {
      RowsLinearTile<kTile, 1, kPrefetchBytes>(
          d, x + r * k, k, one, at, bias_q, columns - c, y + r * ldy + c, ldy);
    }
    if constexpr (kRows % kTile != 0) {
      RowsLinearTile<kRows % kTile, 1, kPrefetchBytes>(
          d, x + r * k, k, one, at, bias_q, columns - c, y + r * ldy + c, ldy);
    }
  }
}

// As above, prefetching as `prefetch` says for kRows rows.
template <size_t kRows, class D, typename TW>
HWY_INLINE void RowsLinearItem(D d, const float* x, size_t k, const TW* item,
                               size_t panels, const float* bias, size_t columns,
                               float* y, size_t ldy,
                               RowsLinearPrefetch prefetch) {
  if (prefetch != RowsLinearPrefetch::kManyFmasPerLine) {
    constexpr uintptr_t kBytes =
        PrefetchBytes<TW>(RowsLinearPrefetch::kEveryTile);
    return RowsLinearItemT<kRows, kBytes>(d, x, k, item, panels, bias, columns,
                                          y, ldy);
  }
  constexpr uintptr_t kBytes =
      ManyFmasPerLine<kRows, TW>()
          ? PrefetchBytes<TW>(RowsLinearPrefetch::kManyFmasPerLine)
          : 0;
  RowsLinearItemT<kRows, kBytes>(d, x, k, item, panels, bias, columns, y, ldy);
}

// The work unit of columns [j0, j0 + RowsLinearUnitColumns<TW>()), or up
// to n (j0 a multiple of the unit), for 1 <= rows <= kRowsLinearMaxRows
// rows, into y [rows, ldy] from its column 0: y[r * ldy + c] is column
// j0 + c of row r. Its panels start at packed + j0 * RowsLinearPaddedK(k).
template <class D, typename TW>
HWY_INLINE void RowsLinearColumns(D d, const float* x, size_t rows, size_t k,
                                  const TW* packed, const float* bias, size_t n,
                                  size_t j0, float* y, size_t ldy,
                                  RowsLinearPrefetch prefetch) {
  const TW* item = packed + j0 * RowsLinearPaddedK<TW>(k);
  const size_t columns = std::min(RowsLinearUnitColumns<TW>(), n - j0);
  const size_t panels = (columns + kRowsLinearPanel - 1) / kRowsLinearPanel;
  const float* bias_j0 = bias ? bias + j0 : nullptr;
  switch (rows) {
    case 1:
      return RowsLinearItem<1>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    case 2:
      return RowsLinearItem<2>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    case 3:
      return RowsLinearItem<3>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    case 4:
      return RowsLinearItem<4>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    case 5:
      return RowsLinearItem<5>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    case 6:
      return RowsLinearItem<6>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    case 7:
      return RowsLinearItem<7>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
    default:
      return RowsLinearItem<8>(d, x, k, item, panels, bias_j0, columns, y, ldy,
                               prefetch);
  }
}

// Panels of fp32 weights a one-row tile of target D reads side by side:
// as many as its accumulators hold, kRowsLinearSidePanels at most.
template <class D>
constexpr size_t SidePanels() {
  return std::clamp<size_t>(kTileAccumulators / PanelVectors<D>(), 1,
                            kRowsLinearSidePanels);
}

// One row of y (from its column 0) by fp32 panels [first, first + count) (units
// of one panel), kPanels side by side in one tile, each its own stream, while
// that many are left, then half as many (RowsLinearPanels::kSideBySide).
template <size_t kPanels, class D>
HWY_INLINE void RowsLinearSidePanels(D d, const float* x, size_t k,
                                     const float* packed, const float* bias,
                                     size_t n, size_t first, size_t count,
                                     float* y) {
  const RowsLinearItemStrides at = RowsLinearStrides<float>(k);
  size_t p = 0;
  for (; p + kPanels <= count; p += kPanels) {
    const size_t j = (first + p) * kRowsLinearPanel;
    RowsLinearTile<1, kPanels, 0>(d, x, k, packed + j * k, at,
                                  bias ? bias + j : nullptr,
                                  std::min(kPanels * kRowsLinearPanel, n - j),
                                  y + p * kRowsLinearPanel, 0);
  }
  if constexpr (kPanels > 1) {
    if (p < count) {
      RowsLinearSidePanels<kPanels / 2>(d, x, k, packed, bias, n, first + p,
                                        count - p, y + p * kRowsLinearPanel);
    }
  }
}

// Units [first, first + count) of y [rows, n] into buffer [rows, ldb]:
// panels side by side (RowsLinearReadsSidePanels), else unit by unit.
template <typename TW>
HWY_INLINE void RowsLinearUnits(const float* x, size_t rows, size_t k,
                                const TW* packed, const float* bias, size_t n,
                                size_t first, size_t count, float* buffer,
                                size_t ldb, RowsLinearReading reading) {
  const hn::ScalableTag<float> d;
  if constexpr (std::is_same_v<TW, float>) {
    if (RowsLinearReadsSidePanels<TW>(rows, reading)) {
      return RowsLinearSidePanels<SidePanels<decltype(d)>()>(
          d, x, k, packed, bias, n, first, count, buffer);
    }
  }
  constexpr size_t kUnit = RowsLinearUnitColumns<TW>();
  for (size_t i = 0; i < count; ++i) {
    RowsLinearColumns(d, x, rows, k, packed, bias, n, (first + i) * kUnit,
                      buffer + i * kUnit, ldb, reading.prefetch);
  }
}

// Units [first, first + count) of y [rows, n], count * unit <=
// kRowsLinearGroupColumns, through one buffer on the stack, then
// `activation` on the way to y.
template <typename TW>
HWY_INLINE void RowsLinearGroup(const float* x, size_t rows, size_t k,
                                const TW* packed, const float* bias, size_t n,
                                float* y, size_t first, size_t count,
                                RowsLinearActivation activation,
                                RowsLinearReading reading) {
  constexpr size_t kUnit = RowsLinearUnitColumns<TW>();
  HWY_DASSERT(rows >= 1 && rows <= kRowsLinearMaxRows &&
              count * kUnit <= kRowsLinearGroupColumns);
  HWY_ALIGN float buffer[kRowsLinearGroupColumns * kRowsLinearMaxRows];
  const size_t ldb = count * kUnit;
  const size_t j0 = first * kUnit;
  RowsLinearUnits(x, rows, k, packed, bias, n, first, count, buffer, ldb,
                  reading);
  const size_t width = std::min(n, j0 + ldb) - j0;
  for (size_t r = 0; r < rows; ++r) {
    const float* from = buffer + r * ldb;
    float* to = y + r * n + j0;
    if (activation == RowsLinearActivation::kGelu) {
      GeluT(from, to, width);
    } else {
      std::memcpy(to, from, width * sizeof(float));
    }
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ROWS_LINEAR_INL_H_
