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
// thread count (ggml's split depends on the threads; ours does not).
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
  // K/V heads (grouped-query attention): query head h reads K/V head
  // h / (num_heads / num_kv_heads), as PyTorch's repeat_interleave. 0 or
  // num_heads: one K/V head per query head. Must divide num_heads.
  size_t num_kv_heads = 0;
  size_t head_dim = 0;     // D
  size_t padded_dim = 0;   // DecodePaddedDim(D): floats of one head's row
                           // of q, k or v, and between a query row's heads
  size_t key_stride = 0;   // floats between the rows of consecutive keys
  size_t head_stride = 0;  // floats between the K/V heads of one key
  float scale = 0.0f;      // softmax(scale * q.k), 1/sqrt(D)
  // Sliding window: a row sees only its last `window` keys; 0: all of them.
  size_t window = 0;
};

// K/V heads of `params`, and the query heads sharing each of them.
inline size_t DecodeKvHeads(const DecodeParams& params) {
  return params.num_kv_heads == 0 ? params.num_heads : params.num_kv_heads;
}
inline size_t DecodeGroup(const DecodeParams& params) {
  return params.num_heads / DecodeKvHeads(params);
}

// Whether DecodeAttention holds blocks of these heads (num_heads,
// num_kv_heads and padded_dim of `params`) in registers while the keys
// pass, reading the block's heads side by side: ungrouped heads of 1 to 8
// vectors of this CPU's target. On Zen 5 such heads read a head-major cache
// ([B, Hkv, capacity, Dp]: each head's keys one run) faster than a
// token-major one ([B, capacity, Hkv, Dp]: each key's heads one run), and
// the key-by-key pass of the other heads the reverse, so decoders lay out
// their caches by this.
bool DecodeBlocksHeads(const DecodeParams& params);

// The first key a row with num_keys keys sees, and how many it sees.
inline size_t DecodeFirstKey(const DecodeParams& params, size_t num_keys) {
  return params.window == 0 || num_keys <= params.window
             ? 0
             : num_keys - params.window;
}
inline size_t DecodeVisibleKeys(const DecodeParams& params, size_t num_keys) {
  return num_keys - DecodeFirstKey(params, num_keys);
}

// Partials of one row: one per query head and chunk of its visible keys.
inline size_t DecodeRowPartials(const DecodeParams& params, size_t num_keys) {
  return params.num_heads * DecodeChunks(DecodeVisibleKeys(params, num_keys));
}

// One query row: the token at position num_keys - 1 of its sequence.
struct DecodeRow {
  const float* q = nullptr;  // head h at q + h * padded_dim, zero padded
  const float* k = nullptr;  // key j of K/V head g at k + g * head_stride +
                             // j * key_stride, zero padded
  const float* v = nullptr;  // laid out as k
  size_t num_keys = 0;       // keys [0, num_keys) exist; > 0
  float* ctx = nullptr;      // [num_heads * head_dim], heads merged
  // Index of this row's first partial: the sum over earlier rows of
  // DecodeRowPartials.
  size_t first_partial = 0;
};

// Number of partials DecodeAttention needs for rows[0, num_rows).
inline size_t DecodeNumPartials(const DecodeParams& params,
                                const DecodeRow* rows, size_t num_rows) {
  if (num_rows == 0) return 0;
  const DecodeRow& last = rows[num_rows - 1];
  return last.first_partial + DecodeRowPartials(params, last.num_keys);
}

// Whether the decode attention prefetches the K/V rows it will read a few
// keys ahead (grouped heads that go tile by tile always prefetch the next
// tile: decode-inl.h). Neither choice changes a bit of the result.
enum class DecodePrefetch {
  // None: the hardware prefetchers follow the cache's streams, and
  // on Zen 4 a similar prefetch (keys 6 KiB ahead, values during the score
  // loop) slowed this kernel. Both choices were measured on token-major
  // caches; on Zen 5's head-major one they ran alike.
  kNone,
  // While key j is read, key j + kDecodePrefetchKeys's rows into L2. On a
  // Xeon with AVX-512 and AMX (lscpu family 6 model 167), GPT-2's decode
  // attention read from memory ran 6-10% faster, and a GPT-2 step at batch
  // 8 1-5%.
  kKeysAhead,
};
// 8 keys ahead measured the same as 4 on that Xeon.
constexpr size_t kDecodePrefetchKeys = 4;

// This CPU's choice: kKeysAhead on Intel's, else kNone.
DecodePrefetch DecodePrefetchOfThisCpu();

// For every row and head: ctx = softmax(scale * q.k_j) . v over the visible
// keys j in [DecodeFirstKey, num_keys) of the head's K/V head. Work items
// (row, key chunk, block of K/V heads) are spread over num_threads OpenMP
// threads; an item computes every query head of its K/V heads, so each
// cached K/V row is read once. A block holds as many K/V heads as have at
// most 32 query heads (all of GPT-2's 12, all of Llama 3.2 1B's 32), fewer
// where threads would idle, so that an item reads the chunk's keys once
// (in blocks of heads held in registers where DecodeBlocksHeads). Then
// each (row, head) merges its chunks in order.
// `partials`: DecodeNumPartials x DecodePartialFloats(padded_dim) floats,
// 64-byte aligned. Results are bitwise identical for every num_threads. As the
// full-sequence core: a NaN or +inf score makes the row NaN, a row whose
// scores are all -inf becomes zeros; NaN or Inf in v propagates.
void DecodeAttention(const DecodeParams& params, const DecodeRow* rows,
                     size_t num_rows, float* partials, int num_threads,
                     DecodePrefetch prefetch = DecodePrefetchOfThisCpu());

// Appends new tokens to a KV cache: for row r, qkv + r * (H + 2 Hkv) * D
// holds its q [H, D], k [Hkv, D] and v [Hkv, D] (heads merged, the fused
// projection's output, one row per token; Hkv = DecodeKvHeads). Writes q into
// rows[r].q (padding lanes zero) and k and v into key num_keys - 1 of rows[r].k
// and rows[r].v (laid out as DecodeAttention reads them, padding lanes zero).
// Rows are spread over num_threads threads once they make more than one
// chunk of work (ParallelForChunks).
void DecodeAppend(const DecodeParams& params, const float* qkv,
                  const DecodeRow* rows, size_t num_rows, int num_threads);

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_DECODE_H_
