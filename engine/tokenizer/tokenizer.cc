// Tokenizer (attn/tokenizer.hpp): the public face of this folder's
// tokenizers.
#include "attn/tokenizer.hpp"

#include <sys/stat.h>

#include <optional>
#include <utility>

#include "engine/io/json_limits.h"
#include "engine/tokenizer/gpt2_bpe.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/jinja.h"
#include "engine/tokenizer/text_util.h"

namespace attn {

// One of the two, tokenizer.json's when the folder has it.
struct Tokenizer::Impl {
  std::optional<tokenizer::Gpt2Tokenizer> gpt2;
  std::optional<tokenizer::HfTokenizer> hf;
  tokenizer::SpecialTokens none;  // gpt2-bpe's

  const tokenizer::SpecialTokens& special() const {
    return hf ? hf->special_tokens() : none;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::shared_ptr<const Tokenizer>> Tokenizer::Load(
    const std::string& dir, const TokenizerOptions& options) {
  auto impl = std::make_unique<Impl>();
  struct stat st;
  // lstat: a dangling link still picks tokenizer.json, and then a clear
  // error.
  if (lstat((dir + "/tokenizer.json").c_str(), &st) == 0) {
    ATTN_ASSIGN_OR_RETURN(
        tokenizer::HfTokenizer hf,
        tokenizer::HfTokenizer::Load(dir, options.max_memory_bytes,
                                     options.held_bytes));
    impl->hf.emplace(std::move(hf));
  } else {
    ATTN_ASSIGN_OR_RETURN(
        tokenizer::Gpt2Tokenizer bpe,
        tokenizer::Gpt2Tokenizer::Load(dir, options.max_memory_bytes,
                                       options.held_bytes));
    impl->gpt2.emplace(std::move(bpe));
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::vector<int64_t>> Tokenizer::Encode(std::string_view text) const {
  return Encode(text, false);
}

Result<std::vector<int64_t>> Tokenizer::Encode(std::string_view text,
                                               bool add_special_tokens) const {
  if (impl_->hf) return impl_->hf->Encode(text, add_special_tokens);
  return impl_->gpt2->Encode(text);
}

Result<std::string> Tokenizer::Decode(int64_t id) const {
  if (impl_->hf) return impl_->hf->TokenBytes(id);
  return impl_->gpt2->Decode(id);
}

Result<std::string> Tokenizer::DecodeText(
    const std::vector<int64_t>& ids) const {
  if (impl_->hf) return impl_->hf->DecodeText(ids.data(), ids.size());
  std::string bytes;
  for (const int64_t id : ids) {
    ATTN_ASSIGN_OR_RETURN(const std::string token, impl_->gpt2->Decode(id));
    bytes += token;
  }
  return tokenizer::Utf8Lossy(bytes);
}

const char* Tokenizer::kind() const {
  return impl_->hf ? impl_->hf->kind() : "gpt2-bpe";
}
int64_t Tokenizer::vocab_size() const {
  return impl_->hf ? impl_->hf->vocab_size() : impl_->gpt2->vocab_size();
}
uint64_t Tokenizer::memory_bytes() const {
  return impl_->hf ? impl_->hf->memory_bytes() : impl_->gpt2->memory_bytes();
}
int64_t Tokenizer::bos_id() const { return impl_->special().bos_id; }
const std::vector<int64_t>& Tokenizer::eos_ids() const {
  return impl_->special().eos_ids;
}
const std::string& Tokenizer::bos_token() const {
  return impl_->special().bos_token;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->special().eos_token;
}
bool Tokenizer::add_bos() const { return impl_->special().add_bos; }
bool Tokenizer::add_eos() const { return impl_->special().add_eos; }
const std::string& Tokenizer::chat_template() const {
  return impl_->special().chat_template;
}

namespace {

// `text` as a JSON value of type `want` ("array" or "object"), its keys in
// their written order (tojson prints them so).
Result<nlohmann::ordered_json> ParseChatJson(std::string_view text,
                                             const char* what,
                                             const char* want) {
  // The engine's checks of untrusted JSON (validity, depth) first.
  constexpr size_t kMaxDepth = 64;
  ATTN_RETURN_IF_ERROR(
      ParseCheckedJson(std::string(text), kMaxDepth, what).status());
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.type_name() != std::string(want)) {
    return InvalidArgument(std::string(what) + " is a JSON " + j.type_name() +
                           ", want a JSON " + want);
  }
  return j;
}

}  // namespace

Result<std::string> Tokenizer::ApplyChatTemplate(
    std::string_view messages_json, bool add_generation_prompt,
    std::string_view variables_json) const {
  if (chat_template().empty()) {
    return InvalidArgument(
        "the tokenizer has no chat_template (tokenizer_config.json): want a "
        "chat model's");
  }
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  if (!variables_json.empty()) {
    ATTN_ASSIGN_OR_RETURN(
        variables, ParseChatJson(variables_json, "the variables", "object"));
  }
  ATTN_ASSIGN_OR_RETURN(variables["messages"],
                        ParseChatJson(messages_json, "the messages", "array"));
  variables["add_generation_prompt"] = add_generation_prompt;
  // The tokenizer's special tokens, unless the caller gives its own (as
  // apply_chat_template's keyword arguments override them).
  if (!variables.contains("bos_token")) variables["bos_token"] = bos_token();
  if (!variables.contains("eos_token")) variables["eos_token"] = eos_token();
  return tokenizer::RenderChatTemplate(chat_template(), variables);
}

// ---------------------------------------------------------------------------
// DecodeStream: Hugging Face's DecodeStream. ids_ keeps the token(s) last
// emitted as context (SentencePiece's space depends on what precedes), so
// each step decodes a few tokens, not the whole sequence.

DecodeStream::DecodeStream(std::shared_ptr<const Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)) {}

Result<std::string> DecodeStream::Next(int64_t id) {
  ids_.push_back(id);
  Result<std::string> text = tokenizer_->DecodeText(ids_);
  if (!text.ok()) {
    ids_.pop_back();
    return text.status();
  }
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  const bool unfinished =
      text->size() >= kReplacement.size() &&
      std::string_view(*text).substr(text->size() - kReplacement.size()) ==
          kReplacement;
  if (text->size() <= prefix_.size() || unfinished) return std::string();
  if (text->compare(0, prefix_.size(), prefix_) != 0) {
    // Decoders that rewrite earlier text: start afresh from here.
    ids_.erase(ids_.begin(), ids_.end() - 1);
    prefix_.clear();
    prefix_count_ = 0;
    return tokenizer_->DecodeText(ids_);
  }
  std::string added = text->substr(prefix_.size());
  const size_t emitted = ids_.size();
  ids_.erase(ids_.begin(), ids_.begin() + prefix_count_);
  ATTN_ASSIGN_OR_RETURN(prefix_, tokenizer_->DecodeText(ids_));
  prefix_count_ = emitted - prefix_count_;
  return added;
}

std::string DecodeStream::Finish() {
  const Result<std::string> text = tokenizer_->DecodeText(ids_);
  std::string rest = text.ok() && text->size() > prefix_.size()
                         ? text->substr(prefix_.size())
                         : std::string();
  ids_.clear();
  prefix_.clear();
  prefix_count_ = 0;
  return rest;
}

}  // namespace attn
