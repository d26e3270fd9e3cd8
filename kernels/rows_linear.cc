// Dynamic dispatch and the OpenMP split of RowsLinear (two panels per work
// item, one HWY_DYNAMIC_DISPATCH each, for f32 and bf16 weights; items in
// groups through a stack buffer), the CPU's prefetch choice, and the packing
// of its weights.
#include "kernels/rows_linear.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rows_linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu.h"
#include "kernels/rows_linear-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

// HWY_EXPORT takes no templates: one entry per weight type.
void RowsLinearColumnsF32(const float* x, size_t rows, size_t k,
                          const float* packed, const float* bias, size_t n,
                          size_t j0, float* y, size_t ldy,
                          RowsLinearPrefetch prefetch) {
  RowsLinearColumns(hn::ScalableTag<float>(), x, rows, k, packed, bias, n, j0,
                    y, ldy, prefetch);
}

void RowsLinearColumnsBF16(const float* x, size_t rows, size_t k,
                           const hwy::bfloat16_t* packed, const float* bias,
                           size_t n, size_t j0, float* y, size_t ldy,
                           RowsLinearPrefetch prefetch) {
  RowsLinearColumns(hn::ScalableTag<float>(), x, rows, k, packed, bias, n, j0,
                    y, ldy, prefetch);
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

// Items [front, back) of one thread's share, both in one word so that one
// compare-and-swap takes items from either end; a cache line each, so that
// owners taking items do not contend for one line.
class alignas(64) ItemRange {
 public:
  void Reset(uint32_t front, uint32_t back) {
    span_.store(uint64_t{front} << 32 | back, std::memory_order_relaxed);
  }
  // Up to `most` items from the front (the owner's) or the last one (another
  // thread's, once done with its own share): [*first, *first + *count);
  // false when none is left.
  bool TakeFront(uint32_t most, uint32_t* first, uint32_t* count) {
    return Take(true, most, first, count);
  }
  bool TakeBack(uint32_t* item) {
    uint32_t count;
    return Take(false, 1, item, &count);
  }

 private:
  bool Take(bool front_end, uint32_t most, uint32_t* first, uint32_t* count) {
    uint64_t span = span_.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<uint32_t>(span >> 32);
      const auto back = static_cast<uint32_t>(span);
      if (front >= back) return false;
      const uint32_t taken = std::min(most, back - front);
      const uint64_t rest =
          front_end ? span + (uint64_t{taken} << 32) : span - taken;
      if (span_.compare_exchange_weak(span, rest, std::memory_order_relaxed)) {
        *first = front_end ? front : back - taken;
        *count = taken;
        return true;
      }
    }
  }
  std::atomic<uint64_t> span_{0};
};

// The most items whose outputs land in one buffer on the stack before one
// copy spreads them over y's rows. Tiles storing straight into y touch a
// page per row for every panel: on the Xeon of RowsLinearPrefetch, 8 rows
// then streamed their weights 13-15% slower than through the buffer (the
// L2 prefetcher's streams seem to lose track of the weights;
// bench/RESULTS.md). 8 items of 8 rows: 16 KiB.
constexpr size_t kGroupItems = 8;

// Items [first, first + count) of y [rows, n] through one buffer.
template <typename TW, class ColumnsFn>
void RunGroup(ColumnsFn columns, const float* x, size_t rows, size_t k,
              const TW* packed, const float* bias, size_t n, float* y,
              RowsLinearPrefetch prefetch, size_t first, size_t count) {
  HWY_DASSERT(rows >= 1 && rows <= kRowsLinearMaxRows && count <= kGroupItems);
  HWY_ALIGN float buffer[kGroupItems * kRowsLinearColumns * kRowsLinearMaxRows];
  const size_t ldb = count * kRowsLinearColumns;
  const size_t j0 = first * kRowsLinearColumns;
  for (size_t i = 0; i < count; ++i) {
    columns(x, rows, k, packed, bias, n, j0 + i * kRowsLinearColumns,
            buffer + i * kRowsLinearColumns, ldb, prefetch);
  }
  const size_t width = std::min(n, j0 + ldb) - j0;
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(y + r * n + j0, buffer + r * ldb, width * sizeof(float));
  }
}

// Work items of kRowsLinearColumns in one contiguous share per thread, which
// its owner reads front to back as one stream of panels, in groups of a
// quarter of an average share (1 to kGroupItems); a thread done with its share
// takes items one by one from the backs of the others'. A core the host
// slows keeps the others waiting at the barrier for one group at most, and
// which thread computes a column never changes its bits.
template <typename TW, class ColumnsFn>
void Split(ColumnsFn columns, const float* x, size_t rows, size_t k,
           const TW* packed, const float* bias, size_t n, float* y,
           int num_threads, RowsLinearPrefetch prefetch) {
  const size_t items = (n + kRowsLinearColumns - 1) / kRowsLinearColumns;
  const auto run = [&](size_t first, size_t count) {
    RunGroup(columns, x, rows, k, packed, bias, n, y, prefetch, first, count);
  };
  const size_t shares =
      num_threads > 1 ? std::min(static_cast<size_t>(num_threads), items) : 1;
  if (shares <= 1) {
    for (size_t first = 0; first < items; first += kGroupItems) {
      run(first, std::min(kGroupItems, items - first));
    }
    return;
  }
  HWY_DASSERT(items <= UINT32_MAX);
  const auto group = static_cast<uint32_t>(
      std::clamp<size_t>(items / shares / 4, 1, kGroupItems));
  std::unique_ptr<ItemRange[]> ranges(new ItemRange[shares]);
  for (size_t t = 0; t < shares; ++t) {
    ranges[t].Reset(static_cast<uint32_t>(items * t / shares),
                    static_cast<uint32_t>(items * (t + 1) / shares));
  }
  const int team = static_cast<int>(shares);
#pragma omp parallel num_threads(team)
  {
    // A team smaller than asked leaves shares without an owner: the
    // others take them from the back.
    const auto self = static_cast<size_t>(omp_get_thread_num());
    uint32_t first, count;
    while (ranges[self].TakeFront(group, &first, &count)) run(first, count);
    for (size_t i = 1; i < shares; ++i) {
      ItemRange& other = ranges[(self + i) % shares];
      while (other.TakeBack(&first)) run(first, 1);
    }
  }
}

}  // namespace

RowsLinearPrefetch RowsLinearPrefetchOfThisCpu() {
  static const RowsLinearPrefetch prefetch =
      IsIntelCpu() ? RowsLinearPrefetch::kEveryTile
                   : RowsLinearPrefetch::kManyFmasPerLine;
  return prefetch;
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
                RowsLinearPrefetch prefetch) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearColumnsF32), x, rows, k, packed, bias, n,
        y, num_threads, prefetch);
}

void RowsLinear(const float* x, size_t rows, size_t k,
                const hwy::bfloat16_t* packed, const float* bias, size_t n,
                float* y, int num_threads, RowsLinearPrefetch prefetch) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearColumnsBF16), x, rows, k, packed, bias,
        n, y, num_threads, prefetch);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
