// attn serve's counters, gauges and latency histograms, written by the
// HTTP threads and the scheduler, read as Prometheus' text format.
#ifndef ATTN_TOOLS_SERVE_METRICS_H_
#define ATTN_TOOLS_SERVE_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace attn::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Prometheus' _bucket, _sum and _count lines of `name`.
  void Write(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, then +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& route, int status);
  void CountTokens(int64_t prompt, int64_t generated);
  // Prompt tokens a request found in a kept or running sequence's cache.
  void CountReused(int64_t tokens);
  void ObserveFirstToken(double seconds);
  void ObserveTokenGap(double seconds);
  // The scheduler's state after each step.
  void SetGauges(int64_t queued, int64_t running, int64_t cache_tokens,
                 int64_t cache_capacity, uint64_t cache_bytes);
  std::string Text() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, reused_tokens_ = 0;
  int64_t queued_ = 0, running_ = 0, cache_tokens_ = 0, cache_capacity_ = 0;
  uint64_t cache_bytes_ = 0;
  Histogram first_token_, token_gap_;
};

}  // namespace attn::serve

#endif  // ATTN_TOOLS_SERVE_METRICS_H_
