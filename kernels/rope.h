// Rotary position embeddings (RoPE) in the rotate-half convention of Llama
// and Hugging Face: a cos/sin table built once per model, and the kernel
// that rotates rows of q or k in place with it. The per-target body is in
// rope-inl.h; rope.cc dispatches once per call.
#ifndef ATTN_KERNELS_ROPE_H_
#define ATTN_KERNELS_ROPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attn/status.hpp"

namespace attn::kernels {

// The frequencies: theta, and Llama 3.1's scaling of the low ones. With
// factor <= 0 or == 1 there is no scaling and the other fields are unused.
struct RopeConfig {
  float theta = 10000.0f;
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_context_length = 8192;
};

// OK when RopeTable::Create accepts `config`; else an error naming the
// field.
Status ValidateRopeConfig(const RopeConfig& config);

// inv_freq[i] for i < head_dim / 2, in float32 as PyTorch computes it:
// 1 / theta^(2i / head_dim), then Llama 3.1's scaling when config asks for
// it. Requires a config and head_dim that RopeTable::Create accepts.
std::vector<float> RopeInverseFrequencies(const RopeConfig& config,
                                          int64_t head_dim);

// cos and sin of p * inv_freq[i] (a float32 product, as torch.outer) for
// positions p in [0, max_positions) and i < head_dim / 2.
class RopeTable {
 public:
  // Errors: head_dim odd or <= 0, max_positions <= 0, theta not > 0, scaling
  // parameters out of range, or a table too large to address.
  static Result<RopeTable> Create(const RopeConfig& config, int64_t head_dim,
                                  int64_t max_positions);
  // What Create would allocate, so that a caller can count it against a
  // memory cap first; 0 for shapes Create refuses.
  static size_t BytesFor(int64_t head_dim, int64_t max_positions);

  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return max_positions_; }
  size_t bytes() const { return BytesFor(head_dim_, max_positions_); }
  // head_dim / 2 values each, for 0 <= position < max_positions.
  const float* cos(int64_t position) const {
    return cos_.data() + position * (head_dim_ / 2);
  }
  const float* sin(int64_t position) const {
    return sin_.data() + position * (head_dim_ / 2);
  }

 private:
  RopeTable() = default;

  int64_t head_dim_ = 0;
  int64_t max_positions_ = 0;
  std::vector<float> cos_;  // [max_positions, head_dim / 2]
  std::vector<float> sin_;
};

// Rows to rotate in place, in floats: row r starts at data + r * row_stride
// and holds num_heads heads of head_dim floats (the table's), head_stride
// apart. The heads of one call must not overlap.
struct RopeRows {
  float* data = nullptr;
  size_t num_rows = 0;
  size_t row_stride = 0;
  size_t num_heads = 1;
  size_t head_stride = 0;
};

// Rotates every head of row r by position positions[r], each in
// [0, table.max_positions()): with half = head_dim / 2, for i < half,
//   x[i]        = x[i] cos[p][i] - x[i + half] sin[p][i]
//   x[i + half] = x[i + half] cos[p][i] + x[i] sin[p][i].
// Single-threaded (for callers inside their own parallel loops); dispatches
// once per call.
void ApplyRope(const RopeTable& table, const RopeRows& rows,
               const int64_t* positions);
// The same with row r at position first_position + r.
void ApplyRope(const RopeTable& table, const RopeRows& rows,
               int64_t first_position);
// The first form with the rows split over up to num_threads OpenMP threads;
// each row's result does not depend on num_threads.
void ApplyRope(const RopeTable& table, const RopeRows& rows,
               const int64_t* positions, int num_threads);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ROPE_H_
