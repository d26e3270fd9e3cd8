// Tests the rotary position embeddings: the inverse frequencies (plain and
// Llama 3.1-scaled) against the formula in double and against PyTorch, the
// cos/sin table, and the rotation on every compiled Highway target against
// a double reference, then through the dispatched and threaded entry points.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/rope_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/rope-inl.h"
#include "kernels/rope.h"
#include "kernels/threads.h"
#include "tests/test_util.h"

#ifndef ATTN_TESTS_ROPE_REFERENCE_
#define ATTN_TESTS_ROPE_REFERENCE_
namespace attn::test {

// A layout with gaps between heads and between rows, which the kernel must
// leave alone.
struct RopeLayout {
  size_t head_dim, num_heads, num_rows;
  size_t head_stride() const { return head_dim + 3; }
  size_t row_stride() const { return num_heads * head_stride() + 5; }
  size_t floats() const { return num_rows * row_stride(); }
  kernels::RopeRows Rows(float* data) const {
    return {data, num_rows, row_stride(), num_heads, head_stride()};
  }
};

// The rotate-half rotation in double, with the table's cos and sin.
inline std::vector<double> RopeReference(const kernels::RopeTable& table,
                                         const RopeLayout& layout,
                                         const std::vector<float>& x,
                                         const std::vector<int64_t>& pos) {
  std::vector<double> y(x.begin(), x.end());
  const size_t half = layout.head_dim / 2;
  for (size_t r = 0; r < layout.num_rows; ++r) {
    const float* cos = table.cos(pos[r]);
    const float* sin = table.sin(pos[r]);
    for (size_t h = 0; h < layout.num_heads; ++h) {
      const size_t at = r * layout.row_stride() + h * layout.head_stride();
      for (size_t i = 0; i < half; ++i) {
        const double a = x[at + i], b = x[at + half + i];
        y[at + i] = a * cos[i] - b * sin[i];
        y[at + half + i] = b * cos[i] + a * sin[i];
      }
    }
  }
  return y;
}

// Positions out of order, with repeats and gaps, all below max_positions.
inline std::vector<int64_t> ScatteredPositions(size_t n, int64_t max) {
  std::vector<int64_t> pos(n);
  for (size_t r = 0; r < n; ++r) pos[r] = int64_t(r * 37 + 11) % max;
  return pos;
}

}  // namespace attn::test
#endif  // ATTN_TESTS_ROPE_REFERENCE_

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

void TestRotationMatchesReference() {
  std::mt19937 rng(1);
  const RopeConfig config{500000.0f, 32.0f, 1.0f, 4.0f, 8192};
  for (size_t head_dim : {2, 8, 64, 80, 128}) {
    const auto table = RopeTable::Create(config, int64_t(head_dim), 100);
    ASSERT_TRUE(table.ok()) << table.status().message();
    for (size_t num_heads : {1, 3, 5}) {
      const test::RopeLayout layout{head_dim, num_heads, 7};
      auto x = test::RandomVector(rng, layout.floats(), -2.f, 2.f);
      const auto pos = test::ScatteredPositions(layout.num_rows, 100);
      const auto expected = test::RopeReference(*table, layout, x, pos);
      RopeRowsT(*table, layout.Rows(x.data()), pos.data(), 0);
      // Each output is two products and a sum of values below 2.
      test::ExpectAllClose(expected, x.data(), 4e-7,
                           "head_dim " + std::to_string(head_dim) + ", heads " +
                               std::to_string(num_heads));
    }
  }
}

