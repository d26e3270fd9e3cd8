#include "kernels/attention_tiny.h"

#include <cmath>

#include "kernels/softmax.h"

namespace attn::kernels {
namespace {

// y [rows, out] = x [rows, in] W^T + b, W [out, in].
void Project(const float* x, const float* w, const float* b, int64_t rows,
             int64_t in, int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      float sum = b ? b[j] : 0.0f;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[j * in + i];
      y[r * out + j] = sum;
    }
  }
}

// One (sequence, head): scores [T, T] of q against k, their causal softmax,
// then ctx rows = p v. q, k, v: rows `stride` floats apart.
void AttendHead(const float* q, const float* k, const float* v, int64_t T,
                int64_t D, int64_t stride, float scale, float* scores,
                float* ctx, int64_t ctx_stride) {
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t t = 0; t <= i; ++t) {
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d)
        dot += q[i * stride + d] * k[t * stride + d];
      scores[i * T + t] = dot;
    }
  }
  CausalSoftmax(scores, static_cast<size_t>(T), static_cast<size_t>(T),
                static_cast<size_t>(T), 0, scale);
  for (int64_t i = 0; i < T; ++i) {
    float* out = ctx + i * ctx_stride;
    for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
    for (int64_t t = 0; t <= i; ++t) {
      const float p = scores[i * T + t];
      for (int64_t d = 0; d < D; ++d) out[d] += p * v[t * stride + d];
    }
  }
}

}  // namespace

size_t TinyAttentionScratchFloats(const TinyAttentionShape& s) {
  const int64_t rows = s.batch * s.seq_len;
  return static_cast<size_t>(rows * 4 * s.d_out + s.seq_len * s.seq_len);
}

void TinyAttention(const TinyAttentionShape& s, const TinyAttentionWeights& w,
                   const float* x, float* y, float* scratch) {
  const int64_t R = s.batch * s.seq_len, T = s.seq_len, C = s.d_out;
  const int64_t D = C / s.num_heads;
  float* qkv = scratch;             // [R, 3C]: q, k, v of row r
  float* scores = qkv + R * 3 * C;  // [T, T], one (sequence, head) at a time
  float* ctx = scores + T * T;      // [R, C], heads merged
  Project(x, w.w_qkv, w.b_qkv, R, s.d_in, 3 * C, qkv);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const float* q = qkv + b * T * 3 * C + h * D;
      AttendHead(q, q + C, q + 2 * C, T, D, 3 * C, scale, scores,
                 ctx + b * T * C + h * D, C);
    }
  }
  Project(ctx, w.w_out, w.b_out, R, C, C, y);
}

}  // namespace attn::kernels
