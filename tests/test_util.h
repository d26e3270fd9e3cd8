// Helpers shared by the tests: seeded random data, the book's GELU in
// double, and closeness checks that report the worst element rather than
// dumping whole tensors.
#ifndef ATTN_TESTS_TEST_UTIL_H_
#define ATTN_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

namespace attn::test {

inline std::vector<float> RandomVector(std::mt19937& rng, size_t n, float lo,
                                       float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The book's tanh GELU.
inline double GeluReference(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Expects |actual[i] - expected[i]| <= abs_tol for every i; on failure names
// the worst index, both values and `what`.
template <class A, class E>
void ExpectAllClose(const std::vector<E>& expected, const A* actual,
                    double abs_tol, const std::string& what) {
  size_t worst = 0;
  double worst_err = -1.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double err = std::abs(double(actual[i]) - double(expected[i]));
    if (!(err <= worst_err) || std::isnan(err)) {
      worst_err = std::isnan(err) ? INFINITY : err;
      worst = i;
    }
  }
  EXPECT_LE(worst_err, abs_tol)
      << what << ": worst element " << worst << " expected " << expected[worst]
      << " got " << actual[worst];
}

// Largest |a[i] - b[i]|.
template <class T>
double MaxAbsDiff(const std::vector<T>& a, const std::vector<T>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  }
  return m;
}

// Largest |x| in v.
template <class T>
double MaxAbs(const std::vector<T>& v) {
  double m = 0.0;
  for (const T& x : v) m = std::max(m, std::abs(double(x)));
  return m;
}

}  // namespace attn::test

#endif  // ATTN_TESTS_TEST_UTIL_H_
