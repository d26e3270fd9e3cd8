// KvDecoder: one attention's KV cache over `batch` sequences and the forward
// pass of new tokens against it; MhaDecoder (attn/decode.hpp) is its public
// face, and an LmBatch holds one per layer, with what it holds besides
// counted against the same cap (DecoderOwner). Its methods are
// MhaDecoder's (see there), plus a Prefill of a few listed sequences whose
// kept rows alone reach the output.
#ifndef ATTN_ENGINE_RUNTIME_KV_DECODER_H_
#define ATTN_ENGINE_RUNTIME_KV_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "attn/status.hpp"
#include "engine/runtime/decoder_owner.h"

namespace attn {

class KvDecoder {
 public:
  static Result<KvDecoder> Create(std::shared_ptr<const MhaModel> model,
                                  const DecoderOptions& options,
                                  const DecoderOwner& owner = {});
  KvDecoder(KvDecoder&&) noexcept;
  KvDecoder& operator=(KvDecoder&&) noexcept;
  ~KvDecoder();

  Status Prefill(const float* input, const int64_t* counts, float* output);
  // As Prefill(input, counts, output) for the sequences listed alone:
  // sequences[i] (ascending, each once) gets counts[i] tokens, the others
  // none, so that a step costs its rows, not batch(). Only the rows `keep`
  // lists (ascending indices into the new rows, num_keep of them; every row
  // when keep is null) reach output, [num_keep, d_out] in that order; every
  // row's K and V still land in the cache. For a model's blocks, whose last
  // one's other rows reach no logits.
  Status Prefill(const float* input, const int64_t* sequences,
                 const int64_t* counts, size_t num_sequences,
                 const int64_t* keep, size_t num_keep, float* output);
  Status Prefill(const float* input, int64_t seq_len, float* output);
  Status Decode(const float* input, int64_t batch, float* output);
  void Reset();
  Status Reset(int64_t sequence);
  Status Truncate(int64_t sequence, int64_t length);
  Status Copy(int64_t from, int64_t to);

  int64_t batch() const;
  int64_t max_length() const;
  int64_t length(int64_t sequence) const;
  size_t cache_bytes() const;
  size_t workspace_bytes() const;
  size_t decode_kv_bytes() const;

 private:
  struct Impl;
  explicit KvDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_KV_DECODER_H_
