// The attention core: softmax(Q K^T * scale, causal) V for every (batch,
// head), in query blocks handed out by OpenMP. Only the keys a query block
// can see are computed; score memory is one query block x seq_len per worker.
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
  int64_t query_block = 128;       // rows of Q per work item (bench/RESULTS.md)
  DataType type = DataType::kF32;  // of q, k, v, probabilities and ctx
};

class CausalAttention {
 public:
  // Creates the per-block primitives (single-threaded ones: each work item
  // runs on one worker). Requires every field of `shape` > 0.
  static Result<CausalAttention> Create(const AttentionShape& shape);

  // Scratch one worker needs; Run takes num_threads of them, back to back.
  size_t worker_scratch_bytes() const { return worker_scratch_bytes_; }

  // qkv: [3, num_heads, batch * seq_len, head_dim] dense (q, k, v planes;
  // the layout the fused projection writes). ctx: [batch, seq_len,
  // num_heads * head_dim], heads merged. scratch: num_threads workers'
  // scratch, 64-byte aligned. Results do not depend on num_threads.
  // The context is normalised after P x V, so the unnormalised sums, up to
  // seq_len x max|v|, must stay finite: |v| below 1e34 at seq_len 32768.
  void Run(const void* qkv, void* ctx, void* scratch, int num_threads) const;

 private:
  CausalAttention() = default;

  AttentionShape shape_;
  float scale_ = 0.0f;
  size_t worker_scratch_bytes_ = 0;
  size_t scores_bytes_ = 0;     // offset of the bf16 probabilities
  size_t probs_bytes_ = 0;      // bf16 probabilities (0 for f32)
  size_t block_ctx_bytes_ = 0;  // one query block's f32 context, dense
  size_t row_scale_bytes_ = 0;  // its rows' softmax normalisers
  // Per query block qb: scores = q_blk k^T and ctx_blk = probs v.
  std::vector<MatMul> scores_mm_;
  std::vector<MatMul> context_mm_;
};

// The whole block for shapes so small that oneDNN's and OpenMP's fixed cost
// per call (microseconds) outweighs the arithmetic: plain loops with fp32
// accumulation on the calling thread, and the normalised CausalSoftmax (the
// core splits it around its P x V matmul).
struct TinyMhaShape {
  int64_t batch = 0, seq_len = 0, d_in = 0, d_out = 0, num_heads = 0;
};

// Worth taking when the block's FLOPs are below this. The oneDNN path's
// fixed cost (18 us at seed, measured) buys about 10^5 FLOPs of these plain
// loops at a few GFLOP/s, so 32768 stays clear of the crossover; seed is 816.
constexpr double kTinyMhaMaxFlops = 32768;

// Floats of scratch TinyMhaForward needs: qkv, one head's scores, ctx.
size_t TinyMhaScratchFloats(const TinyMhaShape& shape);

// x [B, T, d_in] -> y [B, T, d_out]. w_qkv: W_query, W_key, W_value stacked
// [3 * d_out, d_in] (PyTorch layout); b_qkv [3 * d_out] or null; w_out
// [d_out, d_out]; b_out [d_out].
void TinyMhaForward(const TinyMhaShape& shape, const float* x,
                    const float* w_qkv, const float* b_qkv, const float* w_out,
                    const float* b_out, float* scratch, float* y);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ATTENTION_H_
