// attn serve's OpenAI protocol: request bodies checked and turned into a
// GenerationRequest, the scheduler's events turned into responses and
// server-sent-event chunks, errors in OpenAI's shape.
#ifndef ATTN_TOOLS_SERVE_API_H_
#define ATTN_TOOLS_SERVE_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/tokenizer.hpp"
#include "nlohmann/json.hpp"
#include "tools/serve_scheduler.h"

namespace attn::serve {

using Json = nlohmann::json;

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};
std::string ErrorBody(const ApiError& error);

// What the server runs, as the parsers check requests against it.
struct ServedModel {
  std::string id;  // the name /v1/models lists
  const Tokenizer* tokenizer = nullptr;
  int64_t context = 0;   // tokens a sequence holds (--ctx-size)
  int64_t parallel = 0;  // sequences at once: the most choices
};

enum class Endpoint { kChat, kCompletion };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenerationRequest generation;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
};

// Checks `body` (a parsed JSON value) as OpenAI's /v1/chat/completions or
// /v1/completions takes it: the first problem found, else nullopt with
// `out` filled.
std::optional<ApiError> ParseRequest(Endpoint endpoint, const Json& body,
                                     const ServedModel& model,
                                     ParsedRequest* out);

// Builds the responses of one request from its events.
class ResponseBuilder {
 public:
  ResponseBuilder(const ParsedRequest& request, const ServedModel& model);
  // The SSE lines ("data: {...}\n\n") that `event` sends; empty for none.
  std::string Chunk(const Event& event);
  // The chunks that close a stream: usage when asked, then [DONE].
  std::string StreamEnd(int64_t prompt_tokens, int64_t completion_tokens);
  // Collects `event` for the whole response.
  void Add(const Event& event);
  Json Whole(int64_t prompt_tokens, int64_t completion_tokens) const;

 private:
  struct ChoiceText {
    std::string text, finish_reason;
    std::vector<TokenLogprob> logprobs;
    std::vector<size_t> offsets;  // where each token's text begins in text
  };
  Json Envelope(const char* object) const;
  // `offsets`: where each token's text begins in the choice's text as sent.
  Json LogprobsJson(const std::vector<TokenLogprob>& tokens,
                    const std::vector<size_t>& offsets) const;
  std::string TokenText(int64_t id) const;

  const ParsedRequest& request_;
  const ServedModel& model_;
  std::string id_;
  int64_t created_ = 0;
  std::vector<ChoiceText> choices_;
  std::vector<bool> started_;  // a stream's role delta sent, per choice
};

// `j` as compact JSON; bytes that are not UTF-8 become U+FFFD.
std::string Dump(const Json& j);

}  // namespace attn::serve

#endif  // ATTN_TOOLS_SERVE_API_H_
