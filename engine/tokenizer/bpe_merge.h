// BPE's merge step, shared by every tokenizer here: a table of ranked pairs
// of ids and the loop that joins a piece's symbols by it.
#ifndef ATTN_ENGINE_TOKENIZER_BPE_MERGE_H_
#define ATTN_ENGINE_TOKENIZER_BPE_MERGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn::tokenizer {

// Ranked pairs of ids (each below 2^24) in an open-addressing table: the
// hot loop looks pairs up without hashing a std::pair or chasing nodes.
class BpeMerges {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged;  // the id of the two tokens joined
  };
  // Pair (left, right) joins into `merged` at `rank`; a pair set twice
  // keeps the later call's merge.
  void Set(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // The pair's merge, or nullptr.
  const Merge* Find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }
  // About the bytes the table holds.
  uint64_t memory_bytes() const { return slots_.capacity() * sizeof(Slot); }
  // Room for `count` pairs without growing.
  void Reserve(size_t count);

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^24
  static uint64_t Key(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) |
           static_cast<uint32_t>(right);
  }
  static size_t Hash(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(key ^ (key >> 29));
  }
  void Grow(size_t slots);

  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

// What JoinPairs works in, kept by the caller across pieces so that a piece
// costs no allocation once the vectors have grown.
struct BpeScratch {
  struct Candidate {
    int32_t rank, pos, left, right, merged;
  };
  std::vector<int32_t> prev, next;
  std::vector<Candidate> heap;
  std::vector<int32_t> joined;
};

// encoder.py's bpe() in O(n log n) rather than its O(n^2) (a long text
// without spaces, or a SentencePiece text, is one piece): while some
// adjacent pair has a rank, join every occurrence of the lowest-ranked one,
// left to right without overlap. The pairs a step makes wait until it ends,
// as in encoder.py. `symbols` becomes the joined ids.
void JoinPairs(const BpeMerges& merges, std::vector<int32_t>* symbols,
               BpeScratch* scratch);

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_BPE_MERGE_H_
