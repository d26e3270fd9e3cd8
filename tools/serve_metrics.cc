#include "tools/serve_metrics.h"

#include <cstdio>

namespace attn::serve {
namespace {

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

void Line(std::string* out, const std::string& name, double value) {
  *out += name + " " + Number(value) + "\n";
}

void Help(std::string* out, const char* name, const char* type,
          const char* help) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name +
          " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Write(const std::string& name, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    Line(out, name + "_bucket{le=\"" + le + "\"}",
         static_cast<double>(cumulative));
  }
  Line(out, name + "_sum", sum_);
  Line(out, name + "_count", static_cast<double>(count_));
}

Metrics::Metrics()
    : first_token_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      token_gap_({0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28}) {}

void Metrics::CountRequest(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void Metrics::CountTokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  generated_tokens_ += static_cast<uint64_t>(generated);
}

void Metrics::CountReused(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  reused_tokens_ += static_cast<uint64_t>(tokens);
}

void Metrics::ObserveFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  first_token_.Observe(seconds);
}

void Metrics::ObserveTokenGap(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  token_gap_.Observe(seconds);
}

void Metrics::SetGauges(int64_t queued, int64_t running, int64_t cache_tokens,
                        int64_t cache_capacity, uint64_t cache_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  queued_ = queued;
  running_ = running;
  cache_tokens_ = cache_tokens;
  cache_capacity_ = cache_capacity;
  cache_bytes_ = cache_bytes;
}

std::string Metrics::Text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  Help(&out, "attn_requests_total", "counter",
       "HTTP requests answered, by route and status.");
  for (const auto& [key, count] : requests_) {
    Line(&out,
         "attn_requests_total{route=\"" + key.first + "\",status=\"" +
             std::to_string(key.second) + "\"}",
         static_cast<double>(count));
  }
  Help(&out, "attn_prompt_tokens_total", "counter", "Prompt tokens admitted.");
  Line(&out, "attn_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  Help(&out, "attn_prefix_reused_tokens_total", "counter",
       "Prompt tokens found in the KV cache, not computed again.");
  Line(&out, "attn_prefix_reused_tokens_total",
       static_cast<double>(reused_tokens_));
  Help(&out, "attn_generated_tokens_total", "counter", "Tokens sampled.");
  Line(&out, "attn_generated_tokens_total",
       static_cast<double>(generated_tokens_));
  Help(&out, "attn_queue_depth", "gauge", "Requests waiting for a sequence.");
  Line(&out, "attn_queue_depth", static_cast<double>(queued_));
  Help(&out, "attn_running_sequences", "gauge",
       "Sequences prefilling or decoding.");
  Line(&out, "attn_running_sequences", static_cast<double>(running_));
  Help(&out, "attn_kv_cache_tokens", "gauge",
       "Tokens the KV cache holds, kept prefixes included.");
  Line(&out, "attn_kv_cache_tokens", static_cast<double>(cache_tokens_));
  Help(&out, "attn_kv_cache_capacity_tokens", "gauge",
       "Tokens the KV cache can hold (--parallel x --ctx-size).");
  Line(&out, "attn_kv_cache_capacity_tokens",
       static_cast<double>(cache_capacity_));
  Help(&out, "attn_kv_cache_bytes", "gauge",
       "Bytes reserved for the KV cache at start.");
  Line(&out, "attn_kv_cache_bytes", static_cast<double>(cache_bytes_));
  Help(&out, "attn_time_to_first_token_seconds", "histogram",
       "From a request's arrival to its first token.");
  first_token_.Write("attn_time_to_first_token_seconds", &out);
  Help(&out, "attn_time_per_output_token_seconds", "histogram",
       "Between consecutive tokens of one choice.");
  token_gap_.Write("attn_time_per_output_token_seconds", &out);
  return out;
}

}  // namespace attn::serve