void TestPositionZeroIsIdentity() {
  const auto table = RopeTable::Create(RopeConfig{}, 80, 1);
  ASSERT_TRUE(table.ok());
  std::mt19937 rng(2);
  const test::RopeLayout layout{80, 3, 1};
  const auto x = test::RandomVector(rng, layout.floats(), -2.f, 2.f);
  auto y = x;
  const int64_t zero = 0;
  RopeRowsT(*table, layout.Rows(y.data()), &zero, 0);
  EXPECT_EQ(y, x);  // cos 0 = 1, sin 0 = 0: every value and gap unchanged
}

}  // namespace
}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {
namespace {
HWY_BEFORE_TEST(RopeKernelTest);
HWY_EXPORT_AND_TEST_P(RopeKernelTest, TestRotationMatchesReference);
HWY_EXPORT_AND_TEST_P(RopeKernelTest, TestPositionZeroIsIdentity);

// 1 / theta^(2i / head_dim) in double, then Llama 3.1's scaling.
std::vector<double> InverseFrequenciesInDouble(const RopeConfig& c,
                                               int64_t head_dim) {
  std::vector<double> inv(size_t(head_dim / 2));
  const double low_wavelen =
                   double(c.original_context_length) / c.low_freq_factor,
               high_wavelen =
                   double(c.original_context_length) / c.high_freq_factor;
  const bool scaled = c.factor > 0 && c.factor != 1;
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = 1.0 / std::pow(double(c.theta), 2.0 * double(i) / head_dim);
    const double wavelen = 2 * M_PI / inv[i];
    if (!scaled || wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      inv[i] /= c.factor;
      continue;
    }
    const double smooth =
        (c.original_context_length / wavelen - c.low_freq_factor) /
        (c.high_freq_factor - c.low_freq_factor);
    inv[i] = (1 - smooth) * inv[i] / c.factor + smooth * inv[i];
  }
  return inv;
}

TEST(RopeTableTest, InverseFrequenciesMatchFormula) {
  for (const RopeConfig config :
       {RopeConfig{10000.0f}, RopeConfig{500000.0f},
        RopeConfig{500000.0f, 32.0f, 1.0f, 4.0f, 8192},
        RopeConfig{500000.0f, 8.0f, 1.0f, 4.0f, 8192}}) {
    for (int64_t head_dim : {2, 8, 64, 80, 128}) {
      const auto got = RopeInverseFrequencies(config, head_dim);
      const auto want = InverseFrequenciesInDouble(config, head_dim);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        // float32 arithmetic: 2i / head_dim rounded to float moves the
        // power by up to ln(theta) 2^-24 relative, and in the blended band
        // the float smooth factor, a few roundings, adds 11 ulp at most.
        const double tol = 16 * std::numeric_limits<float>::epsilon() * want[i];
        EXPECT_NEAR(got[i], want[i], tol)
            << "theta " << config.theta << " factor " << config.factor
            << " head_dim " << head_dim << " i " << i;
      }
    }
  }
}

// Printed by PyTorch 1.13 (float32), for theta 500000, head_dim 64 and
// Llama 3.1's factor 32, low 1, high 4, original 8192, with HF's
// _compute_llama3_parameters applied to
//   inv = 1.0 / (500000.0 ** (torch.arange(0, 64, 2).float() / 64))
// Indices 0 and 10 are kept, 15 to 17 blended, 18 and 31 divided by 32.
TEST(RopeTableTest, ScaledInverseFrequenciesMatchPyTorch) {
  const RopeConfig config{500000.0f, 32.0f, 1.0f, 4.0f, 8192};
  const auto got = RopeInverseFrequencies(config, 64);
  const std::vector<std::pair<size_t, float>> torch = {
      {0, 1.0f},
      {10, 0.016560440883040428f},
      {15, 0.0012905480107292533f},
      {16, 0.000429556705057621f},
      {17, 9.708286233944818e-05f},
      {18, 1.9461638657958247e-05f},
      {31, 9.418306490260875e-08f}};
  // The same float32 operations in the same order: the same bits.
  for (const auto& [i, want] : torch) EXPECT_EQ(got[i], want) << "i " << i;
}

