// Sampler through the public API: greedy ties, the cuts that reduce to
// greedy, the drawn frequencies, seeded reproducibility and the option
// checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attn/lm.hpp"

namespace attn {
namespace {

Sampler MakeSampler(const SamplingOptions& options) {
  Result<Sampler> sampler = Sampler::Create(options);
  EXPECT_TRUE(sampler.ok()) << sampler.status().message();
  return *std::move(sampler);
}

// Logits without ties: evenly spaced values in a seeded order.
std::vector<float> RandomLogits(int64_t vocab, uint32_t seed) {
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = 0.037f * static_cast<float>(i) - 18.0f;
  }
  std::shuffle(logits.begin(), logits.end(), std::mt19937(seed));
  return logits;
}

// `count` tokens drawn by one sampler from the same logits.
std::vector<int64_t> Draws(const SamplingOptions& options,
                           const std::vector<float>& logits, int count) {
  Sampler sampler = MakeSampler(options);
  std::vector<int64_t> tokens;
  for (int i = 0; i < count; ++i) {
    tokens.push_back(
        sampler.Sample(logits.data(), static_cast<int64_t>(logits.size())));
  }
  return tokens;
}

SamplingOptions Sampling(double temperature, uint64_t seed) {
  SamplingOptions options;
  options.temperature = temperature;
  options.seed = seed;
  return options;
}

TEST(SamplingTest, GreedyTakesTheLowestIdOnTies) {
  Sampler sampler = MakeSampler({});
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  EXPECT_EQ(sampler.Sample(logits.data(), 5), 1);
  const std::vector<float> one = {-7.0f};
  EXPECT_EQ(sampler.Sample(one.data(), 1), 0);
}

TEST(SamplingTest, TopKOneIsGreedy) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = RandomLogits(1000, seed);
    const int64_t greedy = MakeSampler({}).Sample(logits.data(), 1000);
    SamplingOptions options = Sampling(1.5, seed);
    options.top_k = 1;
    for (int64_t token : Draws(options, logits, 10)) EXPECT_EQ(token, greedy);
  }
}

TEST(SamplingTest, TinyTopPIsGreedy) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = RandomLogits(1000, seed);
    const int64_t greedy = MakeSampler({}).Sample(logits.data(), 1000);
    SamplingOptions options = Sampling(2.0, seed);
    options.top_p = 1e-9;
    for (int64_t token : Draws(options, logits, 10)) EXPECT_EQ(token, greedy);
  }
}

TEST(SamplingTest, TinyTopPTakesTheLowestIdOnTies) {
  SamplingOptions options = Sampling(1.0, 3);
  options.top_p = 1e-9;
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  for (int64_t token : Draws(options, logits, 50)) EXPECT_EQ(token, 1);
}

TEST(SamplingTest, DrawsFollowTheSoftmax) {
  const std::vector<float> logits = {std::log(0.25f), std::log(0.75f)};
  const std::vector<int64_t> tokens = Draws(Sampling(1.0, 42), logits, 20000);
  int ones = 0;
  for (int64_t token : tokens) ones += token == 1;
  EXPECT_NEAR(ones / 20000.0, 0.75, 0.02);
}

TEST(SamplingTest, TemperatureSharpens) {
  // At temperature 0.5 the probabilities go as the squares: 1/10, 9/10.
  const std::vector<float> logits = {std::log(0.25f), std::log(0.75f)};
  const std::vector<int64_t> tokens = Draws(Sampling(0.5, 7), logits, 20000);
  int ones = 0;
  for (int64_t token : tokens) ones += token == 1;
  EXPECT_NEAR(ones / 20000.0, 0.9, 0.02);
}

TEST(SamplingTest, TopKKeepsOnlyTheLargest) {
  SamplingOptions options = Sampling(1.0, 5);
  options.top_k = 2;
  const std::vector<float> logits = {5.0f, 0.0f, 5.1f, 4.9f, 1.0f};
  for (int64_t token : Draws(options, logits, 500)) {
    EXPECT_TRUE(token == 0 || token == 2) << token;
  }
}

