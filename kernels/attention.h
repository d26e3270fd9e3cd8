// The attention core: softmax(Q K^T * scale, causal) V for every (batch,
// head), in query blocks handed out by OpenMP, with grouped-query K/V heads
// and an optional sliding window. Only the keys a query block can see are
// computed; score memory is one query block x its keys per worker.
#ifndef ATTN_KERNELS_ATTENTION_H_
#define ATTN_KERNELS_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attn/status.hpp"
#include "kernels/matmul.h"

namespace attn::kernels {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  // Rows of Q per work item: 64 to 256 ran within 4-8% of each other; 256
  // halves the items (load balance), 64 doubles the matmul calls.
  int64_t query_block = 128;
  DataType type = DataType::kF32;  // of q, k, v, probabilities and ctx
  // Elements between consecutive rows of k (and of v); 0: head_dim. In a
  // KV cache, a padded head (kernels/decode.h DecodePaddedDim) when head
  // major, one key's padded K/V heads when token major.
  int64_t kv_row_stride = 0;
  // K/V heads (grouped-query attention; 1: multi-query). Query head h reads
  // K/V head h / (num_heads / num_kv_heads), as PyTorch's
  // repeat_interleave. 0 or num_heads: one K/V head per query head. Must
  // divide num_heads.
  int64_t num_kv_heads = 0;
  // Sliding window: query i sees keys j with i - window < j <= i. 0: every
  // key j <= i. Must be >= 0.
  int64_t window = 0;
};

// Where Run reads q, k and v (strides in elements). Rows of head h of
// sequence b start at q + b * q_batch_stride + h * q_head_stride, head_dim
// apart; likewise the rows of K/V head g in k and v with kv_batch_stride,
// g * kv_head_stride and rows AttentionShape::kv_row_stride apart, sequence b
// being kv_batches[b] (b when null): a KV cache ([B, Hkv, capacity, Dp] or
// [B, capacity, Hkv, Dp]) is read so, and a prompt may fill any of its
// sequences.
struct AttentionInputs {
  const void* q = nullptr;
  int64_t q_batch_stride = 0, q_head_stride = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t kv_batch_stride = 0, kv_head_stride = 0;
  const int64_t* kv_batches = nullptr;
};

class CausalAttention {
 public:
  // Creates the per-block primitives (single-threaded ones: each work item
  // runs on one worker). Requires every size of `shape` > 0 (num_kv_heads
  // and window may be 0, see AttentionShape) and num_kv_heads to divide
  // num_heads.
  static Result<CausalAttention> Create(const AttentionShape& shape);

  // Scratch one worker needs; Run takes num_threads of them, back to back.
  size_t worker_scratch_bytes() const { return worker_scratch_bytes_; }

  // ctx: [batch, seq_len, num_heads * head_dim], heads merged. scratch:
  // num_threads workers' scratch, 64-byte aligned. Results do not depend on
  // num_threads. The context is normalised after P x V, so the unnormalised
  // sums, up to seq_len x max|v|, must stay finite: |v| below 1e34 at
  // seq_len 32768.
  void Run(const AttentionInputs& in, void* ctx, void* scratch,
           int num_threads) const;
  // The same with q, k and v in qkv: [num_heads + 2 * num_kv_heads, batch *
  // seq_len, head_dim] dense, the q heads then the k and the v heads (the
  // planes the fused projection writes; kv_row_stride must be head_dim). Fills
  // AttentionInputs from PlanesOf.
  void Run(const void* qkv, void* ctx, void* scratch, int num_threads) const;
  // The inputs of those dense planes.
  AttentionInputs PlanesOf(const void* qkv) const;

 private:
  CausalAttention() = default;

  // One worker's scratch, carved up for one work item.
  struct Worker {
    void* q_group;  // the item's query rows stacked, [item_heads * M, D]
    float* scores;  // [item_heads * M, keys]
    void* probs;    // scores, or their bf16 copy
    float* block_ctx;
    float* row_scale;
    void* mm_scratch;
  };
  Worker WorkerAt(void* scratch) const;
  // Work item (b, query heads [h0, h0 + item_heads_) of one K/V head,
  // query block qb).
  void RunItem(const AttentionInputs& in, int64_t b, int64_t h0, int64_t qb,
               void* ctx, const Worker& w) const;
  // First key query block qb sees.
  int64_t FirstKey(int64_t qb) const;

  AttentionShape shape_;
  int64_t group_ = 1;  // query heads per K/V head
  // Query heads per work item: the whole group unless its scores would
  // outgrow kMaxItemScoresBytes (attention.cc).
  int64_t item_heads_ = 1;
  float scale_ = 0.0f;
  size_t worker_scratch_bytes_ = 0;
  size_t q_group_bytes_ = 0;    // stacked query rows (0 for 1 head)
  size_t scores_bytes_ = 0;     // offset of the bf16 probabilities
  size_t probs_bytes_ = 0;      // bf16 probabilities (0 for f32)
  size_t block_ctx_bytes_ = 0;  // one item's f32 context, dense
  size_t row_scale_bytes_ = 0;  // its rows' softmax normalisers
  // Per query block qb, for an item's stacked rows: scores = q_blk k^T
  // and ctx_blk = probs v, over the keys the block sees.
  std::vector<MatMul> scores_mm_;
  std::vector<MatMul> context_mm_;
};

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ATTENTION_H_
