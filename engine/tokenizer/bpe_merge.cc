// BPE merging (see bpe_merge.h).
#include "engine/tokenizer/bpe_merge.h"

#include <algorithm>
#include <tuple>

namespace attn::tokenizer {

void BpeMerges::Reserve(size_t count) {
  if (2 * count > slots_.size()) Grow(2 * count);
}

void BpeMerges::Grow(size_t want) {
  size_t slots = 16;
  while (slots < want) slots *= 2;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{kEmpty, {0, 0}});
  mask_ = slots - 1;
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != kEmpty) {
      Set(static_cast<int32_t>(slot.key >> 32),
          static_cast<int32_t>(slot.key & 0xFFFFFFFF), slot.merge.rank,
          slot.merge.merged);
    }
  }
}

void BpeMerges::Set(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if (2 * (size_ + 1) > slots_.size()) Grow(4 * (size_ + 1));
  const uint64_t key = Key(left, right);
  for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == kEmpty) {
      slot = Slot{key, {rank, merged}};
      ++size_;
      return;
    }
    if (slot.key == key) {
      slot.merge = {rank, merged};
      return;
    }
  }
}

namespace {

// Lowest rank first, then leftmost: std::push_heap keeps the largest on
// top, so "greater" orders it.
bool Later(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return std::tie(a.rank, a.pos) > std::tie(b.rank, b.pos);
}

}  // namespace

void JoinPairs(const BpeMerges& merges, std::vector<int32_t>* symbols,
               BpeScratch* scratch) {
  std::vector<int32_t>& ids = *symbols;
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  // Node i keeps index i, its place in the piece, so that pairs of equal
  // rank are taken left to right; a node joined away holds -1.
  std::vector<int32_t>& prev = scratch->prev;
  std::vector<int32_t>& next = scratch->next;
  prev.resize(n);
  next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<BpeScratch::Candidate>& heap = scratch->heap;
  heap.clear();
  const auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const int32_t left = ids[pos], right = ids[next[pos]];
    if (const BpeMerges::Merge* merge = merges.Find(left, right)) {
      heap.push_back({merge->rank, pos, left, right, merge->merged});
      std::push_heap(heap.begin(), heap.end(), Later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<int32_t>& joined = scratch->joined;
  while (!heap.empty()) {
    // A rank names one pair, so this step joins that pair only.
    const int32_t rank = heap.front().rank;
    joined.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), Later);
      const BpeScratch::Candidate c = heap.back();
      heap.pop_back();
      // Skip entries that earlier joins made stale.
      if (ids[c.pos] != c.left || next[c.pos] < 0 ||
          ids[next[c.pos]] != c.right) {
        continue;
      }
      const int32_t gone = next[c.pos];
      ids[c.pos] = c.merged;
      ids[gone] = -1;
      next[c.pos] = next[gone];
      if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
      joined.push_back(c.pos);
    }
    for (const int32_t pos : joined) {
      push(prev[pos]);
      push(pos);
    }
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

}  // namespace attn::tokenizer
