// GPT-2's byte-level BPE tokenizer behind attn::Tokenizer: text to token
// ids, and each id back to its bytes so that generated tokens stream as
// they come.
#ifndef ATTN_ENGINE_TOKENIZER_GPT2_BPE_H_
#define ATTN_ENGINE_TOKENIZER_GPT2_BPE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attn/status.hpp"
#include "engine/tokenizer/bpe_merge.h"
#include "engine/tokenizer/text_util.h"

namespace attn::tokenizer {

// The pieces GPT-2's pre-tokenization pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds in UTF-8 `text`, as views into it; together they cover it exactly.
// \s is Unicode's White_Space, as in the `regex` module (not isspace(): it
// leaves out U+001C..U+001F). A byte that does not start a valid UTF-8
// sequence (overlong, surrogate, above U+10FFFF, cut short) counts as one
// code point that is neither letter, number nor space, so it joins the
// punctuation runs of the fourth alternative.
std::vector<std::string_view> SplitGpt2Pieces(std::string_view text);

class Gpt2Tokenizer {
 public:
  // Reads Hugging Face's vocab.json + merges.txt from `dir`, or else
  // OpenAI's encoder.json + vocab.bpe: a JSON object token -> id, and merge
  // pairs "a b" in rank order after an optional "#version" first line. Each
  // file must be a regular file of at most 64 MiB. Refused, with one line
  // naming the file: bad JSON, a value that is not an id in [0, 2^24), two
  // tokens with one id, a merge line that is not two tokens separated by one
  // space, a merge naming a token (or making one) that the vocabulary lacks.
  // A pair listed twice takes the later rank, as OpenAI's encoder.py does.
  // Each file's text, then the tables built from it, beside `held_bytes`
  // the caller holds and what is read before, must fit `max_memory` (0:
  // DefaultMaxMemoryBytes()), checked before they are made: kOutOfMemory,
  // one line naming the file, what it needs and the cap.
  static Result<Gpt2Tokenizer> Load(const std::string& dir,
                                    uint64_t max_memory = 0,
                                    uint64_t held_bytes = 0);

  // The ids of `text`: its pieces (SplitGpt2Pieces), each piece's bytes as
  // GPT-2's printable characters, merged pair by pair (lowest rank first,
  // every occurrence, left to right) as in encoder.py. Fails when the
  // vocabulary lacks the character of a byte in `text` (merges name known
  // tokens only, so no other symbol can be missing).
  Result<std::vector<int64_t>> Encode(std::string_view text) const;

  // The bytes of token `id`; a token may end inside a UTF-8 sequence, so
  // print the bytes as they are. Fails for an id that no token has, or a
  // token holding a character outside GPT-2's byte table.
  Result<std::string> Decode(int64_t id) const;

  // One past the largest id: the rows a model's embedding needs.
  int64_t vocab_size() const { return vocab_size_; }

  // About the bytes the loaded tables hold.
  uint64_t memory_bytes() const;

 private:
  using Merges = BpeMerges;
  // Each id's token; ids may have gaps, so a map: one id near 2^24 must
  // not cost 2^24 strings.
  using Tokens = std::unordered_map<int32_t, std::string>;
  Gpt2Tokenizer(const std::unordered_map<std::string, int32_t>& ids,
                Tokens tokens, int64_t vocab_size, Merges merges);
  static Result<Merges> ParseMerges(
      std::string_view text, const std::string& path,
      const std::unordered_map<std::string, int32_t>& ids);
  Result<std::vector<int64_t>> EncodePiece(std::string_view piece) const;

  Tokens tokens_;
  int64_t vocab_size_ = 0;
  Merges merges_;
  std::array<int32_t, 256> byte_ids_;  // each byte's character; -1: none
};

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_GPT2_BPE_H_