// NaN logits are never chosen: a top-k wider than the real logits keeps them
// all (and only them), greedy skips NaN, and all-NaN gives id 0 either way.
TEST(SamplingTest, NaNLogitsAreNeverDrawn) {
  const float nan = std::nanf("");
  const std::vector<float> logits = {nan, std::log(0.25f), nan,
                                     std::log(0.75f)};
  EXPECT_EQ(MakeSampler({}).Sample(logits.data(), 4), 3);
  for (int64_t top_k : {0, 2, 3}) {
    SamplingOptions options = Sampling(1.0, 11);
    options.top_k = top_k;
    int threes = 0;
    for (int64_t token : Draws(options, logits, 20000)) {
      ASSERT_TRUE(token == 1 || token == 3) << token << " at top_k " << top_k;
      threes += token == 3;
    }
    EXPECT_NEAR(threes / 20000.0, 0.75, 0.02) << "top_k " << top_k;
  }
  const std::vector<float> all_nan = {nan, nan, nan};
  EXPECT_EQ(MakeSampler({}).Sample(all_nan.data(), 3), 0);
  SamplingOptions options = Sampling(1.0, 3);
  options.top_k = 2;
  for (int64_t token : Draws(options, all_nan, 20)) EXPECT_EQ(token, 0);
}

TEST(SamplingTest, TopPKeepsTheNucleus) {
  // Probabilities 0.5, 0.3, 0.2: top_p 0.7 keeps the first two.
  SamplingOptions options = Sampling(1.0, 9);
  options.top_p = 0.7;
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f),
                                     std::log(0.2f)};
  int zeros = 0;
  for (int64_t token : Draws(options, logits, 20000)) {
    ASSERT_NE(token, 2);
    zeros += token == 0;
  }
  EXPECT_NEAR(zeros / 20000.0, 0.625, 0.02);  // 0.5 / 0.8, renormalised
}

TEST(SamplingTest, SameSeedSameDraws) {
  const std::vector<float> logits = RandomLogits(50, 1);
  const std::vector<float> flat(50, 0.0f);
  EXPECT_EQ(Draws(Sampling(1.0, 123), flat, 100),
            Draws(Sampling(1.0, 123), flat, 100));
  EXPECT_EQ(Draws(Sampling(30.0, 9), logits, 100),
            Draws(Sampling(30.0, 9), logits, 100));
}

TEST(SamplingTest, DifferentSeedsDiffer) {
  const std::vector<float> flat(50, 0.0f);
  EXPECT_NE(Draws(Sampling(1.0, 1), flat, 100),
            Draws(Sampling(1.0, 2), flat, 100));
}

// Streams of one seed draw independently: stream 0 is the seed alone, and
// stream 1 does not follow it one draw behind (as a state of seed + stream x
// splitmix64's increment would).
TEST(SamplingTest, StreamsOfOneSeedDiffer) {
  const std::vector<float> flat(1000, 0.0f);
  SamplingOptions options = Sampling(1.0, 5);
  const std::vector<int64_t> seed_alone = Draws(options, flat, 100);
  options.stream = 0;
  EXPECT_EQ(Draws(options, flat, 100), seed_alone);
  options.stream = 1;
  const std::vector<int64_t> first = Draws(options, flat, 100);
  EXPECT_EQ(Draws(options, flat, 100), first);
  EXPECT_NE(first, seed_alone);
  EXPECT_NE(std::vector<int64_t>(first.begin(), first.end() - 1),
            std::vector<int64_t>(seed_alone.begin() + 1, seed_alone.end()));
  options.stream = 2;
  EXPECT_NE(Draws(options, flat, 100), first);
}

// Expects `options` refused with one line naming `field`.
void ExpectRefused(const SamplingOptions& options, const std::string& field) {
  Result<Sampler> sampler = Sampler::Create(options);
  ASSERT_FALSE(sampler.ok()) << field;
  EXPECT_EQ(sampler.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sampler.status().message().find(field), std::string::npos)
      << sampler.status().message();
  EXPECT_EQ(sampler.status().message().find('\n'), std::string::npos);
}

TEST(SamplingTest, BadOptionsAreRefused) {
  ExpectRefused(Sampling(-0.5, 0), "temperature");
  ExpectRefused(Sampling(NAN, 0), "temperature");
  ExpectRefused(Sampling(INFINITY, 0), "temperature");
  SamplingOptions options = Sampling(1.0, 0);
  options.top_k = -1;
  ExpectRefused(options, "top_k");
  for (double top_p : {0.0, -0.1, 1.5, static_cast<double>(NAN)}) {
    options = Sampling(1.0, 0);
    options.top_p = top_p;
    ExpectRefused(options, "top_p");
  }
}

}  // namespace
}  // namespace attn
