#include "tools/serve_http.h"

#include <cstring>
#include <thread>

#include "httplib.h"

namespace attn::serve {
namespace {

enum class State { kLoading, kReady, kStopping };

// A stream that has said nothing this long sends an SSE comment: a proxy
// keeps the connection, and a client that left is noticed.
constexpr std::chrono::milliseconds kKeepAlive{1000};
constexpr std::chrono::milliseconds kPoll{100};
constexpr int kMaxJsonDepth = 64;

void Reply(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(ErrorBody(error), "application/json");
}

void ReplyJson(httplib::Response& res, const Json& body) {
  res.status = 200;
  res.set_content(Dump(body), "application/json");
}

const char* StatusType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// Compares without stopping at the first difference.
bool SameKey(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

struct HttpFrontEnd::Impl {
  explicit Impl(const HttpOptions& o) : options(o) {}

  void Routes();
  httplib::Server::HandlerResponse Gate(const httplib::Request& req,
                                        httplib::Response& res);
  bool ReadBody(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader, Json* body);
  void Generate(Endpoint endpoint, const httplib::Request& req,
                httplib::Response& res, const httplib::ContentReader& reader);
  void Stream(std::shared_ptr<struct Running> running, httplib::Response& res);
  void Tokenize(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader);
  void Detokenize(const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader);
  Json ModelCard() const;

  HttpOptions options;
  httplib::Server server;
  Metrics metrics;
  std::thread listener;
  std::atomic<State> state{State::kLoading};
  std::atomic<int> in_flight{0};  // generation requests not yet answered
  std::shared_ptr<const Tokenizer> tokenizer;
  Scheduler* scheduler = nullptr;
  ServedModel model;
  int64_t created = 0;
};

// A generation request in flight: what its response is built from. It
// counts as in flight until its reply (or stream) is written out and the
// last holder lets go.
struct Running {
  explicit Running(std::atomic<int>* counter) : in_flight(counter) {
    ++*in_flight;
  }
  ~Running() { --*in_flight; }
  std::atomic<int>* in_flight;
  ParsedRequest request;
  std::unique_ptr<ResponseBuilder> builder;
  std::shared_ptr<Job> job;
  Clock::time_point last_write;
};

HttpFrontEnd::HttpFrontEnd(const HttpOptions& options)
    : impl_(new Impl(options)) {
  impl_->Routes();
}

HttpFrontEnd::~HttpFrontEnd() { Close(); }

Metrics& HttpFrontEnd::metrics() { return impl_->metrics; }

Result<int> HttpFrontEnd::Listen() {
  Impl& s = *impl_;
  const int threads = s.options.threads;
  s.server.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  s.server.set_read_timeout(s.options.read_timeout.count());
  s.server.set_write_timeout(s.options.read_timeout.count());
  s.server.set_payload_max_length(s.options.max_body_bytes);
  int port = s.options.port;
  if (port == 0) {
    port = s.server.bind_to_any_port(s.options.host);
  } else if (!s.server.bind_to_port(s.options.host, port)) {
    port = -1;
  }
  if (port < 0) {
    return InvalidArgument("--host " + s.options.host + " --port " +
                           std::to_string(s.options.port) +
                           ": cannot listen there (in use, not this "
                           "machine's address, or a privileged port)");
  }
  s.listener = std::thread([&s] { s.server.listen_after_bind(); });
  // Until it runs, stop() would not stop it.
  while (!s.server.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return port;
}

void HttpFrontEnd::Ready(std::shared_ptr<const Tokenizer> tokenizer,
                         Scheduler* scheduler, const ServedModel& model) {
  Impl& s = *impl_;
  s.tokenizer = std::move(tokenizer);
  s.scheduler = scheduler;
  s.model = model;
  s.model.tokenizer = s.tokenizer.get();
  s.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  s.state = State::kReady;
}

void HttpFrontEnd::Refuse() { impl_->state = State::kStopping; }

void HttpFrontEnd::WaitIdle(Clock::time_point deadline) {
  while (impl_->in_flight.load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void HttpFrontEnd::Close() {
  // A chunked reply stops at its next chunk once the server stops: only
  // after the streams are written out.
  impl_->state = State::kStopping;
  impl_->server.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

httplib::Server::HandlerResponse HttpFrontEnd::Impl::Gate(
    const httplib::Request& req, httplib::Response& res) {
  using R = httplib::Server::HandlerResponse;
  if (req.path == "/health") return R::Unhandled;
  if (!options.api_key.empty()) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    if (auth.compare(0, bearer.size(), bearer) != 0 ||
        !SameKey(auth.substr(bearer.size()), options.api_key)) {
      Reply(res, {401,
                  auth.empty() ? "no API key: send the header "
                                 "'Authorization: Bearer KEY'"
                               : "incorrect API key",
                  "authentication_error", "", "invalid_api_key"});
      res.set_header("Connection", "close");
      return R::Handled;
    }
  }
  if (state != State::kReady) {
    Reply(res, {503,
                state == State::kLoading ? "the model is loading"
                                         : "the server is shutting down",
                "server_error", "", ""});
    res.set_header("Connection", "close");
    return R::Handled;
  }
  return R::Unhandled;
}

// The body as JSON, read within the read deadline and --max-body-bytes;
// false with the error response set.
bool HttpFrontEnd::Impl::ReadBody(const httplib::Request& req,
                                  httplib::Response& res,
                                  const httplib::ContentReader& reader,
                                  Json* body) {
  const uint64_t cap = options.max_body_bytes;
  const ApiError too_large{
      413, "the body is over --max-body-bytes " + std::to_string(cap),
      "invalid_request_error", "", "body_too_large"};
  if (req.has_header("Content-Length") &&
      std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr,
                    10) > cap) {
    Reply(res, too_large);
    res.set_header("Connection", "close");
    return false;
  }
  // The library bounds each wait for a byte; this bounds them all.
  const Clock::time_point deadline = Clock::now() + options.read_timeout;
  std::string text;
  bool over = false;
  const bool read = reader([&](const char* data, size_t size) {
    over = text.size() + size > cap;
    if (!over) text.append(data, size);
    return !over && Clock::now() < deadline;
  });
  if (!read) {
    Reply(
        res,
        over ? too_large
             : ApiError{408,
                        "the request did not arrive within " +
                            std::to_string(options.read_timeout.count()) + " s",
                        "invalid_request_error", "", "request_timeout"});
    res.set_header("Connection", "close");
    return false;
  }
  // Printing or copying a value recurses once per level: deeper nesting
  // than any request needs is refused while parsing.
  struct TooDeep {};
  const auto depth_limit = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  try {
    *body = Json::parse(text, depth_limit);
  } catch (const TooDeep&) {
    Reply(res, {400,
                "the body nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels",
                "invalid_request_error", "", ""});
    return false;
  } catch (const Json::parse_error& e) {
    Reply(res, {400,
                "the body is not JSON (or not UTF-8) at byte " +
                    std::to_string(e.byte),
                "invalid_request_error", "", ""});
    return false;
  }
  return true;
}

void HttpFrontEnd::Impl::Generate(Endpoint endpoint,
                                  const httplib::Request& req,
                                  httplib::Response& res,
                                  const httplib::ContentReader& reader) {
  Json body;
  if (!ReadBody(req, res, reader, &body)) return;
  auto running = std::make_shared<Running>(&in_flight);
  if (auto error = ParseRequest(endpoint, body, model, &running->request)) {
    return Reply(res, *error);
  }
  switch (scheduler->Submit(running->request.generation, &running->job)) {
    case SubmitResult::kQueued:
      break;
    case SubmitResult::kQueueFull:
      res.set_header("Retry-After", "1");
      return Reply(res, {429,
                         "every sequence is busy and the queue (--max-queue) "
                         "is full: retry later",
                         "rate_limit_error", "", "queue_full"});
    case SubmitResult::kStopping:
      return Reply(
          res, {503, "the server is shutting down", "server_error", "", ""});
  }
  running->builder = std::make_unique<ResponseBuilder>(running->request, model);
  if (running->request.stream) return Stream(std::move(running), res);
  std::deque<Event> events;
  while (running->job->Take(&events, kPoll)) {
  }
  for (const Event& e : events) {
    if (e.kind == Event::Kind::kError) {
      return Reply(res, {e.status, e.error, "server_error", "", ""});
    }
    running->builder->Add(e);
  }
  ReplyJson(res, running->builder->Whole(running->job->prompt_tokens(),
                                         running->job->completion_tokens()));
}

void HttpFrontEnd::Impl::Stream(std::shared_ptr<Running> running,
                                httplib::Response& res) {
  running->last_write = Clock::now();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [running](size_t, httplib::DataSink& sink) {
        std::deque<Event> events;
        const bool more = running->job->Take(&events, kPoll);
        std::string out;
        for (const Event& e : events) out += running->builder->Chunk(e);
        if (!more) {
          out += running->builder->StreamEnd(running->job->prompt_tokens(),
                                             running->job->completion_tokens());
        } else if (out.empty() &&
                   Clock::now() - running->last_write > kKeepAlive) {
          out = ": keep-alive\n\n";
        }
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) {
            running->job->Cancel();
            return false;
          }
          running->last_write = Clock::now();
        }
        if (!more) sink.done();
        return true;
      },
      [running](bool) { running->job->Cancel(); });
}

void HttpFrontEnd::Impl::Tokenize(const httplib::Request& req,
                                  httplib::Response& res,
                                  const httplib::ContentReader& reader) {
  Json body;
  if (!ReadBody(req, res, reader, &body)) return;
  if (!body.is_object() || !body.contains("prompt") ||
      !body["prompt"].is_string()) {
    return Reply(res, {400, "prompt: want the text to tokenize",
                       "invalid_request_error", "prompt", ""});
  }
  for (const auto& [key, value] : body.items()) {
    if (key != "prompt" && key != "add_special_tokens" && key != "model") {
      return Reply(res, {400, "Unrecognized request argument supplied: " + key,
                         "invalid_request_error", key, ""});
    }
  }
  const Json special = body.value("add_special_tokens", Json(true));
  if (!special.is_boolean()) {
    return Reply(res, {400, "add_special_tokens: want true or false",
                       "invalid_request_error", "add_special_tokens", ""});
  }
  Result<std::vector<int64_t>> ids =
      tokenizer->Encode(body["prompt"].get<std::string>(), special.get<bool>());
  if (!ids.ok()) {
    return Reply(res, {400, "prompt: " + ids.status().message(),
                       "invalid_request_error", "prompt", ""});
  }
  ReplyJson(res, {{"tokens", *ids},
                  {"count", ids->size()},
                  {"max_model_len", model.context}});
}

void HttpFrontEnd::Impl::Detokenize(const httplib::Request& req,
                                    httplib::Response& res,
                                    const httplib::ContentReader& reader) {
  Json body;
  if (!ReadBody(req, res, reader, &body)) return;
  const int64_t vocab = tokenizer->vocab_size();
  const ApiError bad{
      400,
      "tokens: want a list of token ids from 0 to " + std::to_string(vocab - 1),
      "invalid_request_error", "tokens", ""};
  if (!body.is_object() || !body.contains("tokens") ||
      !body["tokens"].is_array()) {
    return Reply(res, bad);
  }
  std::vector<int64_t> ids;
  for (const Json& id : body["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= vocab) {
      return Reply(res, bad);
    }
    ids.push_back(id.get<int64_t>());
  }
  Result<std::string> text = tokenizer->DecodeText(ids);
  if (!text.ok()) return Reply(res, bad);
  ReplyJson(res, {{"prompt", *text}});
}

Json HttpFrontEnd::Impl::ModelCard() const {
  return {{"id", model.id},
          {"object", "model"},
          {"created", created},
          {"owned_by", "attn"},
          {"max_model_len", model.context}};
}

void HttpFrontEnd::Impl::Routes() {
  using httplib::ContentReader;
  using httplib::Request;
  using httplib::Response;
  server.set_pre_routing_handler(
      [this](const Request& req, Response& res) { return Gate(req, res); });
  server.Get("/health", [this](const Request&, Response& res) {
    const State now = state;
    res.status = now == State::kReady ? 200 : 503;
    res.set_content(Dump({{"status", now == State::kReady     ? "ok"
                                     : now == State::kLoading ? "loading"
                                                              : "stopping"}}),
                    "application/json");
  });
  server.Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(metrics.Text(), "text/plain; version=0.0.4");
  });
  server.Get("/v1/models", [this](const Request&, Response& res) {
    ReplyJson(res, {{"object", "list"}, {"data", {ModelCard()}}});
  });
  server.Get("/v1/models/(.+)", [this](const Request& req, Response& res) {
    if (req.matches[1] != model.id) {
      return Reply(
          res, {404, "The model '" + req.matches[1].str() + "' does not exist",
                "invalid_request_error", "model", "model_not_found"});
    }
    ReplyJson(res, ModelCard());
  });
  server.Post("/v1/chat/completions", [this](const Request& req, Response& res,
                                             const ContentReader& reader) {
    Generate(Endpoint::kChat, req, res, reader);
  });
  server.Post("/v1/completions", [this](const Request& req, Response& res,
                                        const ContentReader& reader) {
    Generate(Endpoint::kCompletion, req, res, reader);
  });
  server.Post("/tokenize", [this](const Request& req, Response& res,
                                  const ContentReader& reader) {
    Tokenize(req, res, reader);
  });
  server.Post("/detokenize", [this](const Request& req, Response& res,
                                    const ContentReader& reader) {
    Detokenize(req, res, reader);
  });
  // Whatever has no body yet gets the error shape (an unknown route, a
  // body over the cap found by the library).
  server.set_error_handler([](const Request& req, Response& res) {
    if (!res.body.empty()) return;
    const std::string message =
        res.status == 404   ? "no route " + req.method + " " + req.path
        : res.status == 413 ? "the body is over --max-body-bytes"
                            : "the request could not be served";
    Reply(res, {res.status, message, StatusType(res.status), "", ""});
  });
  server.set_exception_handler(
      [](const Request&, Response& res, std::exception_ptr) {
        Reply(res, {500, "internal error", "server_error", "", ""});
      });
  server.set_logger([this](const Request& req, const Response& res) {
    static const char* const kRoutes[] = {
        "/health",         "/metrics",  "/v1/models", "/v1/chat/completions",
        "/v1/completions", "/tokenize", "/detokenize"};
    std::string route = "other";
    for (const char* r : kRoutes) {
      if (req.path == r) route = r;
    }
    metrics.CountRequest(route, res.status);
  });
}

}  // namespace attn::serve
