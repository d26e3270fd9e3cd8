// Sampler: the next token from logits, greedy or as the book's chapter-5
// generate (top-k, temperature, softmax, top-p, one draw). Probabilities are
// computed in double, the draws from engine/random.h, so a seed gives the
// same tokens with every standard library.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "engine/runtime/random.h"

namespace attn {
namespace {

// The largest logit's id, the lowest one on ties; NaN never wins (all NaN:
// 0, as Draw gives).
int64_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best] ||
        (std::isnan(logits[best]) && !std::isnan(logits[i]))) {
      best = i;
    }
  }
  return best;
}

// The book's top-k cut: logits below the k-th largest are dropped, so ties
// with it are all kept. Returns that k-th largest value (-inf: no cut).
float TopKThreshold(const float* logits, int64_t vocab, int64_t top_k) {
  if (top_k <= 0 || top_k >= vocab) return -INFINITY;
  std::vector<float> values(logits, logits + vocab);
  // NaN sorts last, so it is never the threshold while k real values remain.
  const auto descending = [](float a, float b) {
    return a > b || (!std::isnan(a) && std::isnan(b));
  };
  std::nth_element(values.begin(), values.begin() + (top_k - 1), values.end(),
                   descending);
  // Fewer than k real values: NaN would cut them all; keep every one.
  const float kth = values[static_cast<size_t>(top_k - 1)];
  return std::isnan(kth) ? -INFINITY : kth;
}

// Unnormalised softmax(logits / temperature) over the logits >= threshold
// (0 for the others). The max is subtracted before dividing, which is the
// same value and cannot overflow for a tiny temperature; the max itself gets
// exactly 1, so infinite logits give no inf - inf.
std::vector<double> SoftmaxWeights(const float* logits, int64_t vocab,
                                   float threshold, double temperature) {
  float max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] >= threshold) max = std::max(max, logits[i]);
  }
  std::vector<double> weights(static_cast<size_t>(vocab), 0.0);
  for (int64_t i = 0; i < vocab; ++i) {
    if (!(logits[i] >= threshold)) continue;  // cut, or NaN
    weights[i] =
        logits[i] == max
            ? 1.0
            : std::exp((static_cast<double>(logits[i]) - max) / temperature);
  }
  return weights;
}

// The nucleus cut: keeps the smallest set of most probable tokens (ties:
// the lower id first) whose share of the total reaches top_p, at least one.
void KeepNucleus(std::vector<double>& weights, double top_p) {
  std::vector<int64_t> order;
  double total = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] > 0.0) order.push_back(static_cast<int64_t>(i));
    total += weights[i];
  }
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return weights[a] > weights[b] || (weights[a] == weights[b] && a < b);
  });
  double kept = 0.0;
  size_t count = 0;
  while (count < order.size() && (count == 0 || kept < top_p * total)) {
    kept += weights[order[count++]];
  }
  for (size_t i = count; i < order.size(); ++i) weights[order[i]] = 0.0;
}

// A token drawn with probability weight / sum(weights): u scaled to the
// sum, then the cumulative sum in id order. Rounding that leaves u at or
// past the last sum picks the last token with weight.
int64_t Draw(const std::vector<double>& weights, double u) {
  double total = 0.0;
  for (double w : weights) total += w;
  const double target = u * total;
  double cumulative = 0.0;
  int64_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    cumulative += weights[i];
    last = static_cast<int64_t>(i);
    if (target < cumulative) return last;
  }
  return last;
}

std::string NumberText(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

}  // namespace

Result<Sampler> Sampler::Create(const SamplingOptions& options) {
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    return InvalidArgument("sampling temperature is " +
                           NumberText(options.temperature) +
                           ", want a finite number of 0 or more (0: greedy)");
  }
  if (options.top_k < 0) {
    return InvalidArgument("sampling top_k is " +
                           std::to_string(options.top_k) +
                           ", want 0 (every token) or more");
  }
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) {
    return InvalidArgument("sampling top_p is " + NumberText(options.top_p) +
                           ", want a number above 0 and at most 1");
  }
  return Sampler(options);
}

// A stream starts at a point of the seed's splitmix64 sequence that a hash
// of its number picks: 2^64 long, so streams do not meet in practice.
Sampler::Sampler(const SamplingOptions& options) : options_(options) {
  uint64_t stream = options.stream;
  state_ = options.seed + (stream ? SplitMix64(stream) : 0);
}

int64_t Sampler::Sample(const float* logits, int64_t vocab) {
  if (options_.temperature == 0.0) return Argmax(logits, vocab);
  const float threshold = TopKThreshold(logits, vocab, options_.top_k);
  std::vector<double> weights =
      SoftmaxWeights(logits, vocab, threshold, options_.temperature);
  if (options_.top_p < 1.0) KeepNucleus(weights, options_.top_p);
  return Draw(weights, UniformDouble(state_));
}

}  // namespace attn