TEST(RopeTableTest, HoldsCosAndSinOfFloat32Angles) {
  const RopeConfig config{10000.0f};
  const auto table = RopeTable::Create(config, 64, 300);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->bytes(), 300u * 64 * sizeof(float));
  EXPECT_EQ(RopeTable::BytesFor(64, 300), table->bytes());
  const auto inv = RopeInverseFrequencies(config, 64);
  for (int64_t p : {0, 1, 17, 299}) {
    for (size_t i = 0; i < inv.size(); ++i) {
      const double angle = float(p) * inv[i];  // the float32 product
      EXPECT_NEAR(table->cos(p)[i], std::cos(angle), 1.2e-7) << p << " " << i;
      EXPECT_NEAR(table->sin(p)[i], std::sin(angle), 1.2e-7) << p << " " << i;
    }
  }
}

TEST(RopeTableTest, FactorOneIsNoScaling) {
  const auto plain = RopeInverseFrequencies(RopeConfig{500000.0f}, 128);
  const auto one = RopeInverseFrequencies(RopeConfig{500000.0f, 1.0f}, 128);
  EXPECT_EQ(plain, one);
}

TEST(RopeTableTest, RefusesBadShapesAndConfigs) {
  const RopeConfig ok{};
  EXPECT_FALSE(RopeTable::Create(ok, 7, 10).ok());  // odd head_dim
  EXPECT_FALSE(RopeTable::Create(ok, 0, 10).ok());  // no head_dim
  EXPECT_FALSE(RopeTable::Create(ok, 64, 0).ok());  // no positions
  EXPECT_FALSE(RopeTable::Create(ok, 64, int64_t(1) << 62).ok());  // too big
  EXPECT_FALSE(RopeTable::Create(RopeConfig{0.0f}, 64, 10).ok());
  EXPECT_FALSE(RopeTable::Create(RopeConfig{NAN}, 64, 10).ok());
  EXPECT_FALSE(RopeTable::Create(RopeConfig{1e4f, NAN}, 64, 10).ok());
  // Scaling with low >= high, or no original context.
  EXPECT_FALSE(
      RopeTable::Create(RopeConfig{1e4f, 8.0f, 4.0f, 4.0f, 8192}, 64, 10).ok());
  EXPECT_FALSE(
      RopeTable::Create(RopeConfig{1e4f, 8.0f, 1.0f, 4.0f, 0}, 64, 10).ok());
  const auto odd = RopeTable::Create(ok, 7, 10);
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("head_dim is 7"), std::string::npos)
      << odd.status().message();
  EXPECT_EQ(RopeTable::BytesFor(7, 10), 0u);
}

// The dispatched entry points: the reference's values; consecutive
// positions the same as the explicit ones; and the threaded form the same
// bits at 1, 2 and 3 threads (61 rows of 5 heads: three blocks).
TEST(RopeDispatchTest, EntryPointsMatchReferenceAndThreadCounts) {
  std::mt19937 rng(3);
  const auto table = RopeTable::Create(RopeConfig{500000.0f}, 128, 4096);
  ASSERT_TRUE(table.ok());
  const test::RopeLayout layout{128, 5, 61};
  ASSERT_GT(layout.floats(), 2 * kParallelGrainFloats);
  const auto x = test::RandomVector(rng, layout.floats(), -2.f, 2.f);
  const auto pos = test::ScatteredPositions(layout.num_rows, 4096);
  const auto expected = test::RopeReference(*table, layout, x, pos);

  auto single = x;
  ApplyRope(*table, layout.Rows(single.data()), pos.data());
  test::ExpectAllClose(expected, single.data(), 4e-7, "single-threaded");
  for (int threads : {1, 2, 3}) {
    auto y = x;
    ApplyRope(*table, layout.Rows(y.data()), pos.data(), threads);
    EXPECT_EQ(y, single) << threads << " threads";
  }

  std::vector<int64_t> consecutive(layout.num_rows);
  for (size_t r = 0; r < consecutive.size(); ++r) consecutive[r] = 1000 + r;
  auto by_list = x, by_start = x;
  ApplyRope(*table, layout.Rows(by_list.data()), consecutive.data());
  ApplyRope(*table, layout.Rows(by_start.data()), int64_t{1000});
  EXPECT_EQ(by_start, by_list);
}

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
