// Numerics under fire: the softmax kernel and the whole block on NaN, Inf,
// huge magnitudes and all-equal logits. The promise (engine/README.md,
// "Numerics"): finite scores always give finite probabilities; a fully
// masked row gives zeros; NaN or +inf scores give a NaN row, as in PyTorch;
// nothing crashes.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "attn/attn.hpp"
#include "kernels/softmax.h"

namespace attn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// One causal softmax row of `scores` with every key visible.
std::vector<float> SoftmaxRow(std::vector<float> scores, float scale = 1.0f) {
  const size_t n = scores.size();
  kernels::CausalSoftmax(scores.data(), 1, n, n, static_cast<ptrdiff_t>(n),
                         scale);
  return scores;
}

void ExpectDistribution(const std::vector<float>& p) {
  double sum = 0.0;
  for (float v : p) {
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_GE(v, 0.0f);
    sum += v;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(NumericsTest, HugeFiniteScoresGiveFiniteProbabilities) {
  const std::vector<float> p = SoftmaxRow({1e30f, -1e30f, 0.0f, 1e30f});
  ExpectDistribution(p);
  EXPECT_FLOAT_EQ(p[0], 0.5f);
  EXPECT_EQ(p[1], 0.0f);
  EXPECT_FLOAT_EQ(p[3], 0.5f);
  // The extremes of fp32: x - max overflows to -inf, exp gives 0.
  const std::vector<float> q = SoftmaxRow({FLT_MAX, -FLT_MAX, -FLT_MAX});
  ExpectDistribution(q);
  EXPECT_EQ(q[0], 1.0f);
  ExpectDistribution(SoftmaxRow({-FLT_MAX, -FLT_MAX}, 0.125f));
  ExpectDistribution(SoftmaxRow({FLT_MAX, FLT_MAX, 1.0f}, 8.0f));
  ExpectDistribution(SoftmaxRow({FLT_MIN, -FLT_MIN, 1e-38f, 0.0f}));
}

TEST(NumericsTest, RandomFiniteScoresOfEveryMagnitude) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> exponent(-38.0f, 38.0f);
  std::uniform_int_distribution<int> length(1, 200);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> s(static_cast<size_t>(length(rng)));
    for (float& v : s) {
      v = std::pow(10.0f, exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    }
    ExpectDistribution(SoftmaxRow(s, trial % 2 ? 1.0f : 0.0883883f));
  }
}

TEST(NumericsTest, AllEqualLogitsAreUniform) {
  for (const float value : {0.0f, 7.0f, -3.5f, 1e30f, -1e30f, FLT_MAX}) {
    for (const size_t n : {1, 3, 16, 17, 100}) {
      const std::vector<float> p = SoftmaxRow(std::vector<float>(n, value));
      for (float v : p) ASSERT_FLOAT_EQ(v, 1.0f / static_cast<float>(n));
    }
  }
}

TEST(NumericsTest, FullyMaskedRowsAreZeros) {
  // Row 0 of a block whose diagonal is -1 sees no key at all.
  std::vector<float> s = {1.0f, 2.0f, 3.0f, 4.0f};
  kernels::CausalSoftmax(s.data(), 1, 4, 4, -1, 1.0f);
  for (float v : s) EXPECT_EQ(v, 0.0f);
  // Every visible score -inf: nothing to attend to, zeros, never NaN.
  EXPECT_EQ(SoftmaxRow({-kInf, -kInf, -kInf}),
            (std::vector<float>{0.0f, 0.0f, 0.0f}));
  // -inf among finite scores is a zero probability.
  const std::vector<float> p = SoftmaxRow({-kInf, 0.0f, 0.0f});
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_FLOAT_EQ(p[1], 0.5f);
  // A NaN past the causal prefix is never read.
  std::vector<float> masked = {1.0f, kNaN, kInf};
  kernels::CausalSoftmax(masked.data(), 1, 3, 3, 0, 1.0f);
  EXPECT_EQ(masked, (std::vector<float>{1.0f, 0.0f, 0.0f}));
}

TEST(NumericsTest, NaNAndPlusInfScoresGiveNaNRowsAsInPyTorch) {
  for (const std::vector<float>& row : {std::vector<float>{1.0f, kNaN, 2.0f},
                                        {kInf, 1.0f, 2.0f},
                                        {kInf, kInf}}) {
    for (float v : SoftmaxRow(row)) EXPECT_TRUE(std::isnan(v));
  }
}

// The whole block: d_in 8, d_out 8, 2 heads, with seeded weights.
class BlockTest : public ::testing::Test {
 protected:
  static constexpr int64_t kD = 8, kT = 6, kB = 2;
  void SetUp() override {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-0.35f, 0.35f);
    for (auto* w : {&wq_, &wk_, &wv_, &wo_}) {
      w->resize(kD * kD);
      for (float& v : *w) v = u(rng);
    }
    bo_.assign(kD, 0.1f);
    MhaConfig c;
    c.d_in = c.d_out = kD;
    c.num_heads = 2;
    MhaWeights w;
    w.w_query = wq_.data();
    w.w_key = wk_.data();
    w.w_value = wv_.data();
    w.w_out = wo_.data();
    w.b_out = bo_.data();
    auto model = MhaModel::Create(c, w);
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = *model;
  }
  std::vector<float> Run(const std::vector<float>& x) {
    std::vector<float> y(x.size(), -7.0f);
    MhaSession session(model_);
    EXPECT_TRUE(session.Run(x.data(), kB, kT, y.data()).ok());
    return y;
  }
  std::vector<float> Input(float scale) {
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(kB * kT * kD);
    for (float& v : x) v = u(rng) * scale;
    return x;
  }
  std::vector<float> wq_, wk_, wv_, wo_, bo_;
  std::shared_ptr<const MhaModel> model_;
};

