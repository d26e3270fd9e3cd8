// RowsLinear (a decode step's projections) on every compiled Highway target
// against a double reference, at rows 1 to 8 and widths around the vector
// length and the column group; and the threaded entry point, bitwise the
// same at 1, 2, 3 and 7 threads.
#include <cstring>
#include <random>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/rows_linear_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/rows_linear-inl.h"
#include "kernels/rows_linear.h"
#include "tests/test_util.h"

#ifndef ATTN_TESTS_ROWS_LINEAR_REFERENCE_
#define ATTN_TESTS_ROWS_LINEAR_REFERENCE_
namespace attn::test {

// y[r, j] = bias[j] + sum_i x[r, i] w[j, i], in double.
inline std::vector<double> RowsLinearReference(const std::vector<float>& x,
                                               size_t rows, size_t k,
                                               const std::vector<float>& w,
                                               const float* bias, size_t n) {
  std::vector<double> y(rows * n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (size_t i = 0; i < k; ++i) acc += double(x[r * k + i]) * w[j * k + i];
      y[r * n + j] = acc;
    }
  }
  return y;
}

}  // namespace attn::test
#endif  // ATTN_TESTS_ROWS_LINEAR_REFERENCE_

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

void TestRowsLinearMatchesReference() {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  std::mt19937 rng(7);
  for (size_t rows : {size_t{1}, size_t{2}, size_t{3}, kRowsLinearMaxRows}) {
    // 769 and 1539 cross the by-column path's blocks of k (768) with a tail.
    for (size_t k : {size_t{1}, N - 1 ? N - 1 : 1, N, N + 1, 3 * N + 2,
                     size_t{64}, size_t{769}, size_t{1539}}) {
      for (size_t n : {size_t{1}, size_t{3}, size_t{5}, size_t{9}}) {
        const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
        const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
        const auto b = test::RandomVector(rng, n, -1.f, 1.f);
        for (const float* bias :
             {b.data(), static_cast<const float*>(nullptr)}) {
          // Exactly sized: the kernel must not read past x or w, nor
          // write past y (ASan in CI).
          std::vector<float> y(rows * n);
          RowsLinearT(d, x.data(), rows, k, w.data(), bias, n, 0, n, y.data());
          test::ExpectAllClose(
              test::RowsLinearReference(x, rows, k, w, bias, n), y.data(),
              1e-5 * double(k + 1), "rows_linear");
        }
      }
    }
  }
}

// Every tile sums each output over k in the same order: a row's outputs
// are the same bits whether it runs alone or among 2..8 rows.
void TestRowsLinearBitsDoNotDependOnRows() {
  const hn::ScalableTag<float> d;
  std::mt19937 rng(9);
  const size_t k = 1539, n = 13;
  const auto x = test::RandomVector(rng, kRowsLinearMaxRows * k, -1.f, 1.f);
  const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
  std::vector<float> alone(n), all(kRowsLinearMaxRows * n);
  for (size_t rows = 2; rows <= kRowsLinearMaxRows; ++rows) {
    RowsLinearT(d, x.data(), rows, k, w.data(), nullptr, n, 0, n, all.data());
    for (size_t r = 0; r < rows; ++r) {
      RowsLinearT(d, x.data() + r * k, 1, k, w.data(), nullptr, n, 0, n,
                  alone.data());
      for (size_t j = 0; j < n; ++j) {
        ASSERT_EQ(alone[j], all[r * n + j]) << rows << " rows, row " << r;
      }
    }
  }
}

// A column range in the middle writes exactly its columns.
void TestRowsLinearWritesOnlyItsColumns() {
  const hn::ScalableTag<float> d;
  std::mt19937 rng(8);
  const size_t rows = 2, k = 19, n = 11;
  const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
  const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
  const auto full = test::RowsLinearReference(x, rows, k, w, nullptr, n);
  std::vector<float> y(rows * n, -7.0f);
  RowsLinearT(d, x.data(), rows, k, w.data(), nullptr, n, 3, 9, y.data());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      if (j >= 3 && j < 9) {
        EXPECT_NEAR(y[r * n + j], full[r * n + j], 1e-4);
      } else {
        EXPECT_EQ(y[r * n + j], -7.0f) << r << ", " << j;
      }
    }
  }
}

}  // namespace
}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {
namespace {

HWY_BEFORE_TEST(RowsLinearTest);
HWY_EXPORT_AND_TEST_P(RowsLinearTest, TestRowsLinearMatchesReference);
HWY_EXPORT_AND_TEST_P(RowsLinearTest, TestRowsLinearWritesOnlyItsColumns);
HWY_EXPORT_AND_TEST_P(RowsLinearTest, TestRowsLinearBitsDoNotDependOnRows);

// The dispatched entry point spreads columns over threads: the same bits at
// every team size, and the reference's values.
TEST(RowsLinearDispatchTest, SameBitsAtEveryThreadCount) {
  std::mt19937 rng(9);
  const size_t rows = 5, k = 300, n = 1001;
  const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
  const auto w = test::RandomVector(rng, n * k, -0.2f, 0.2f);
  const auto b = test::RandomVector(rng, n, -1.f, 1.f);
  std::vector<float> one(rows * n);
  RowsLinear(x.data(), rows, k, w.data(), b.data(), n, one.data(), 1);
  test::ExpectAllClose(test::RowsLinearReference(x, rows, k, w, b.data(), n),
                       one.data(), 1e-4, "1 thread");
  for (int threads : {2, 3, 7}) {
    std::vector<float> many(rows * n);
    RowsLinear(x.data(), rows, k, w.data(), b.data(), n, many.data(), threads);
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * 4))
        << threads << " threads differ from 1";
  }
}

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
