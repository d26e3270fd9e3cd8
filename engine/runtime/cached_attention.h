// CachedAttention: one attention layer's forward of new tokens against its
// layer of a KvCache. Fresh prompts of one length run through the attention
// operator, which copies their K and V into the cache; other steps,
// straight-line: the fused QKV projection of the new tokens, K and V
// appended to the cache, the decode kernel (kernels/decode.h), the output
// projection. It writes past the lengths the cache holds and leaves them:
// its owner (an MhaDecoder, one layer; a Batch, one a layer) Extends the
// cache once every layer has run.
#ifndef ATTN_ENGINE_RUNTIME_CACHED_ATTENTION_H_
#define ATTN_ENGINE_RUNTIME_CACHED_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "attn/status.hpp"
#include "engine/models/mha_model.h"
#include "engine/ops/attention_op.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/kv_cache.h"

namespace attn {

// The sequences one step appends to, ascending, and the tokens each gets
// (MhaDecoder's calls name every sequence, a Batch's steps only those
// they advance, so that a step costs its rows, not the batch's size).
struct NewTokens {
  const int64_t* sequences = nullptr;  // null: 0, 1, ..., num - 1
  const int64_t* counts = nullptr;     // null: `each` for every sequence
  int64_t each = 0;
  size_t num = 0;
  int64_t sequence(size_t i) const {
    return sequences ? sequences[i] : static_cast<int64_t>(i);
  }
  int64_t count(size_t i) const { return counts ? counts[i] : each; }
};

// What the owner holds once for all its layers, which run one at a time.
struct CachedAttentionShared {
  // Bytes the owner holds in all (model, cache, every layer's ops, these
  // buffers), counted in every check against `cap`.
  std::function<uint64_t()> held;
  uint64_t cap = 0;
  // Fresh prompts' activations, and the (batch, length) they were made for.
  OwnedBuffers prompt_buffers;
  std::pair<int64_t, int64_t> prompt_shape{0, 0};
  // Steps' activations, grown to the largest step so far.
  OwnedBuffers step_buffers;
  // The decode kernel's split-KV partials: max_partials slots.
  AlignedBuffer partials;
  size_t max_partials = 0;

  // Partials for every query head of every slot of `cache` at its capacity.
  Status AllocatePartials(const KvCache& cache, int64_t heads);
  uint64_t bytes() const {
    return prompt_buffers.bytes() + step_buffers.bytes() + partials.size();
  }
  // Step buffers that hold `op`'s (OwnedBuffers::Grow); nothing to do, and
  // nothing built, for a step no larger than the largest so far.
  Status FitStep(const AttentionOp& op);
};

// A cache of `layers` layers of `m`'s attention for `sequences` slots of
// `capacity` tokens, laid out as the decode kernel reads it fastest.
KvCache::Shape CacheShapeFor(const MhaModelData& m, int64_t layers,
                             int64_t sequences, int64_t capacity);

class CachedAttention {
 public:
  // Layer `layer` of `cache` (both outlive the op), with the buffers of a
  // one-token-per-slot step, so that such steps allocate nothing. `m` was
  // made with MhaOptions::decode.
  static Result<CachedAttention> Create(const MhaModelData& m,
                                        const KvCache* cache, int64_t layer,
                                        CachedAttentionShared* shared);
  CachedAttention(CachedAttention&&) noexcept = default;
  CachedAttention& operator=(CachedAttention&&) noexcept = default;

  // `rows` new tokens (the sum of tokens' counts, each checked to fit the
  // capacity) from `input` [rows, d_in]; only the rows `keep` lists reach
  // output (every row when it is null), [kept rows, d_out].
  Status Append(const float* input, const NewTokens& tokens, int64_t rows,
                const KeptRows* keep, float* output);
  // Bytes of its step ops and row lists.
  uint64_t bytes() const;

 private:
  CachedAttention() = default;
  // A step op of `rows` rows; `unseen`: bytes of this op's that the
  // owner's held() does not count yet.
  Result<std::unique_ptr<AttentionOp>> MakeStep(int64_t rows,
                                                uint64_t unseen) const;
  Status ReserveLists(int64_t rows, size_t sequences);
  int64_t FreshPromptLength(const NewTokens& tokens);
  Status PreparePrompt(int64_t batch, int64_t seq_len);
  Status AppendRows(const float* input, const NewTokens& tokens, int64_t rows,
                    const KeptRows* keep, float* output);

  const MhaModelData* m_ = nullptr;
  const KvCache* cache_ = nullptr;
  int64_t layer_ = 0;
  CachedAttentionShared* shared_ = nullptr;
  // Steps through the decode kernel: of one token per slot, and of the
  // last other size. Row r is token row_positions_[r] of row_seqs_[r].
  std::unique_ptr<AttentionOp> step_, other_;
  std::vector<int64_t> row_seqs_, row_positions_;
  // Fresh prompts of one length through the attention operator, and the
  // cache slot of each.
  std::unique_ptr<AttentionOp> prompt_;
  std::vector<int64_t> prompt_seqs_;
};

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_CACHED_ATTENTION_H_
