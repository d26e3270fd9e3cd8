#include "engine/runtime/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "engine/runtime/limits.h"

namespace attn {
namespace {

uint64_t SlotBytes(int64_t sequences) {
  return MulSat(2 * uint64_t(sequences), sizeof(int64_t));  // lengths, heap
}

uint64_t LayerFloats(const KvCache::Shape& s) {
  return MulSat(MulSat(uint64_t(s.sequences), uint64_t(s.kv_heads)),
                MulSat(uint64_t(s.capacity), uint64_t(s.padded_dim)));
}

}  // namespace

uint64_t KvCache::BytesFor(const Shape& shape) {
  const uint64_t kv = MulSat(MulSat(2 * sizeof(float), uint64_t(shape.layers)),
                             LayerFloats(shape));
  return AddSat(kv, SlotBytes(shape.sequences));
}

Result<KvCache> KvCache::Create(const Shape& shape, bool all_live,
                                uint64_t held, uint64_t cap,
                                const std::string& what) {
  const uint64_t bytes = BytesFor(shape);
  ATTN_RETURN_IF_ERROR(CheckMemory(what, AddSat(held, bytes), cap));
  if (bytes > SIZE_MAX / 2) return OutOfMemory(what + " is too large");
  KvCache cache;
  cache.shape_ = shape;
  cache.layer_floats_ = static_cast<int64_t>(LayerFloats(shape));
  ATTN_ASSIGN_OR_RETURN(
      cache.storage_,
      AlignedBuffer::Allocate(bytes - SlotBytes(shape.sequences)));
  // Zeroed now, for two reasons. A prompt's projection writes the first D
  // floats of each head's row of a key: the padding lanes, which the decode
  // kernel reads, start zero and stay. And the pages are touched here, not
  // by the steps that grow into them: a step never stops to fault one in
  // (GPT-2 at batch 8 grows into about 140 pages a step, each fault 10 us
  // on a VM), and the memory the cap counted is really held from the start.
  cache.storage_.ZeroAllPages();
  const auto slots = static_cast<size_t>(shape.sequences);
  cache.lengths_.assign(slots, all_live ? 0 : -1);
  cache.next_unused_ = all_live ? shape.sequences : 0;
  cache.freed_.reserve(slots);
  return cache;
}

KvView KvCache::layer(int64_t layer) const {
  const Shape& s = shape_;
  auto* base = static_cast<float*>(storage_.data()) + 2 * layer * layer_floats_;
  KvView view;
  view.k = base;
  view.v = base + layer_floats_;
  view.row_stride = s.head_major ? s.padded_dim : s.kv_heads * s.padded_dim;
  view.head_stride = s.head_major ? s.capacity * s.padded_dim : s.padded_dim;
  view.batch_stride = s.capacity * s.kv_heads * s.padded_dim;
  view.capacity = s.capacity;
  return view;
}

int64_t KvCache::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= shape_.sequences) return -1;
  return lengths_[static_cast<size_t>(sequence)];
}

Status KvCache::CheckLive(int64_t sequence, const char* what) const {
  const bool in_range = sequence >= 0 && sequence < shape_.sequences;
  if (in_range && lengths_[static_cast<size_t>(sequence)] >= 0) return {};
  return InvalidArgument(
      std::string("cannot ") + what + " sequence " + std::to_string(sequence) +
      ": it is not a live sequence (" +
      (in_range
           ? std::string("never added, or removed")
           : "out of range [0, " + std::to_string(shape_.sequences) + ")") +
      ")");
}

Result<int64_t> KvCache::Add() {
  int64_t slot = -1;
  if (!freed_.empty()) {  // every freed slot lies below next_unused_
    slot = freed_.front();
    std::pop_heap(freed_.begin(), freed_.end(), std::greater<>());
    freed_.pop_back();
  } else if (next_unused_ < shape_.sequences) {
    slot = next_unused_++;
  } else {
    return InvalidArgument("all " + std::to_string(shape_.sequences) +
                           " sequence slots are live (max_sequences): "
                           "Remove one first");
  }
  lengths_[static_cast<size_t>(slot)] = 0;
  return slot;
}

Status KvCache::Remove(int64_t sequence) {
  ATTN_RETURN_IF_ERROR(CheckLive(sequence, "remove"));
  lengths_[static_cast<size_t>(sequence)] = -1;
  freed_.push_back(sequence);
  std::push_heap(freed_.begin(), freed_.end(), std::greater<>());
  return {};
}

Status KvCache::Copy(int64_t from, int64_t to) {
  ATTN_RETURN_IF_ERROR(CheckLive(from, "copy"));
  ATTN_RETURN_IF_ERROR(CheckLive(to, "copy"));
  if (from == to) return {};
  const int64_t held = lengths_[static_cast<size_t>(from)];
  for (int64_t l = 0; l < shape_.layers; ++l) {
    const KvView view = layer(l);
    // The first `held` keys: one run per K/V head (head major) or one in
    // all (token major).
    const int64_t runs = shape_.head_major ? shape_.kv_heads : 1;
    const size_t bytes =
        static_cast<size_t>(held * view.row_stride) * sizeof(float);
    for (float* base : {view.k, view.v}) {
      for (int64_t g = 0; g < runs; ++g) {
        const int64_t at = g * view.head_stride;
        std::memcpy(base + to * view.batch_stride + at,
                    base + from * view.batch_stride + at, bytes);
      }
    }
  }
  lengths_[static_cast<size_t>(to)] = held;
  return {};
}

Result<int64_t> KvCache::Fork(int64_t sequence) {
  ATTN_RETURN_IF_ERROR(CheckLive(sequence, "fork"));
  ATTN_ASSIGN_OR_RETURN(const int64_t fork, Add());
  ATTN_RETURN_IF_ERROR(Copy(sequence, fork));  // both live: cannot fail
  return fork;
}

Status KvCache::Truncate(int64_t sequence, int64_t length) {
  ATTN_RETURN_IF_ERROR(CheckLive(sequence, "truncate"));
  int64_t& held = lengths_[static_cast<size_t>(sequence)];
  if (length < 0 || length > held) {
    return InvalidArgument(
        "cannot truncate sequence " + std::to_string(sequence) + " of " +
        std::to_string(held) + " tokens to " + std::to_string(length) +
        ", want 0 <= length <= " + std::to_string(held));
  }
  held = length;
  return {};
}

void KvCache::Clear() {
  for (int64_t& held : lengths_) held = std::min<int64_t>(held, 0);
}

void KvCache::Extend(int64_t sequence, int64_t count) {
  lengths_[static_cast<size_t>(sequence)] += count;
}

uint64_t KvCache::bytes() const {
  return AddSat(storage_.size(), SlotBytes(shape_.sequences));
}

}  // namespace attn
