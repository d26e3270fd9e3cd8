/* attn/tokenizer.hpp: text to token ids and back (C++ API). A Tokenizer is
 * loaded once from a model's folder and is immutable after: one may be
 * shared by any number of threads. It reads Hugging Face's tokenizer.json
 * (BPE: byte-level as GPT-2, Llama 3 and Qwen, or SentencePiece-style as
 * Llama 2, Mistral and Gemma) with tokenizer_config.json and
 * generation_config.json, or else GPT-2's vocab.json + merges.txt (or
 * OpenAI's encoder.json + vocab.bpe). */
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
  // Reads the tokenizer files in folder `dir`: tokenizer.json when it is
  // there, else vocab.json + merges.txt. Refused in one line naming the
  // file (and for JSON the key): a missing or irregular file (a FIFO is
  // not waited on), one over 64 MiB, bad JSON, an id outside [0, 2^24) or
  // given twice, a merge that is not two known tokens joined into a known
  // one, a tokenizer.json type or option not implemented, or tables over
  // the memory cap (kOutOfMemory).
  static Result<std::shared_ptr<const Tokenizer>> Load(
      const std::string& dir, const TokenizerOptions& options = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The ids of UTF-8 `text`, as Hugging Face's encode(text,
  // add_special_tokens=False): special tokens written in the text (say
  // "<|endoftext|>") are their ids, but none is added. Bytes outside valid
  // UTF-8 are encoded as the bytes they are (byte-level vocabularies, and
  // SentencePiece ones with byte fallback). gpt2-bpe fails when the
  // vocabulary cannot spell a byte; tokenizer.json drops such a character
  // or gives <unk>, as Hugging Face does.
  Result<std::vector<int64_t>> Encode(std::string_view text) const;
  // `add_special_tokens` true: Hugging Face's default encode(text), with
  // the post-processor's tokens (Llama's BOS, say) around the text.
  Result<std::vector<int64_t>> Encode(std::string_view text,
                                      bool add_special_tokens) const;
  // The bytes of token `id`: a token may end inside a UTF-8 sequence, so
  // print them as they are. SentencePiece's "▁" is a space here (no
  // leading space is stripped: DecodeText and DecodeStream do that).
  // Fails for an id no token has.
  Result<std::string> Decode(int64_t id) const;
  // The text of `ids`, as Hugging Face's decode(ids, skip_special_tokens=
  // False): special tokens as their text, SentencePiece's leading space
  // stripped and <0xNN> bytes joined, bytes that are not UTF-8 as U+FFFD.
  Result<std::string> DecodeText(const std::vector<int64_t>& ids) const;

  // "gpt2-bpe" (vocab.json + merges.txt), "byte-level-bpe" or
  // "sentencepiece-bpe" (tokenizer.json).
  const char* kind() const;
  // One past the largest id: the rows a model's embedding needs.
  int64_t vocab_size() const;
  // About the bytes the loaded tables hold.
  uint64_t memory_bytes() const;

  // From tokenizer_config.json (bos_token, eos_token, add_bos_token,
  // add_eos_token, chat_template) and generation_config.json
  // (eos_token_id), for tokenizer.json folders; -1, empty or false where
  // they say nothing, and for gpt2-bpe.
  int64_t bos_id() const;
  // eos_token's id first, then generation_config's others.
  const std::vector<int64_t>& eos_ids() const;
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  // Whether the model wants a BOS (EOS) around a prompt: add_bos_token,
  // else whether the post-processor adds it.
  bool add_bos() const;
  bool add_eos() const;
  // The Jinja chat template as written (the "default" one of a list).
  const std::string& chat_template() const;
  // The prompt text of a conversation, rendered through chat_template()
  // exactly as Hugging Face's apply_chat_template(messages, tokenize=False,
  // add_generation_prompt=...) renders it: `messages_json` a JSON array of
  // {"role", "content", ...}; `variables_json` an object of further
  // variables the template reads ("tools", "date_string",
  // "enable_thinking"...), or empty. bos_token and eos_token are the
  // tokenizer's. Encode the result without special tokens: the template
  // writes them. Fails in one line: no chat template, JSON that is not an
  // array (object), or the template's own error (raise_exception's message,
  // a construct outside the supported subset, with its line:column).
  Result<std::string> ApplyChatTemplate(
      std::string_view messages_json, bool add_generation_prompt,
      std::string_view variables_json = "") const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Text as generated ids arrive: each Next gives the text `id` adds to the
// whole, so the pieces join to exactly DecodeText(all ids), and holds back
// while the text ends inside a UTF-8 character. One stream per sequence;
// not for sharing between threads.
class ATTN_API DecodeStream {
 public:
  explicit DecodeStream(std::shared_ptr<const Tokenizer> tokenizer);
  // The new text, empty while a character is unfinished. Fails for an id
  // no token has (the stream is then as before the call).
  Result<std::string> Next(int64_t id);
  // What was held back (an unfinished character as U+FFFD); the stream
  // starts afresh.
  std::string Finish();

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int64_t> ids_;  // the last emitted token(s) and those held
  std::string prefix_;        // DecodeText of ids_[0, prefix_count_)
  size_t prefix_count_ = 0;
};

}  // namespace attn

#endif  // ATTN_TOKENIZER_HPP_
