// Tests the graph runner's Highway kernels (LayerNorm, GELU, add) on every
// compiled target against scalar double references, at widths around the
// vector length, and the threaded entry points against the same references.
#include <cmath>
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

inline double GeluReference(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
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

// The dispatched, threaded entry points: same results for 1 and 3 threads.
TEST(GraphKernelsDispatchTest, ThreadedEntryPointsMatchReference) {
  std::mt19937 rng(4);
  const size_t rows = 37, cols = 100;
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

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
