/* attn/tokenizer.hpp: text to token ids and back (C++ API). A Tokenizer is
 * loaded once from a model's folder and is immutable after: one may be
 * shared by any number of threads. Today it reads GPT-2's byte-level BPE
 * (Hugging Face's vocab.json + merges.txt, or OpenAI's encoder.json +
 * vocab.bpe). */
#ifndef ATTN_TOKENIZER_HPP_
#define ATTN_TOKENIZER_HPP_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attn/export.h"
#include "attn/status.hpp"

namespace attn {

struct TokenizerOptions {
  // The most memory loading may hold (the files' text, then the tables),
  // beside held_bytes the caller holds already; 0: DefaultMaxMemoryBytes().
  uint64_t max_memory_bytes = 0;
  uint64_t held_bytes = 0;
};

class ATTN_API Tokenizer {
 public:
  // Reads the tokenizer files in folder `dir`. Refused in one line naming
  // the file: a missing or irregular file (a FIFO is not waited on), one
  // over 64 MiB, bad JSON, an id outside [0, 2^24) or given twice, a merge
  // that is not two known tokens joined into a known one, or tables over
  // the memory cap (kOutOfMemory).
  static Result<std::shared_ptr<const Tokenizer>> Load(
      const std::string& dir, const TokenizerOptions& options = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The ids of UTF-8 `text` (bytes outside valid UTF-8 are encoded as the
  // bytes they are). Fails when the vocabulary cannot spell a byte of it.
  Result<std::vector<int64_t>> Encode(std::string_view text) const;
  // The bytes of token `id`: a token may end inside a UTF-8 sequence, so
  // print them as they are. Fails for an id no token has.
  Result<std::string> Decode(int64_t id) const;
  // One past the largest id: the rows a model's embedding needs.
  int64_t vocab_size() const;
  // About the bytes the loaded tables hold.
  uint64_t memory_bytes() const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn

#endif  // ATTN_TOKENIZER_HPP_
