// Dynamic dispatch and the OpenMP split of RowsLinear (one
// HWY_DYNAMIC_DISPATCH per group of units of columns, RowsLinearUnitColumns,
// for f32 and bf16 weights), the CPU's prefetch choice, and the packing of
// its weights.
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
void RowsLinearGroupF32(const float* x, size_t rows, size_t k,
                        const float* packed, const float* bias, size_t n,
                        float* y, size_t first, size_t count,
                        RowsLinearActivation activation,
                        RowsLinearPrefetch prefetch) {
  RowsLinearGroup(x, rows, k, packed, bias, n, y, first, count, activation,
                  prefetch);
}

void RowsLinearGroupBF16(const float* x, size_t rows, size_t k,
                         const hwy::bfloat16_t* packed, const float* bias,
                         size_t n, float* y, size_t first, size_t count,
                         RowsLinearActivation activation,
                         RowsLinearPrefetch prefetch) {
  RowsLinearGroup(x, rows, k, packed, bias, n, y, first, count, activation,
                  prefetch);
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

// Units [front, back) of one thread's share, both in one word so that one
// compare-and-swap takes units from either end; a cache line each, so that
// owners taking units do not contend for one line.
class alignas(64) UnitRange {
 public:
  void Reset(uint32_t front, uint32_t back) {
    span_.store(uint64_t{front} << 32 | back, std::memory_order_relaxed);
  }
  // From the front (the owner's), a quarter of the units left, at least one
  // and at most `most`, so that the last go one by one; or the last unit
  // (another thread's, once done with its own share): [*first, *first +
  // *count); false when none is left.
  bool TakeFront(uint32_t most, uint32_t* first, uint32_t* count) {
    return Take(true, most, first, count);
  }
  bool TakeBack(uint32_t* unit) {
    uint32_t count;
    return Take(false, 1, unit, &count);
  }

 private:
  bool Take(bool front_end, uint32_t most, uint32_t* first, uint32_t* count) {
    uint64_t span = span_.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<uint32_t>(span >> 32);
      const auto back = static_cast<uint32_t>(span);
      if (front >= back) return false;
      const uint32_t taken =
          std::min(most, std::max<uint32_t>(1, (back - front) / 4));
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

// The most units of TW weights in one group.
template <typename TW>
constexpr uint32_t GroupUnits() {
  return kRowsLinearGroupColumns / RowsLinearUnitColumns<TW>();
}

// Units (RowsLinearUnitColumns) in one contiguous share per thread, which
// its owner reads front to back as one stream of panels, in groups of a
// quarter of what is left of it (1 to GroupUnits); a thread done with its
// share takes units one by one from the backs of the others'. A core the
// host slows keeps the others waiting at the barrier for at most one group,
// one unit once its share is nearly done (fixed quarters of a share, of
// two-panel units, left GPT-2's batch-1 step at 2 threads on a Zen 5 with
// 0.35-0.54 ms of one thread idle a step), and which thread computes a
// column never changes its bits.
template <typename TW, class GroupFn>
void Split(GroupFn group, const float* x, size_t rows, size_t k,
           const TW* packed, const float* bias, size_t n, float* y,
           int num_threads, RowsLinearActivation activation,
           RowsLinearPrefetch prefetch) {
  constexpr size_t kUnit = RowsLinearUnitColumns<TW>();
  constexpr uint32_t kGroup = GroupUnits<TW>();
  const size_t units = (n + kUnit - 1) / kUnit;
  const auto run = [&](size_t first, size_t count) {
    group(x, rows, k, packed, bias, n, y, first, count, activation, prefetch);
  };
  const size_t shares =
      num_threads > 1 ? std::min(static_cast<size_t>(num_threads), units) : 1;
  if (shares <= 1) {
    for (size_t first = 0; first < units; first += kGroup) {
      run(first, std::min<size_t>(kGroup, units - first));
    }
    return;
  }
  HWY_DASSERT(units <= UINT32_MAX);
  std::unique_ptr<UnitRange[]> ranges(new UnitRange[shares]);
  for (size_t t = 0; t < shares; ++t) {
    ranges[t].Reset(static_cast<uint32_t>(units * t / shares),
                    static_cast<uint32_t>(units * (t + 1) / shares));
  }
  const int team = static_cast<int>(shares);
#pragma omp parallel num_threads(team)
  {
    // A team smaller than asked leaves shares without an owner: the
    // others take them from the back.
    const auto self = static_cast<size_t>(omp_get_thread_num());
    uint32_t first, count;
    while (ranges[self].TakeFront(kGroup, &first, &count)) run(first, count);
    for (size_t i = 1; i < shares; ++i) {
      UnitRange& other = ranges[(self + i) % shares];
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
                RowsLinearActivation activation, RowsLinearPrefetch prefetch) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearGroupF32), x, rows, k, packed, bias, n,
        y, num_threads, activation, prefetch);
}

void RowsLinear(const float* x, size_t rows, size_t k,
                const hwy::bfloat16_t* packed, const float* bias, size_t n,
                float* y, int num_threads, RowsLinearActivation activation,
                RowsLinearPrefetch prefetch) {
  Split(HWY_DYNAMIC_DISPATCH(RowsLinearGroupBF16), x, rows, k, packed, bias, n,
        y, num_threads, activation, prefetch);
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