// A non-finite token makes its own sequence's rows from that token on NaN
// (earlier rows of that sequence may be NaN too, as in PyTorch, where the
// masked zeros multiply the NaN values; see engine/README.md). Other
// sequences in the batch are bitwise intact.
TEST_F(BlockTest, NonFiniteInputStaysInItsSequence) {
  const std::vector<float> clean = Run(Input(1.0f));
  for (const float bad : {kNaN, kInf, -kInf}) {
    std::vector<float> x = Input(1.0f);
    const int64_t token = 3;
    x[(0 * kT + token) * kD + 5] = bad;  // batch 0, token 3
    const std::vector<float> y = Run(x);
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < kT; ++t) {
        for (int64_t j = 0; j < kD; ++j) {
          const size_t i = static_cast<size_t>((b * kT + t) * kD + j);
          if (b == 0 && t >= token) {
            EXPECT_TRUE(std::isnan(y[i])) << "b " << b << " t " << t;
          } else if (b == 0) {
            EXPECT_TRUE(std::isnan(y[i]) ||
                        std::memcmp(&y[i], &clean[i], sizeof(float)) == 0)
                << "b " << b << " t " << t;
          } else {
            EXPECT_EQ(std::memcmp(&y[i], &clean[i], sizeof(float)), 0)
                << "b " << b << " t " << t;
          }
        }
      }
    }
  }
}

TEST_F(BlockTest, AllEqualTokensGiveEqualRows) {
  std::vector<float> x(kB * kT * kD);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.1f * static_cast<float>(i % kD);
  const std::vector<float> y = Run(x);
  for (size_t r = 1; r < static_cast<size_t>(kB * kT); ++r) {
    for (size_t j = 0; j < kD; ++j) {
      EXPECT_NEAR(y[r * kD + j], y[j], 1e-5f) << "row " << r;
    }
  }
}

// Large but representable scores (inputs 1e15: scores ~1e29) stay finite;
// inputs of 1e30 overflow the fp32 scores: no crash, every row finite or NaN
// (attn run refuses such an output, see cli_hostile_test).
TEST_F(BlockTest, HugeMagnitudes) {
  for (const float scale : {1e6f, 1e12f, 1e15f}) {
    for (float v : Run(Input(scale))) ASSERT_TRUE(std::isfinite(v)) << scale;
  }
  for (const float scale : {1e30f, -1e30f}) {
    // Values stay finite (|v| < 3e30); only the scores overflow.
    for (float v : Run(Input(scale))) {
      EXPECT_TRUE(std::isfinite(v) || std::isnan(v)) << v;
    }
  }
  for (float v : Run(Input(FLT_MAX))) EXPECT_NE(v, -7.0f) << "not written";
}

}  // namespace
}  // namespace attn
