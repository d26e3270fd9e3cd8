// KvCache: the keys and values of every attention layer of a model for a
// number of sequence slots, and each slot's state (free, or live with the
// tokens it holds). Adding, removing, forking and truncating a sequence
// happen here, once for all layers. A step writes each layer's new K and V
// past the held lengths and Extends the sequences after its last layer, so
// a step that fails part-way leaves every sequence as it was.
#ifndef ATTN_ENGINE_RUNTIME_KV_CACHE_H_
#define ATTN_ENGINE_RUNTIME_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attn/status.hpp"
#include "engine/ops/attention_op.h"
#include "engine/runtime/buffer.h"

namespace attn {

class KvCache {
 public:
  struct Shape {
    int64_t layers = 0;
    int64_t sequences = 0;  // slots
    int64_t capacity = 0;   // tokens a sequence may hold
    int64_t kv_heads = 0;
    int64_t padded_dim = 0;   // kernels::DecodePaddedDim(head_dim)
    bool head_major = false;  // kernels::DecodeBlocksHeads (see KvView)
  };

  // Bytes Create allocates for `shape` (saturating): the K and V and the
  // per-slot bookkeeping.
  static uint64_t BytesFor(const Shape& shape);
  // Zeroed storage (padding lanes read as zeros, every page faulted in
  // now), checked against `cap` with `held` bytes held besides; an error
  // names `what`. Every slot starts free, or live and empty with all_live.
  static Result<KvCache> Create(const Shape& shape, bool all_live,
                                uint64_t held, uint64_t cap,
                                const std::string& what);
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  const Shape& shape() const { return shape_; }
  // Where layer `layer`'s K and V lie.
  KvView layer(int64_t layer) const;
  // Tokens slot `sequence` holds; -1 when it is out of range or free.
  int64_t length(int64_t sequence) const;

  // Takes the lowest free slot, empty, in O(log sequences).
  Result<int64_t> Add();
  Status Remove(int64_t sequence);
  // Makes live slot `to` hold what live slot `from` holds, in every layer.
  Status Copy(int64_t from, int64_t to);
  // A new slot holding what `sequence` holds.
  Result<int64_t> Fork(int64_t sequence);
  // Keeps the first `length` tokens of a live slot.
  Status Truncate(int64_t sequence, int64_t length);
  // Empties every live slot.
  void Clear();
  // Counts `count` more tokens in live slot `sequence`, whose K and V every
  // layer has written (at most capacity in all: the caller checked).
  void Extend(int64_t sequence, int64_t count);

  // Bytes of the K and V, and of everything held.
  uint64_t storage_bytes() const { return storage_.size(); }
  uint64_t bytes() const;

 private:
  KvCache() = default;
  Status CheckLive(int64_t sequence, const char* what) const;

  Shape shape_;
  AlignedBuffer storage_;         // per layer: K, then V
  int64_t layer_floats_ = 0;      // of one layer's K (or V)
  std::vector<int64_t> lengths_;  // per slot; -1: free
  // The free slots: every slot from next_unused_ on, and those below it
  // that Remove freed (a min-heap, reserved for every slot: Remove never
  // allocates).
  int64_t next_unused_ = 0;
  std::vector<int64_t> freed_;
};

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_KV_CACHE_H_
