// Tests the graph runner's Highway kernels (LayerNorm, RMSNorm, GELU, SiLU,
// add, mul) on every compiled target against scalar double references, at
// widths around the vector length, and the threaded entry points against the
// same references and across thread counts.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/graph_kernels_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/elementwise-inl.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm-inl.h"
#include "kernels/layernorm.h"
#include "kernels/threads.h"
#include "tests/test_util.h"

#ifndef ATTN_TESTS_GRAPH_KERNELS_REFERENCE_
#define ATTN_TESTS_GRAPH_KERNELS_REFERENCE_
namespace attn::test {

// The book's LayerNorm, in double, row by row.
inline std::vector<double> LayerNormReference(const std::vector<float>& x,
                                              const std::vector<float>& scale,
                                              const std::vector<float>& shift,
                                              size_t cols, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    const float* row = x.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (size_t i = 0; i < cols; ++i) mean += row[i];
    mean /= double(cols);
    for (size_t i = 0; i < cols; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= double(cols);
    for (size_t i = 0; i < cols; ++i) {
      y[r * cols + i] =
          scale[i] * (row[i] - mean) / std::sqrt(var + eps) + shift[i];
    }
  }
  return y;
}

// Llama's RMSNorm, in double, row by row.
inline std::vector<double> RmsNormReference(const std::vector<float>& x,
                                            const std::vector<float>& weight,
                                            size_t cols, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    const float* row = x.data() + r * cols;
    double mean_square = 0.0;
    for (size_t i = 0; i < cols; ++i) mean_square += double(row[i]) * row[i];
    mean_square /= double(cols);
    for (size_t i = 0; i < cols; ++i) {
      y[r * cols + i] = row[i] / std::sqrt(mean_square + eps) * weight[i];
    }
  }
  return y;
}

inline double SiluReference(double x) { return x / (1.0 + std::exp(-x)); }

// SiLU's bound: hn::Exp is within 1 ulp, the products, the sum and the
// quotient add half an ulp each at most (2.6 measured, near x = -88).
constexpr double kSiluUlps = 3.0;

// |actual - expected| in units of the spacing of floats at expected (the
// smallest subnormal's, near 0).
inline double UlpDistance(float actual, double expected) {
  const float rounded = static_cast<float>(expected);
  const float spacing =
      std::nextafter(std::abs(rounded), std::numeric_limits<float>::max()) -
      std::abs(rounded);
  return std::abs(double(actual) - expected) / spacing;
}

}  // namespace attn::test
#endif  // ATTN_TESTS_GRAPH_KERNELS_REFERENCE_

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

// Widths around the vector length, and the block's.
std::vector<size_t> Widths() {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  return {1, N - 1 ? N - 1 : 1, N, N + 1, 2 * N + 3, 37, 768};
}

void TestLayerNormMatchesReference() {
  std::mt19937 rng(1);
  for (size_t cols : Widths()) {
    const size_t rows = 3;
    // Mean far from zero: a one-pass E[x^2] - mean^2 would lose digits.
    const auto x = test::RandomVector(rng, rows * cols, 95.f, 105.f);
    const auto scale = test::RandomVector(rng, cols, 0.5f, 1.5f);
    const auto shift = test::RandomVector(rng, cols, -1.f, 1.f);
    // Exactly sized output: the tail must not write past it.
    std::vector<float> y(rows * cols);
    LayerNormRowsT(x.data(), scale.data(), shift.data(), y.data(), rows, cols,
                   1e-5f);
    const auto expected = test::LayerNormReference(x, scale, shift, cols, 1e-5);
    test::ExpectAllClose(expected, y.data(), 1e-5 * test::MaxAbs(expected),
                         "cols " + std::to_string(cols));
  }
}

void TestLayerNormOfConstantRowIsShift() {
  const size_t cols = 19;
  const std::vector<float> x(cols, 3.25f), scale(cols, 2.0f), shift(cols, 0.5f);
  std::vector<float> y(cols);
  LayerNormRowsT(x.data(), scale.data(), shift.data(), y.data(), 1, cols,
                 1e-5f);
  for (float v : y) EXPECT_EQ(v, 0.5f);  // var 0: (x - mean) is exactly 0
}

