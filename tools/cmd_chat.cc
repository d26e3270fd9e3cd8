// attn chat: a conversation with a model's folder on stdin and stdout. Each
// line read is a user turn; the reply streams as it is sampled. The
// conversation's KV cache is kept between turns: a turn runs only the
// tokens its rendered prompt adds to what the cache holds.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/lm.hpp"
#include "attn/model.hpp"
#include "attn/tokenizer.hpp"
#include "nlohmann/json.hpp"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/lm_cli.h"

namespace attn::cli {
namespace {

struct ChatArgs {
  std::string model, system;
  int64_t max_new_tokens = 512;
  int64_t context = 0;  // 0: ContextSize's default
  SamplingOptions sampling;
  LmModelFlags flags;
};

class Conversation {
 public:
  static Result<std::unique_ptr<Conversation>> Start(const ChatArgs& args) {
    auto c = std::unique_ptr<Conversation>(new Conversation(args));
    ATTN_ASSIGN_OR_RETURN(c->model_, LoadLanguageModel(args.model, args.flags));
    ATTN_ASSIGN_OR_RETURN(c->tokenizer_,
                          LoadTokenizerFor(*c->model_, args.model, "--model",
                                           args.flags.max_memory));
    if (c->tokenizer_->chat_template().empty()) {
      return InvalidArgument("--model '" + args.model +
                             "' has no chat_template in its "
                             "tokenizer_config.json: want a chat model");
    }
    ATTN_ASSIGN_OR_RETURN(c->context_, ContextSize(args.context, *c->model_));
    ATTN_ASSIGN_OR_RETURN(
        c->batch_, Batch::Create(Model::Of(c->model_), {1, c->context_}));
    ATTN_ASSIGN_OR_RETURN(c->sequence_, c->batch_->Add());
    ATTN_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(args.sampling));
    c->sampler_.emplace(std::move(sampler));
    if (!args.system.empty()) c->Append("system", args.system);
    return c;
  }

  // One user turn: the reply streamed to stdout, then a newline.
  Status Turn(const std::string& text) {
    Append("user", text);
    // Bytes that are not UTF-8 reach the template as U+FFFD.
    ATTN_ASSIGN_OR_RETURN(
        const std::string prompt,
        tokenizer_->ApplyChatTemplate(
            messages_.dump(-1, ' ', false,
                           nlohmann::ordered_json::error_handler_t::replace),
            true));
    ATTN_ASSIGN_OR_RETURN(const std::vector<int64_t> ids,
                          tokenizer_->Encode(prompt, false));
    ATTN_RETURN_IF_ERROR(Feed(ids));
    std::vector<int64_t> reply;
    DecodeStream stream(tokenizer_);
    const std::vector<int64_t>& eos = tokenizer_->eos_ids();
    for (int64_t n = 0; n < args_.max_new_tokens; ++n) {
      const int64_t id = sampler_->Sample(batch_->logits(0), vocab());
      if (std::count(eos.begin(), eos.end(), id)) break;
      ATTN_ASSIGN_OR_RETURN(const std::string piece, stream.Next(id));
      ATTN_RETURN_IF_ERROR(PrintText(piece));
      reply.push_back(id);
      if (n + 1 == args_.max_new_tokens) break;
      ATTN_RETURN_IF_ERROR(Step(&reply.back(), 1));
      cached_.push_back(id);
    }
    ATTN_RETURN_IF_ERROR(PrintText(stream.Finish() + "\n"));
    ATTN_ASSIGN_OR_RETURN(const std::string said,
                          tokenizer_->DecodeText(reply));
    Append("assistant", said);
    return {};
  }

 private:
  explicit Conversation(const ChatArgs& args) : args_(args) {}

  int64_t vocab() const { return model_->config().vocab_size; }

  void Append(const char* role, const std::string& content) {
    messages_.push_back({{"role", role}, {"content", content}});
  }

  // Runs the tokens of `ids` past the longest prefix the cache already
  // holds (at least the last, whose logits the reply starts from).
  Status Feed(const std::vector<int64_t>& ids) {
    if (ids.empty()) {
      return InvalidArgument("the chat template rendered no text");
    }
    // The reply's last token is never fed back.
    if (static_cast<int64_t>(ids.size()) + args_.max_new_tokens - 1 >
        context_) {
      return InvalidArgument(
          "the conversation is " + std::to_string(ids.size()) +
          " tokens, and a reply of up to --max-new-tokens " +
          std::to_string(args_.max_new_tokens) + " would pass --ctx-size " +
          std::to_string(context_));
    }
    size_t same = 0;
    while (same < cached_.size() && same < ids.size() &&
           cached_[same] == ids[same]) {
      ++same;
    }
    same = std::min(same, ids.size() - 1);
    ATTN_RETURN_IF_ERROR(batch_->Truncate(sequence_, int64_t(same)));
    cached_.assign(ids.begin(), ids.begin() + same);
    ATTN_RETURN_IF_ERROR(Step(ids.data() + same, ids.size() - same));
    cached_.insert(cached_.end(), ids.begin() + same, ids.end());
    return {};
  }

  Status Step(const int64_t* tokens, size_t count) {
    const Batch::Request request = {sequence_, tokens,
                                    static_cast<int64_t>(count), false};
    return batch_->Step(&request, 1);
  }

  const ChatArgs& args_;
  std::shared_ptr<const LanguageModel> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<Batch> batch_;
  int64_t sequence_ = 0, context_ = 0;
  std::optional<Sampler> sampler_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::vector<int64_t> cached_;  // the tokens the cache holds
};

int Chat(const ChatArgs& args) {
  auto conversation = Conversation::Start(args);
  if (!conversation.ok()) return Fail(conversation.status().message());
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const Status s = (*conversation)->Turn(line);
    if (!s.ok()) return Fail(s.message());
  }
  return 0;
}

}  // namespace

Command AddChatCommand(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* command = app.add_subcommand(
      "chat",
      "Talk with a chat model's folder: each stdin line is a user turn, the "
      "reply streams to stdout; the KV cache is kept between turns");
  command
      ->add_option("--model", args->model,
                   "a chat model's folder as Hugging Face publishes it, with "
                   "tokenizer.json and a chat_template")
      ->required()
      ->check(FilePath());
  command->add_option("--system", args->system, "a system message first");
  command
      ->add_option("--max-new-tokens", args->max_new_tokens,
                   "most tokens a reply may have (default 512)")
      ->check(IntegerIn(1));
  command
      ->add_option("--ctx-size", args->context,
                   "tokens the conversation's KV cache holds, reserved at "
                   "start (default: the model's context length, at most "
                   "4096)")
      ->check(IntegerIn(1));
  AddSamplingFlags(command, args->sampling);
  args->flags.AddTo(command);
  return {command, [args] { return Chat(*args); }};
}

}  // namespace attn::cli
