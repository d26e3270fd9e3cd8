// Plain scalar, double-accumulating implementations: the executable spec the
// kernels and the engine are tested against. Written for clarity, not speed.
#ifndef ATTN_TESTS_REFERENCE_H_
#define ATTN_TESTS_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn::reference {

// softmax(scale * x[0, valid)) followed by zeros up to x.size(); an empty
// prefix gives all zeros.
std::vector<double> CausalSoftmaxRow(const std::vector<float>& x, size_t valid,
                                     double scale);

// Chapter-3 MultiHeadAttention weights in PyTorch layout ([out, in]
// row-major); biases may be null (the q/k/v ones together).
struct MhaWeights {
  const float* w_query = nullptr;
  const float* w_key = nullptr;
  const float* w_value = nullptr;
  const float* b_query = nullptr;
  const float* b_key = nullptr;
  const float* b_value = nullptr;
  const float* w_out = nullptr;
  const float* b_out = nullptr;
};

// x: [batch, seq_len, d_in] -> [batch, seq_len, d_out].
std::vector<double> MhaForward(const float* x, int64_t batch, int64_t seq_len,
                               int64_t d_in, int64_t d_out, int64_t num_heads,
                               const MhaWeights& weights);

// The attention core alone. qkv: [3, num_heads, batch * seq_len, head_dim];
// returns ctx [batch, seq_len, num_heads * head_dim].
std::vector<double> CausalAttention(const float* qkv, int64_t batch,
                                    int64_t seq_len, int64_t num_heads,
                                    int64_t head_dim);

// Grouped-query, windowed attention core: q [num_heads, batch * seq_len,
// head_dim], k and v [num_kv_heads, batch * seq_len, head_dim]. Query head h
// reads K/V head h / (num_heads / num_kv_heads); query i sees keys j with
// i - window < j <= i (window 0: every j <= i). Returns ctx [batch, seq_len,
// num_heads * head_dim].
struct GqaShape {
  int64_t batch = 0, seq_len = 0, num_heads = 0, num_kv_heads = 0;
  int64_t head_dim = 0, window = 0;
};
std::vector<double> GroupedAttention(const float* q, const float* k,
                                     const float* v, const GqaShape& shape);

}  // namespace attn::reference

#endif  // ATTN_TESTS_REFERENCE_H_
