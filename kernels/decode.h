// Decode attention: single query rows against a KV cache. Per row and head a
// matrix-vector product over the cached keys, split into fixed-size key
// chunks whose partial softmax results (m, l, o) are merged in a fixed order.
// Dispatches once per call; the per-target body is in decode-inl.h.
#ifndef ATTN_KERNELS_DECODE_H_
#define ATTN_KERNELS_DECODE_H_

#include <cstddef>

namespace attn::kernels {

// Keys per chunk, the unit of split-KV work. A constant: the split, and so
// every bit of the result, depends on the number of keys only, never on the
// thread count (PRIOR_ART D3; ggml's split depends on threads, ours doesn't).
constexpr size_t kDecodeChunk = 256;
// q, k and v rows are padded with zeros to a multiple of this many floats
// (64 bytes, the widest x86 vector), so the kernel needs no tail handling.
constexpr size_t kDecodeAlign = 16;

inline size_t DecodeChunks(size_t num_keys) {
  return (num_keys + kDecodeChunk - 1) / kDecodeChunk;
}
inline size_t DecodePaddedDim(size_t head_dim) {
  return (head_dim + kDecodeAlign - 1) / kDecodeAlign * kDecodeAlign;
}
// Floats of one partial result: m and l, padding, then o [padded_dim].
inline size_t DecodePartialFloats(size_t padded_dim) {
  return kDecodeAlign + padded_dim;
}

struct DecodeParams {
  size_t num_heads = 0;
  size_t head_dim = 0;     // D
  size_t row_stride = 0;   // DecodePaddedDim(D): floats between key rows,
                           // value rows, and the heads of a query row
  size_t head_stride = 0;  // floats between the heads of one sequence's cache
  float scale = 0.0f;      // softmax(scale * q.k), 1/sqrt(D)
};

// One query row: the token at position num_keys - 1 of its sequence.
struct DecodeRow {
  const float* q = nullptr;  // head h at q + h * row_stride, zero padded
  const float* k = nullptr;  // key j of head h at k + h * head_stride +
                             // j * row_stride, zero padded
  const float* v = nullptr;  // laid out as k
  size_t num_keys = 0;       // keys [0, num_keys) are visible; > 0
  float* ctx = nullptr;      // [num_heads * head_dim], heads merged
  // Index of this row's first partial: the sum over earlier rows of
  // num_heads * DecodeChunks(num_keys).
  size_t first_partial = 0;
};

// Number of partials DecodeAttention needs for rows[0, num_rows).
inline size_t DecodeNumPartials(const DecodeParams& params,
                                const DecodeRow* rows, size_t num_rows) {
  if (num_rows == 0) return 0;
  const DecodeRow& last = rows[num_rows - 1];
  return last.first_partial + params.num_heads * DecodeChunks(last.num_keys);
}

// For every row and head: ctx = softmax(scale * q.k_j, j < num_keys) . v.
// Work items (row, head, key chunk) are spread over num_threads OpenMP
// threads, then each (row, head) merges its chunks in order. `partials`:
// DecodeNumPartials x DecodePartialFloats(row_stride) floats, 64-byte
// aligned. Results are bitwise identical for every num_threads. As the
// full-sequence core: a NaN or +inf score makes the row NaN, a row whose
// scores are all -inf becomes zeros; NaN or Inf in v propagates.
void DecodeAttention(const DecodeParams& params, const DecodeRow* rows,
                     size_t num_rows, float* partials, int num_threads);

// Appends new tokens to a KV cache: for row r, qkv + r * 3 * H * D holds
// its q, k and v (each [H, D], heads merged, the fused projection's
// token-major output). Writes q into rows[r].q (padding lanes zero) and k
// and v into key num_keys - 1 of rows[r].k and rows[r].v (laid out as
// DecodeAttention reads them, padding lanes zero). Rows are spread over
// num_threads OpenMP threads from more than 16 rows on.
void DecodeAppend(const DecodeParams& params, const float* qkv,
                  const DecodeRow* rows, size_t num_rows, int num_threads);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_DECODE_H_
