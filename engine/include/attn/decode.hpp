/* attn/decode.hpp: incremental decoding with a KV cache (C++ API).
 * An MhaDecoder keeps, per sequence of a batch, the projected keys and values
 * of every token it has seen, so a new token costs one pass over the cache
 * instead of a forward pass over its whole prefix. See attn/attn.hpp. */
#ifndef ATTN_DECODE_HPP_
#define ATTN_DECODE_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "attn/attn.hpp"
#include "attn/export.h"
#include "attn/status.hpp"

namespace attn {

struct DecoderOptions {
  int64_t batch = 1;  // sequences the cache holds
  // Tokens one sequence may hold. 0: the model's context_length, which must
  // then be set; more than context_length is an error.
  int64_t max_length = 0;
};

// A KV cache for `batch` independent sequences over one model, and the
// forward pass of the new tokens against it.
//
// Causal alignment: a token appended at position p of sequence b (p counts
// from 0; p = length(b) before the call, plus its place among that call's new
// tokens of b) attends to keys 0..p of sequence b: the earlier tokens of its
// own sequence and itself. Sequences never see each other. Each sequence has
// its own length; nothing is padded, and no padding is computed or attended
// to, so a sequence's outputs equal running it alone (and equal the rows of
// MhaSession::Run over its whole prefix, within floating-point rounding).
// NaN or Inf in token t's input makes NaN the rows that attend to it; a
// fresh prompt of 64 or more tokens runs the session's causal core, where
// it may also make NaN the earlier rows of t's query block
// (engine/README.md, "Numerics"), while the same tokens fed in shorter
// calls leave them finite.
//
// fp32, except the projections of a model of dtype bf16 in prompts and
// steps of more than 8 rows (bf16 matmuls; the cache stays fp32), and of
// steps of up to 8 rows where step_weights is bf16 (bf16 weights, fp32
// math; Model::Load and the C API set it with dtype bf16). Results are
// bitwise identical for every thread count. Not thread-safe: one decoder per
// thread; the model may be shared.
class ATTN_API MhaDecoder {
 public:
  // Allocates the cache: 2 x batch x max_length x d_out floats (head_dim
  // rounded up to a multiple of 16), and the buffers of a one-token-per-
  // sequence step, so Decode allocates nothing.
  static Result<std::unique_ptr<MhaDecoder>> Create(
      std::shared_ptr<const MhaModel> model, const DecoderOptions& options);
  ~MhaDecoder();
  MhaDecoder(const MhaDecoder&) = delete;
  MhaDecoder& operator=(const MhaDecoder&) = delete;

  // Appends counts[b] tokens to sequence b for every b < batch() (0 leaves a
  // sequence alone; an empty sequence starts its prompt here, a non-empty one
  // continues). input: the new tokens packed sequence after sequence,
  // [sum(counts), d_in]; output: the block's output for each of them, in the
  // same order, [sum(counts), d_out]. A sequence that would exceed
  // max_length is an error, and then no sequence changes.
  Status Prefill(const float* input, const int64_t* counts, float* output);
  // Every sequence gets seq_len tokens: input [batch(), seq_len, d_in],
  // output [batch(), seq_len, d_out].
  Status Prefill(const float* input, int64_t seq_len, float* output);
  // The next token of every sequence: input [batch, d_in], output
  // [batch, d_out]. `batch` must equal batch(), and every sequence must hold
  // at least one token (its prompt: after Create or Reset, Prefill first).
  Status Decode(const float* input, int64_t batch, float* output);

  // Empties every sequence (the memory stays allocated).
  void Reset();
  // Empties one sequence.
  Status Reset(int64_t sequence);
  // Keeps the first `length` tokens of `sequence` (length <= its length).
  Status Truncate(int64_t sequence, int64_t length);
  // Makes sequence `to` a copy of sequence `from`: its length and the keys
  // and values of its tokens (forking it, e.g. for parallel sampling).
  Status Copy(int64_t from, int64_t to);

  int64_t batch() const;
  int64_t max_length() const;
  int64_t length(int64_t sequence) const;  // tokens held; -1 if out of range
  // Bytes of the K/V cache, and of the step buffers. The projections'
  // weights that steps read are the model's (MhaModel::memory_bytes).
  size_t cache_bytes() const;
  size_t workspace_bytes() const;
  // Bytes of K and V one Decode step reads: 2 x sum(length + 1) x kv_dim x 4
  // (kv_dim = num_kv_heads x head_dim, d_out without grouping); with a
  // sliding window W, min(length + 1, W) keys a sequence.
  size_t decode_kv_bytes() const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit MhaDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn

#endif  // ATTN_DECODE_HPP_
