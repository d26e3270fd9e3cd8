#include "tools/serve_api.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace attn::serve {
namespace {

constexpr int64_t kMaxStops = 4;  // as OpenAI
constexpr int64_t kMaxTopLogprobs = 20;
constexpr int64_t kMaxCompletionLogprobs = 5;

ApiError Invalid(const std::string& param, const std::string& message) {
  return {400, param + ": " + message, "invalid_request_error", param, ""};
}

// A value for an error message: scalars as JSON, short; containers by
// kind and size (never printed whole).
std::string Shown(const Json& value) {
  if (value.is_array()) return "a list of " + std::to_string(value.size());
  if (value.is_object()) return "an object";
  std::string text = Dump(value);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Fields each endpoint takes; OpenAI's others are refused by name.
const std::set<std::string>& Known(Endpoint endpoint) {
  static const std::set<std::string> chat = {"model",
                                             "messages",
                                             "max_tokens",
                                             "max_completion_tokens",
                                             "temperature",
                                             "top_p",
                                             "top_k",
                                             "seed",
                                             "stop",
                                             "n",
                                             "logprobs",
                                             "top_logprobs",
                                             "stream",
                                             "stream_options",
                                             "user",
                                             "frequency_penalty",
                                             "presence_penalty",
                                             "logit_bias",
                                             "response_format",
                                             "tools",
                                             "tool_choice",
                                             "parallel_tool_calls",
                                             "store",
                                             "metadata",
                                             "service_tier"};
  static const std::set<std::string> completion = {"model",
                                                   "prompt",
                                                   "max_tokens",
                                                   "temperature",
                                                   "top_p",
                                                   "top_k",
                                                   "seed",
                                                   "stop",
                                                   "n",
                                                   "logprobs",
                                                   "stream",
                                                   "stream_options",
                                                   "user",
                                                   "frequency_penalty",
                                                   "presence_penalty",
                                                   "logit_bias",
                                                   "echo",
                                                   "suffix",
                                                   "best_of"};
  return endpoint == Endpoint::kChat ? chat : completion;
}

// Fields taken only at their default: anything else is a feature attn does
// not have, refused rather than ignored.
std::optional<ApiError> CheckDefaults(const Json& body) {
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    if (body.contains(key) && !body[key].is_null() &&
        !(body[key].is_number() && body[key].get<double>() == 0.0)) {
      return Invalid(key, "got " + Shown(body[key]) +
                              ", want 0: penalties are not supported");
    }
  }
  struct Default {
    const char* key;
    Json value;
  };
  const Default defaults[] = {
      {"logit_bias", Json::object()},
      {"tools", Json::array()},
      {"tool_choice", "none"},
      {"echo", false},
      {"suffix", ""},
      {"best_of", 1},
      {"store", false},
      {"response_format", Json{{"type", "text"}}},
  };
  for (const Default& d : defaults) {
    if (body.contains(d.key) && !body[d.key].is_null() &&
        body[d.key] != d.value) {
      return Invalid(d.key, "got " + Shown(body[d.key]) + ", want " +
                                Dump(d.value) + ": not supported");
    }
  }
  for (const char* key : {"user", "service_tier"}) {
    if (body.contains(key) && !body[key].is_null() && !body[key].is_string()) {
      return Invalid(key, "got " + Shown(body[key]) + ", want a string");
    }
  }
  for (const char* key : {"metadata"}) {
    if (body.contains(key) && !body[key].is_null() && !body[key].is_object()) {
      return Invalid(key, "got " + Shown(body[key]) + ", want an object");
    }
  }
  if (body.contains("parallel_tool_calls") &&
      !body["parallel_tool_calls"].is_null() &&
      !body["parallel_tool_calls"].is_boolean()) {
    return Invalid(
        "parallel_tool_calls",
        "got " + Shown(body["parallel_tool_calls"]) + ", want a boolean");
  }
  return std::nullopt;
}

// An optional field: absent and null both leave `out` as it is.
const Json* Field(const Json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> Integer(const Json& body, const char* key, int64_t lo,
                                int64_t hi, int64_t* out) {
  const Json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() ||
      (v->is_number_unsigned() &&
       v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) ||
      v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
    return Invalid(key, "got " + Shown(*v) + ", want an integer from " +
                            std::to_string(lo) + " to " + std::to_string(hi));
  }
  *out = v->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> Number(const Json& body, const char* key, double lo,
                               double hi, bool lo_open, double* out) {
  const Json* v = Field(body, key);
  if (!v) return std::nullopt;
  const bool ok = v->is_number() && std::isfinite(v->get<double>()) &&
                  (lo_open ? v->get<double>() > lo : v->get<double>() >= lo) &&
                  v->get<double>() <= hi;
  if (!ok) {
    char range[64];
    std::snprintf(range, sizeof range, "a number %s %g and at most %g",
                  lo_open ? "above" : "from", lo, hi);
    return Invalid(key, "got " + Shown(*v) + ", want " + range);
  }
  *out = v->get<double>();
  return std::nullopt;
}

std::optional<ApiError> Boolean(const Json& body, const char* key, bool* out) {
  const Json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    return Invalid(key, "got " + Shown(*v) + ", want true or false");
  }
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> Stops(const Json& body, std::vector<std::string>* out) {
  const Json* v = Field(body, "stop");
  if (!v) return std::nullopt;
  const Json list = v->is_string() ? Json::array({*v}) : *v;
  const std::string want = "want a string or a list of up to " +
                           std::to_string(kMaxStops) + " non-empty strings";
  if (!list.is_array() || list.size() > size_t(kMaxStops)) {
    return Invalid("stop", "got " + Shown(*v) + ", " + want);
  }
  for (const Json& s : list) {
    if (!s.is_string() || s.get<std::string>().empty()) {
      return Invalid("stop", "got " + Shown(*v) + ", " + want);
    }
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// A message's content as text: a string, or a list of {"type": "text"}
// parts joined.
std::optional<ApiError> ContentText(const Json& content, const std::string& at,
                                    std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (content.is_array()) {
    for (const Json& part : content) {
      if (!part.is_object() || part.value("type", Json()) != "text" ||
          !part.contains("text") || !part["text"].is_string()) {
        return Invalid(at, "got a part " + Shown(part) +
                               ", want {\"type\": \"text\", \"text\": ...}: "
                               "attn runs text models");
      }
      *out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return Invalid(
      at, "got " + Shown(content) + ", want a string or a list of text parts");
}

std::optional<ApiError> ChatPrompt(const Json& body, const ServedModel& model,
                                   std::vector<int64_t>* ids) {
  const Json* messages = Field(body, "messages");
  if (!messages) return Invalid("messages", "missing: want a list of messages");
  if (!messages->is_array() || messages->empty()) {
    return Invalid("messages",
                   "got " + Shown(*messages) + ", want a non-empty list");
  }
  static const std::set<std::string> roles = {"system", "developer", "user",
                                              "assistant", "tool"};
  Json rendered = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      return Invalid(at, "got " + Shown(m) + ", want an object");
    }
    if (!m.contains("role") || !m["role"].is_string() ||
        !roles.count(m["role"].get<std::string>())) {
      return Invalid(at + ".role",
                     "got " + (m.contains("role") ? Shown(m["role"]) : "none") +
                         ", want system, developer, user, assistant or tool");
    }
    Json message = m;
    std::string text;
    const Json content = m.value("content", Json());
    if (!content.is_null() || m["role"] != "assistant") {
      if (auto e = ContentText(content, at + ".content", &text)) return e;
    }
    message["content"] = text;
    rendered.push_back(std::move(message));
  }
  if (model.tokenizer->chat_template().empty()) {
    return ApiError{400, "the model has no chat template: use /v1/completions",
                    "invalid_request_error", "messages", ""};
  }
  Result<std::string> prompt =
      model.tokenizer->ApplyChatTemplate(Dump(rendered), true);
  if (!prompt.ok()) {
    return Invalid("messages",
                   "the chat template failed: " + prompt.status().message());
  }
  Result<std::vector<int64_t>> encoded =
      model.tokenizer->Encode(*prompt, false);
  if (!encoded.ok()) return Invalid("messages", encoded.status().message());
  *ids = std::move(*encoded);
  return std::nullopt;
}

std::optional<ApiError> CompletionPrompt(const Json& body,
                                         const ServedModel& model,
                                         std::vector<int64_t>* ids) {
  const Json* prompt = Field(body, "prompt");
  if (!prompt) return Invalid("prompt", "missing: want text or token ids");
  Json one = *prompt;
  // A list of one prompt is that prompt.
  if (one.is_array() && one.size() == 1 &&
      (one[0].is_string() || one[0].is_array())) {
    one = Json(one[0]);
  }
  if (one.is_string()) {
    // As Hugging Face's tokenizer(text): with the BOS the model wants.
    Result<std::vector<int64_t>> encoded =
        model.tokenizer->Encode(one.get<std::string>(), true);
    if (!encoded.ok()) return Invalid("prompt", encoded.status().message());
    *ids = std::move(*encoded);
    return std::nullopt;
  }
  const int64_t vocab = model.tokenizer->vocab_size();
  const std::string want = "want text, or token ids from 0 to " +
                           std::to_string(vocab - 1) +
                           " (one prompt per request)";
  if (!one.is_array())
    return Invalid("prompt", "got " + Shown(*prompt) + ", " + want);
  for (const Json& id : one) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= vocab) {
      return Invalid("prompt", "got token " + Shown(id) + ", " + want);
    }
    ids->push_back(id.get<int64_t>());
  }
  return std::nullopt;
}

std::optional<ApiError> Sampling(const Json& body, Endpoint endpoint,
                                 const ServedModel& model, ParsedRequest* out) {
  GenerationRequest& g = out->generation;
  // OpenAI's defaults: temperature 1, top_p 1.
  g.sampling.temperature = 1.0;
  if (auto e =
          Number(body, "temperature", 0, 2, false, &g.sampling.temperature))
    return e;
  if (auto e = Number(body, "top_p", 0, 1, true, &g.sampling.top_p)) return e;
  int64_t top_k = 0;
  // -1 (vLLM's) and 0 both mean every token.
  if (auto e = Integer(body, "top_k", -1, std::numeric_limits<int32_t>::max(),
                       &top_k))
    return e;
  g.sampling.top_k = std::max<int64_t>(top_k, 0);
  int64_t seed = -1;
  if (Field(body, "seed")) {
    if (auto e = Integer(body, "seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(), &seed))
      return e;
    g.sampling.seed = static_cast<uint64_t>(seed);
  } else {
    g.sampling.seed =
        std::random_device{}() * 0x100000000ull ^ std::random_device{}();
  }
  if (auto e = Integer(body, "n", 1, model.parallel, &g.n)) return e;
  if (auto e = Stops(body, &g.stop)) return e;
  if (endpoint == Endpoint::kChat) {
    if (auto e = Boolean(body, "logprobs", &out->logprobs)) return e;
    int64_t top = 0;
    if (auto e = Integer(body, "top_logprobs", 0, kMaxTopLogprobs, &top))
      return e;
    if (Field(body, "top_logprobs") && !out->logprobs) {
      return Invalid("top_logprobs", "needs \"logprobs\": true");
    }
    g.top_logprobs = out->logprobs ? top : -1;
  } else {
    int64_t top = -1;
    if (auto e = Integer(body, "logprobs", 0, kMaxCompletionLogprobs, &top))
      return e;
    out->logprobs = top >= 0;
    g.top_logprobs = top;
  }
  return std::nullopt;
}

std::optional<ApiError> Streaming(const Json& body, ParsedRequest* out) {
  if (auto e = Boolean(body, "stream", &out->stream)) return e;
  const Json* options = Field(body, "stream_options");
  if (!options) return std::nullopt;
  if (!out->stream) {
    return Invalid("stream_options", "only with \"stream\": true");
  }
  if (!options->is_object()) {
    return Invalid("stream_options", "got " + Shown(*options) +
                                         ", want {\"include_usage\": bool}");
  }
  for (const auto& [key, value] : options->items()) {
    if (key != "include_usage") {
      return Invalid("stream_options." + key, "unknown: want include_usage");
    }
  }
  return Boolean(*options, "include_usage", &out->include_usage);
}

std::optional<ApiError> Lengths(const Json& body, Endpoint endpoint,
                                const ServedModel& model,
                                GenerationRequest* g) {
  const auto prompt = static_cast<int64_t>(g->prompt.size());
  const char* prompt_key = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (prompt == 0) return Invalid(prompt_key, "the prompt has no tokens");
  if (prompt >= model.context) {
    ApiError e =
        Invalid(prompt_key, "the prompt is " + std::to_string(prompt) +
                                " tokens, and the context (--ctx-size) holds " +
                                std::to_string(model.context) +
                                ": no room for a reply");
    e.code = "context_length_exceeded";
    return e;
  }
  // The last new token is never fed back.
  const int64_t room = model.context - prompt + 1;
  g->max_tokens = room;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (endpoint == Endpoint::kCompletion &&
        std::string(key) == "max_completion_tokens") {
      continue;
    }
    if (auto e = Integer(body, key, 1, std::numeric_limits<int64_t>::max(),
                         &g->max_tokens))
      return e;
    if (g->max_tokens > room) {
      ApiError e = Invalid(
          key, "got " + std::to_string(g->max_tokens) + " with a prompt of " +
                   std::to_string(prompt) + " tokens, want at most " +
                   std::to_string(room) + " (the context, --ctx-size, holds " +
                   std::to_string(model.context) + ")");
      e.code = "context_length_exceeded";
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ErrorBody(const ApiError& error) {
  Json e = {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? Json() : Json(error.param)},
            {"code", error.code.empty() ? Json() : Json(error.code)}};
  return Dump(Json{{"error", e}});
}

std::optional<ApiError> ParseRequest(Endpoint endpoint, const Json& body,
                                     const ServedModel& model,
                                     ParsedRequest* out) {
  if (!body.is_object()) {
    return ApiError{400, "the body is " + Shown(body) + ", want a JSON object",
                    "invalid_request_error", "", ""};
  }
  const std::set<std::string>& known = Known(endpoint);
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key)) {
      return ApiError{400, "Unrecognized request argument supplied: " + key,
                      "invalid_request_error", key, ""};
    }
  }
  if (const Json* name = Field(body, "model")) {
    if (!name->is_string()) {
      return Invalid("model", "got " + Shown(*name) + ", want a string");
    }
    if (name->get<std::string>() != model.id) {
      return ApiError{404,
                      "The model '" + name->get<std::string>() +
                          "' does not exist: this server runs '" + model.id +
                          "'",
                      "invalid_request_error", "model", "model_not_found"};
    }
  }
  if (auto e = CheckDefaults(body)) return e;
  out->endpoint = endpoint;
  if (auto e = Sampling(body, endpoint, model, out)) return e;
  if (auto e = Streaming(body, out)) return e;
  std::optional<ApiError> e =
      endpoint == Endpoint::kChat
          ? ChatPrompt(body, model, &out->generation.prompt)
          : CompletionPrompt(body, model, &out->generation.prompt);
  if (e) return e;
  return Lengths(body, endpoint, model, &out->generation);
}

ResponseBuilder::ResponseBuilder(const ParsedRequest& request,
                                 const ServedModel& model)
    : request_(request),
      model_(model),
      choices_(static_cast<size_t>(request.generation.n)),
      started_(static_cast<size_t>(request.generation.n), false) {
  std::random_device random;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08x%08x", random(), random());
  id_ = (request.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") +
        std::string(hex);
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
}

Json ResponseBuilder::Envelope(const char* object) const {
  return {{"id", id_},
          {"object", object},
          {"created", created_},
          {"model", model_.id}};
}

std::string ResponseBuilder::TokenText(int64_t id) const {
  Result<std::string> text = model_.tokenizer->Decode(id);
  return text.ok() ? *text : std::string();
}

Json ResponseBuilder::LogprobsJson(const std::vector<TokenLogprob>& tokens,
                                   const std::vector<size_t>& offsets) const {
  if (!request_.logprobs) return Json();
  if (request_.endpoint == Endpoint::kChat) {
    auto entry = [&](int64_t id, double logprob) {
      const std::string text = TokenText(id);
      return Json{
          {"token", text},
          {"logprob", logprob},
          {"bytes", std::vector<unsigned char>(text.begin(), text.end())}};
    };
    Json content = Json::array();
    for (const TokenLogprob& t : tokens) {
      Json e = entry(t.id, t.logprob);
      e["top_logprobs"] = Json::array();
      for (const auto& [id, lp] : t.top)
        e["top_logprobs"].push_back(entry(id, lp));
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    out["tokens"].push_back(TokenText(tokens[i].id));
    out["token_logprobs"].push_back(tokens[i].logprob);
    Json top = Json::object();
    for (const auto& [id, lp] : tokens[i].top) top[TokenText(id)] = lp;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offsets[i]);
  }
  return out;
}

std::string ResponseBuilder::Chunk(const Event& event) {
  const bool chat = request_.endpoint == Endpoint::kChat;
  Json choice = {{"index", event.choice}};
  ChoiceText& seen = choices_[size_t(event.choice)];
  std::string out;
  auto send = [&](Json c) {
    Json chunk = Envelope(chat ? "chat.completion.chunk" : "text_completion");
    chunk["choices"] = Json::array({std::move(c)});
    if (request_.include_usage) chunk["usage"] = nullptr;
    out += "data: " + Dump(chunk) + "\n\n";
  };
  if (event.kind == Event::Kind::kError) {
    return "data: " +
           ErrorBody({event.status, event.error, "server_error", "", ""}) +
           "\n\n";
  }
  if (chat && !started_[size_t(event.choice)]) {
    started_[size_t(event.choice)] = true;
    send({{"index", event.choice},
          {"delta", {{"role", "assistant"}, {"content", ""}}},
          {"logprobs", nullptr},
          {"finish_reason", nullptr}});
  }
  if (event.kind == Event::Kind::kText) {
    if (event.text.empty() && event.logprobs.empty()) return out;
    choice[chat ? "delta" : "text"] =
        chat ? Json{{"content", event.text}} : Json(event.text);
    choice["logprobs"] = LogprobsJson(
        event.logprobs,
        std::vector<size_t>(event.logprobs.size(), seen.text.size()));
    choice["finish_reason"] = nullptr;
    seen.text += event.text;
  } else {
    if (chat)
      choice["delta"] = Json::object();
    else
      choice["text"] = "";
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = event.finish_reason;
  }
  send(std::move(choice));
  return out;
}

std::string ResponseBuilder::StreamEnd(int64_t prompt_tokens,
                                       int64_t completion_tokens) {
  std::string out;
  if (request_.include_usage) {
    Json chunk =
        Envelope(request_.endpoint == Endpoint::kChat ? "chat.completion.chunk"
                                                      : "text_completion");
    chunk["choices"] = Json::array();
    chunk["usage"] = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens}};
    out += "data: " + Dump(chunk) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

void ResponseBuilder::Add(const Event& event) {
  ChoiceText& c = choices_[size_t(event.choice)];
  if (event.kind == Event::Kind::kText) {
    c.offsets.insert(c.offsets.end(), event.logprobs.size(), c.text.size());
    c.text += event.text;
    c.logprobs.insert(c.logprobs.end(), event.logprobs.begin(),
                      event.logprobs.end());
  } else if (event.kind == Event::Kind::kFinish) {
    c.finish_reason = event.finish_reason;
  }
}

Json ResponseBuilder::Whole(int64_t prompt_tokens,
                            int64_t completion_tokens) const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  Json out = Envelope(chat ? "chat.completion" : "text_completion");
  out["choices"] = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceText& c = choices_[i];
    Json choice = {{"index", i}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = LogprobsJson(c.logprobs, c.offsets);
    choice["finish_reason"] = c.finish_reason;
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = {{"prompt_tokens", prompt_tokens},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens + completion_tokens}};
  return out;
}

}  // namespace attn::serve