void TestGeluMatchesReference() {
  std::mt19937 rng(2);
  for (size_t count : Widths()) {
    // Wide range: tanh saturates both ways, and GELU(x) -> 0 for x << 0.
    const auto x = test::RandomVector(rng, count, -12.f, 12.f);
    std::vector<float> y(count);
    GeluT(x.data(), y.data(), count);
    std::vector<double> expected(count);
    for (size_t i = 0; i < count; ++i) expected[i] = test::GeluReference(x[i]);
    test::ExpectAllClose(expected, y.data(),
                         1e-5 * std::max(1.0, test::MaxAbs(expected)),
                         "count " + std::to_string(count));
  }
}

void TestAddIsExact() {
  std::mt19937 rng(3);
  for (size_t count : Widths()) {
    const auto a = test::RandomVector(rng, count, -5.f, 5.f);
    const auto b = test::RandomVector(rng, count, -5.f, 5.f);
    std::vector<float> y(count);
    AddT(a.data(), b.data(), y.data(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(y[i], a[i] + b[i]) << i;
  }
}

void TestRmsNormMatchesReference() {
  std::mt19937 rng(5);
  for (size_t cols : Widths()) {
    const size_t rows = 3;
    const auto x = test::RandomVector(rng, rows * cols, -4.f, 4.f);
    const auto weight = test::RandomVector(rng, cols, 0.5f, 1.5f);
    // Exactly sized output: the tail must not write past it.
    std::vector<float> y(rows * cols);
    RmsNormRowsT(x.data(), weight.data(), y.data(), rows, cols, 1e-5f);
    const auto expected = test::RmsNormReference(x, weight, cols, 1e-5);
    test::ExpectAllClose(expected, y.data(), 1e-5 * test::MaxAbs(expected),
                         "cols " + std::to_string(cols));
  }
}

void TestRmsNormInPlaceMatchesOutOfPlace() {
  std::mt19937 rng(6);
  const size_t rows = 2, cols = 45;
  auto x = test::RandomVector(rng, rows * cols, -4.f, 4.f);
  const auto weight = test::RandomVector(rng, cols, 0.5f, 1.5f);
  std::vector<float> y(rows * cols);
  RmsNormRowsT(x.data(), weight.data(), y.data(), rows, cols, 1e-6f);
  RmsNormRowsT(x.data(), weight.data(), x.data(), rows, cols, 1e-6f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << i;
}

// Every float step of 2^-9 over [-90, 90], whose tails reach exp(-90), a
// subnormal: x exp(x) must still be accurate there.
void TestSiluWithinFewUlp() {
  std::vector<float> x;
  for (float v = -90.0f; v <= 90.0f; v += 1.0f / 512) x.push_back(v);
  std::vector<float> y(x.size());
  SiluT(x.data(), y.data(), x.size());
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ulps = test::UlpDistance(y[i], test::SiluReference(x[i]));
    if (!(ulps <= worst)) worst = ulps, worst_at = i;
  }
  EXPECT_LE(worst, test::kSiluUlps)
      << "at x = " << x[worst_at] << ": " << y[worst_at];
}

void TestSiluLimits() {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -1e30f, -300.f, -150.f, -0.0f,
                                0.0f, 105.f,  1e30f,  inf,    std::nanf("")};
  std::vector<float> y(x.size());
  SiluT(x.data(), y.data(), x.size());
  for (size_t i = 0; i < 4; ++i) {  // underflows to -0, never NaN
    EXPECT_EQ(y[i], 0.0f) << x[i];
    EXPECT_TRUE(std::signbit(y[i])) << x[i];
  }
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 0.0f);
  for (size_t i = 6; i < 9; ++i) EXPECT_EQ(y[i], x[i]);  // sigmoid -> 1
  EXPECT_TRUE(std::isnan(y[9]));
}

void TestSiluMatchesReferenceAtWidths() {
  std::mt19937 rng(7);
  for (size_t count : Widths()) {
    const auto x = test::RandomVector(rng, count, -20.f, 20.f);
    std::vector<float> y(count);  // exactly sized: no write past it
    SiluT(x.data(), y.data(), count);
    for (size_t i = 0; i < count; ++i) {
      EXPECT_LE(test::UlpDistance(y[i], test::SiluReference(x[i])),
                test::kSiluUlps)
          << x[i];
    }
  }
}

