// Tokenizer (attn/tokenizer.hpp): the public face of this folder's
// tokenizers.
#include "attn/tokenizer.hpp"

#include <utility>

#include "engine/tokenizer/gpt2_bpe.h"

namespace attn {

struct Tokenizer::Impl {
  tokenizer::Gpt2Tokenizer bpe;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::shared_ptr<const Tokenizer>> Tokenizer::Load(
    const std::string& dir, const TokenizerOptions& options) {
  ATTN_ASSIGN_OR_RETURN(tokenizer::Gpt2Tokenizer bpe,
                        tokenizer::Gpt2Tokenizer::Load(
                            dir, options.max_memory_bytes, options.held_bytes));
  return std::shared_ptr<const Tokenizer>(
      new Tokenizer(std::make_unique<Impl>(Impl{std::move(bpe)})));
}

Result<std::vector<int64_t>> Tokenizer::Encode(std::string_view text) const {
  return impl_->bpe.Encode(text);
}
Result<std::string> Tokenizer::Decode(int64_t id) const {
  return impl_->bpe.Decode(id);
}
int64_t Tokenizer::vocab_size() const { return impl_->bpe.vocab_size(); }
uint64_t Tokenizer::memory_bytes() const { return impl_->bpe.memory_bytes(); }

}  // namespace attn
