// The whole multi-head attention block of a tiny problem as plain loops on
// the calling thread, for shapes where a oneDNN call's and an OpenMP team's
// fixed cost dwarfs the work (the book's chapter-3 example is 816 FLOPs).
// Causal, one K/V head per query head, no rotary embeddings or window; fp32
// accumulation in a fixed order, the normalised CausalSoftmax: the same
// bits at every team size, since it never uses one.
#ifndef ATTN_KERNELS_ATTENTION_TINY_H_
#define ATTN_KERNELS_ATTENTION_TINY_H_

#include <cstddef>
#include <cstdint>

namespace attn::kernels {

struct TinyAttentionShape {
  int64_t batch = 0, seq_len = 0, d_in = 0, d_out = 0, num_heads = 0;
};

// The weights in nn.Linear's layout: w_qkv [3 d_out, d_in] (W_query,
// W_key, W_value stacked), b_qkv [3 d_out] or null, w_out [d_out, d_out],
// b_out [d_out].
struct TinyAttentionWeights {
  const float* w_qkv = nullptr;
  const float* b_qkv = nullptr;
  const float* w_out = nullptr;
  const float* b_out = nullptr;
};

// Floats of the scratch TinyAttention needs: q, k and v of every row, one
// head's scores, the heads' merged outputs.
size_t TinyAttentionScratchFloats(const TinyAttentionShape& shape);

// x [batch * seq_len, d_in] -> y [batch * seq_len, d_out].
void TinyAttention(const TinyAttentionShape& shape,
                   const TinyAttentionWeights& w, const float* x, float* y,
                   float* scratch);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ATTENTION_TINY_H_
