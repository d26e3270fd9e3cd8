// The split of a decode kernel's units of columns over an OpenMP team, shared
// by RowsLinear and QuantRowsLinear: one contiguous share per thread, read
// front to back, and units taken from the backs of the others' shares once a
// thread's own is done. Which thread computes a unit never changes its bits.
#ifndef ATTN_KERNELS_UNIT_SPLIT_H_
#define ATTN_KERNELS_UNIT_SPLIT_H_

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "hwy/base.h"

namespace attn::kernels {

// Units [front, back) of one thread's share, both in one word so that one
// compare-and-swap takes units from either end; a cache line each, so that
// owners taking units do not contend for one line.
class alignas(64) UnitRange {
 public:
  void Reset(uint32_t front, uint32_t back) {
    span_.store(uint64_t{front} << 32 | back, std::memory_order_relaxed);
  }
  // From the front (the owner's), a quarter of the units left, at least
  // `least` (or all that is left) and at most `most`, so that the last go
  // `least` at a time; or the last unit (another thread's, once done with
  // its own share): [*first, *first + *count); false when none is left.
  bool TakeFront(uint32_t least, uint32_t most, uint32_t* first,
                 uint32_t* count) {
    return Take(true, least, most, first, count);
  }
  bool TakeBack(uint32_t* unit) {
    uint32_t count;
    return Take(false, 1, 1, unit, &count);
  }

 private:
  bool Take(bool front_end, uint32_t least, uint32_t most, uint32_t* first,
            uint32_t* count) {
    uint64_t span = span_.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<uint32_t>(span >> 32);
      const auto back = static_cast<uint32_t>(span);
      if (front >= back) return false;
      const uint32_t taken =
          std::min(back - front, std::clamp((back - front) / 4, least, most));
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

// Calls run(first, count) over units [0, units), count <= most: one
// contiguous share per thread, which its owner reads front to back, in runs
// of a quarter of what is left of it (`least` to `most`, a kernel's
// streams side by side); a thread done with its share takes units one by
// one from the backs of the others'. A core the host slows keeps the
// others waiting at the barrier for at most one run, `least` units once its
// share is nearly done (fixed quarters of a share, of RowsLinear's
// two-panel units, left GPT-2's batch-1 step at 2 threads on a Zen 5 with
// 0.35-0.54 ms of one thread idle a step). One thread, or one unit, runs on
// the caller in runs of `most`. 1 <= least <= most.
template <class Run>
void SplitUnits(size_t units, uint32_t least, uint32_t most, int num_threads,
                const Run& run) {
  const size_t shares =
      num_threads > 1 ? std::min(static_cast<size_t>(num_threads), units) : 1;
  if (shares <= 1) {
    for (size_t first = 0; first < units; first += most) {
      run(first, std::min<size_t>(most, units - first));
    }
    return;
  }
  HWY_DASSERT(units <= UINT32_MAX && least >= 1 && least <= most);
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
    while (ranges[self].TakeFront(least, most, &first, &count)) {
      run(first, count);
    }
    for (size_t i = 1; i < shares; ++i) {
      UnitRange& other = ranges[(self + i) % shares];
      while (other.TakeBack(&first)) run(first, 1);
    }
  }
}

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_UNIT_SPLIT_H_
