// Hugging Face's tokenizer.json behind attn::Tokenizer: BPE models with a
// byte-level pre-tokenizer (GPT-2, Llama 3, Qwen) or SentencePiece's "▁"
// and byte fallback (Llama 2, Mistral, Gemma), their normalizers, added
// tokens, post-processor and decoders, done as the `tokenizers` library
// does them. tokenizer_config.json and generation_config.json add the
// special tokens' names and ids and the chat template.
#ifndef ATTN_ENGINE_TOKENIZER_HF_TOKENIZER_H_
#define ATTN_ENGINE_TOKENIZER_HF_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attn/status.hpp"

namespace attn::tokenizer {

// What tokenizer_config.json and generation_config.json say about the
// special tokens; ids -1 and texts empty where they say nothing.
struct SpecialTokens {
  std::string bos_token, eos_token;
  int64_t bos_id = -1;
  std::vector<int64_t> eos_ids;  // eos_token's, then generation_config's
  bool add_bos = false, add_eos = false;
  std::string chat_template;
};

class HfTokenizer {
 public:
  // Reads `dir`/tokenizer.json, then tokenizer_config.json and
  // generation_config.json when present. Each a regular file of at most 64
  // MiB; the text and the tables built from it, beside `held_bytes`, must
  // fit `max_memory` (0: DefaultMaxMemoryBytes()). Refused in one line
  // naming the file and the JSON key: bad JSON, a type or option this
  // reader does not implement, a vocabulary or merge that does not add up.
  static Result<HfTokenizer> Load(const std::string& dir, uint64_t max_memory,
                                  uint64_t held_bytes);
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  // The ids of `text` as `tokenizers`' encode(text, add_special_tokens):
  // added tokens matched first, then the normalizer, pre-tokenizer and
  // BPE; the post-processor's special tokens when `add_special_tokens`.
  // Bytes outside valid UTF-8 are pieces of their own (byte-level
  // vocabularies spell them; SentencePiece ones through byte fallback).
  Result<std::vector<int64_t>> Encode(std::string_view text,
                                      bool add_special_tokens) const;
  // The bytes token `id` stands for: the decoders that map tokens to
  // bytes (ByteLevel, ByteFallback, Replace, Metaspace) without those that
  // join or strip (Fuse, Strip).
  Result<std::string> TokenBytes(int64_t id) const;
  // The text of `ids` as `tokenizers`' decode(ids, skip_special_tokens=
  // False): the whole decoder chain, invalid UTF-8 as U+FFFD.
  Result<std::string> DecodeText(const int64_t* ids, size_t count) const;

  // "byte-level-bpe" or "sentencepiece-bpe".
  const char* kind() const;
  int64_t vocab_size() const;
  uint64_t memory_bytes() const;
  const SpecialTokens& special_tokens() const;

  // The tables (hf_impl.h), shared by this folder's files only.
  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_HF_TOKENIZER_H_