void TestMulIsExact() {
  std::mt19937 rng(8);
  for (size_t count : Widths()) {
    const auto a = test::RandomVector(rng, count, -5.f, 5.f);
    const auto b = test::RandomVector(rng, count, -5.f, 5.f);
    std::vector<float> y(count);
    MulT(a.data(), b.data(), y.data(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(y[i], a[i] * b[i]) << i;
  }
}

}  // namespace
}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {
namespace {
HWY_BEFORE_TEST(GraphKernelsTest);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestLayerNormMatchesReference);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestLayerNormOfConstantRowIsShift);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestGeluMatchesReference);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestAddIsExact);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestRmsNormMatchesReference);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestRmsNormInPlaceMatchesOutOfPlace);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestSiluWithinFewUlp);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestSiluLimits);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestSiluMatchesReferenceAtWidths);
HWY_EXPORT_AND_TEST_P(GraphKernelsTest, TestMulIsExact);

// The dispatched, threaded entry points: same results for 1 and 3 threads
// (37 rows of 1000: three row blocks and element chunks).
TEST(GraphKernelsDispatchTest, ThreadedEntryPointsMatchReference) {
  std::mt19937 rng(4);
  const size_t rows = 37, cols = 1000;
  ASSERT_GT(rows * cols, 2 * kParallelGrainFloats);
  const auto x = test::RandomVector(rng, rows * cols, -3.f, 3.f);
  const auto b = test::RandomVector(rng, rows * cols, -3.f, 3.f);
  const auto scale = test::RandomVector(rng, cols, 0.5f, 1.5f);
  const auto shift = test::RandomVector(rng, cols, -1.f, 1.f);
  const auto ln = test::LayerNormReference(x, scale, shift, cols, 1e-5);
  std::vector<double> gelu(x.size());
  for (size_t i = 0; i < x.size(); ++i) gelu[i] = test::GeluReference(x[i]);
  for (int threads : {1, 3}) {
    std::vector<float> y(x.size());
    LayerNorm(x.data(), scale.data(), shift.data(), y.data(), rows, cols, 1e-5f,
              threads);
    test::ExpectAllClose(ln, y.data(), 1e-5 * test::MaxAbs(ln), "layernorm");
    Gelu(x.data(), y.data(), x.size(), threads);
    test::ExpectAllClose(gelu, y.data(), 1e-5 * test::MaxAbs(gelu), "gelu");
    Add(x.data(), b.data(), y.data(), x.size(), threads);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] + b[i]);
  }
}

// Llama's kernels through the dispatched, threaded entry points: the
// reference's values, and the same bits for 1, 2 and 3 threads (37 rows of
// 1000: three row blocks and element chunks).
TEST(GraphKernelsDispatchTest, LlamaKernelsMatchReferenceAndThreadCounts) {
  std::mt19937 rng(9);
  const size_t rows = 37, cols = 1000;
  ASSERT_GT(rows * cols, 2 * kParallelGrainFloats);
  const auto x = test::RandomVector(rng, rows * cols, -6.f, 6.f);
  const auto b = test::RandomVector(rng, rows * cols, -3.f, 3.f);
  const auto weight = test::RandomVector(rng, cols, 0.5f, 1.5f);
  const auto rms = test::RmsNormReference(x, weight, cols, 1e-5);
  std::vector<float> rms1, silu1, mul1;
  for (int threads : {1, 2, 3}) {
    std::vector<float> y_rms(x.size()), y_silu(x.size()), y_mul(x.size());
    RmsNorm(x.data(), weight.data(), y_rms.data(), rows, cols, 1e-5f, threads);
    test::ExpectAllClose(rms, y_rms.data(), 1e-5 * test::MaxAbs(rms), "rms");
    Silu(x.data(), y_silu.data(), x.size(), threads);
    Mul(x.data(), b.data(), y_mul.data(), x.size(), threads);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(test::UlpDistance(y_silu[i], test::SiluReference(x[i])),
                test::kSiluUlps);
      ASSERT_EQ(y_mul[i], x[i] * b[i]);
    }
    if (threads == 1) {
      rms1 = y_rms, silu1 = y_silu, mul1 = y_mul;
      continue;
    }
    EXPECT_EQ(y_rms, rms1) << threads << " threads";
    EXPECT_EQ(y_silu, silu1) << threads << " threads";
    EXPECT_EQ(y_mul, mul1) << threads << " threads";
  }
}

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
