// attn serve's HTTP side: cpp-httplib's server with the OpenAI routes, the
// API key, the body limits and a deadline on reading each body (a client
// that sends a byte a second gets 408, not a thread held for ever).
#ifndef ATTN_TOOLS_SERVE_HTTP_H_
#define ATTN_TOOLS_SERVE_HTTP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "attn/tokenizer.hpp"
#include "tools/serve_api.h"
#include "tools/serve_metrics.h"
#include "tools/serve_scheduler.h"

namespace attn::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port
  std::string api_key;  // empty: no key
  uint64_t max_body_bytes = 16u << 20;
  std::chrono::seconds read_timeout{30};  // a request's body, all of it
  int threads = 64;                       // connections served at once
};

class HttpFrontEnd {
 public:
  explicit HttpFrontEnd(const HttpOptions& options);
  ~HttpFrontEnd();
  // Binds the port (the chosen one for port 0) and serves in the
  // background: /health answers 503 and other routes 503 until Ready.
  Result<int> Listen();
  // The model is loaded: generation routes go to `scheduler`.
  void Ready(std::shared_ptr<const Tokenizer> tokenizer, Scheduler* scheduler,
             const ServedModel& model);
  // From now on /health and every new request answer 503, so that a
  // balancer sends no more; requests in flight go on.
  void Refuse();
  // Waits until no generation request is in flight (their replies and
  // streams written out), or until `deadline`.
  void WaitIdle(Clock::time_point deadline);
  // Closes the port and returns once every connection's thread has ended.
  void Close();
  Metrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::serve

#endif  // ATTN_TOOLS_SERVE_HTTP_H_
