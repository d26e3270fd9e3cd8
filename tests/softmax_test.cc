// Tests the causal softmax on every compiled Highway target against the
// scalar reference: lengths around the vector width, every causal prefix,
// fully masked rows, huge logits, NaN and Inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/softmax_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/softmax-inl.h"
#include "tests/reference.h"
#include "tests/test_util.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs the per-target tile loop on one row of `x` with `valid` keys.
std::vector<float> SoftmaxRow(std::vector<float> x, size_t valid, float scale) {
  CausalSoftmaxT<true>(x.data(), 1, x.size(), x.size(),
                       static_cast<ptrdiff_t>(valid) - 1, scale, x.data(),
                       x.size());
  return x;
}

void TestMatchesReferenceForEveryPrefix() {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  std::mt19937 rng(1);
  for (size_t cols :
       {size_t{1}, N - 1, N, N + 1, 2 * N, 3 * N + 2, size_t{257}}) {
    if (cols == 0) continue;
    for (size_t valid = 0; valid <= cols; ++valid) {
      // Values in [90, 100]: exp overflows unless the max is subtracted.
      const std::vector<float> x = test::RandomVector(rng, cols, 90.f, 100.f);
      const std::vector<double> expected =
          reference::CausalSoftmaxRow(x, valid, 0.7);
      const std::vector<float> actual = SoftmaxRow(x, valid, 0.7f);
      test::ExpectAllClose(
          expected, actual.data(), 1e-6,
          "cols " + std::to_string(cols) + " valid " + std::to_string(valid));
    }
  }
}

void TestTileRowsFollowTheDiagonal() {
  std::mt19937 rng(2);
  const size_t rows = 19, cols = 37, stride = 41;
  for (ptrdiff_t diagonal : {-3, 0, 5, 18, 40}) {
    std::vector<float> tile = test::RandomVector(rng, rows * stride, -5.f, 5.f);
    const std::vector<float> before = tile;
    CausalSoftmaxT<true>(tile.data(), rows, cols, stride, diagonal, 0.25f,
                         tile.data(), stride);
    for (size_t r = 0; r < rows; ++r) {
      const ptrdiff_t valid = std::clamp<ptrdiff_t>(
          static_cast<ptrdiff_t>(r) + diagonal + 1, 0, cols);
      const std::vector<float> row(before.begin() + r * stride,
                                   before.begin() + r * stride + cols);
      test::ExpectAllClose(
          reference::CausalSoftmaxRow(row, static_cast<size_t>(valid), 0.25),
          tile.data() + r * stride, 1e-6, "row " + std::to_string(r));
      // Padding between rows is untouched.
      for (size_t c = cols; c < stride && r * stride + c < tile.size(); ++c) {
        EXPECT_EQ(tile[r * stride + c], before[r * stride + c]);
      }
    }
  }
}

void TestFullyMaskedRowsAreZero() {
  for (size_t cols : {size_t{1}, size_t{7}, size_t{64}}) {
    std::vector<float> x(cols, -kInf);
    for (float v : SoftmaxRow(x, cols, 1.0f)) EXPECT_EQ(v, 0.0f);
    x.assign(cols, 3.0f);
    for (float v : SoftmaxRow(x, 0, 1.0f)) EXPECT_EQ(v, 0.0f);
  }
}

void TestHugeAndEqualLogits() {
  for (size_t cols : {size_t{5}, size_t{33}}) {
    // ±1e30: finite inputs always give a finite, normalised row.
    std::vector<float> x(cols);
    for (size_t i = 0; i < cols; ++i) x[i] = (i % 2 ? 1e30f : -1e30f);
    const std::vector<float> p = SoftmaxRow(x, cols, 1.0f);
    test::ExpectAllClose(reference::CausalSoftmaxRow(x, cols, 1.0), p.data(),
                         1e-6, "huge logits");
    // All equal: uniform.
    const std::vector<float> u =
        SoftmaxRow(std::vector<float>(cols, 1e30f), cols, 1.0f);
    for (float v : u) EXPECT_FLOAT_EQ(v, 1.0f / float(cols));
  }
}

void TestNonFiniteScoresGiveNaNLikePyTorch() {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
    std::vector<float> x = {0.5f, bad, 1.0f, 2.0f, 7.0f};
    std::vector<float> p = SoftmaxRow(x, 3, 1.0f);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(p[i])) << i;
    EXPECT_EQ(p[3], 0.0f);
    EXPECT_EQ(p[4], 0.0f);
    // A non-finite score beyond the causal prefix is never looked at.
    p = SoftmaxRow(x, 1, 1.0f);
    EXPECT_EQ(p[0], 1.0f);
  }
  // NaN wins over a row that is otherwise empty of finite scores.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::vector<float>& row :
       {std::vector<float>{nan, nan}, std::vector<float>{-kInf, nan, -kInf}}) {
    for (float v : SoftmaxRow(row, row.size(), 1.0f))
      EXPECT_TRUE(std::isnan(v));
  }
  // -inf among finite scores is just a zero probability.
  const std::vector<float> p = SoftmaxRow({-kInf, 0.0f, 0.0f}, 3, 1.0f);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_FLOAT_EQ(p[1], 0.5f);
}

// The split softmax of the attention core: exp values, then rows scaled by
// their factor, against the reference softmax; padding stays untouched.
void TestUnnormalizedRowsScaleToTheSoftmax() {
  std::mt19937 rng(4);
  const size_t rows = 23, stride = 53, out_stride = 61;
  for (size_t cols : {size_t{1}, size_t{17}, size_t{50}}) {
    for (ptrdiff_t diagonal : {-4, 0, 9, 49}) {
      std::vector<float> tile =
          test::RandomVector(rng, rows * stride, 60.f, 70.f);
      const std::vector<float> before = tile;
      std::vector<float> row_scale(rows, -1.0f);
      CausalSoftmaxT<false>(tile.data(), rows, cols, stride, diagonal, 0.3f,
                            tile.data(), stride, row_scale.data());
      // ScaleRowsT takes dense rows.
      std::vector<float> dense(rows * cols);
      for (size_t r = 0; r < rows; ++r) {
        std::copy_n(tile.begin() + r * stride, cols, dense.begin() + r * cols);
      }
      std::vector<float> out(rows * out_stride, 42.0f);
      ScaleRowsT(dense.data(), rows, cols, row_scale.data(), out.data(),
                 out_stride);
      for (size_t r = 0; r < rows; ++r) {
        const ptrdiff_t valid = std::clamp<ptrdiff_t>(
            static_cast<ptrdiff_t>(r) + diagonal + 1, 0, cols);
        const std::vector<float> row(before.begin() + r * stride,
                                     before.begin() + r * stride + cols);
        const std::string where = "cols " + std::to_string(cols) +
                                  " diagonal " + std::to_string(diagonal) +
                                  " row " + std::to_string(r);
        test::ExpectAllClose(
            reference::CausalSoftmaxRow(row, static_cast<size_t>(valid), 0.3),
            out.data() + r * out_stride, 1e-6, where);
        if (valid == 0) {
          EXPECT_EQ(row_scale[r], 1.0f) << where;
        }
        for (size_t c = cols; c < out_stride && r * out_stride + c < out.size();
             ++c) {
          EXPECT_EQ(out[r * out_stride + c], 42.0f) << where;
        }
        for (size_t c = cols; c < stride && r * stride + c < tile.size(); ++c) {
          EXPECT_EQ(tile[r * stride + c], before[r * stride + c]) << where;
        }
      }
    }
  }
}

// NaN and +inf rows are final before scaling (factor 1), like masked rows.
void TestUnnormalizedNonFiniteRowsHaveFactorOne() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> tile = {0.5f, nan,   2.0f,  1.0f, kInf,
                             3.0f, -kInf, -kInf, 1.0f};
  std::vector<float> row_scale(3);
  // The rows see 2, 3 and 3 keys: rows 0 and 1 hold a non-finite score,
  // row 2 a -inf prefix and one finite score.
  CausalSoftmaxT<false>(tile.data(), 3, 3, 3, 1, 1.0f, tile.data(), 3,
                        row_scale.data());
  for (size_t r : {0, 1}) {
    EXPECT_EQ(row_scale[r], 1.0f);
    for (size_t c = 0; c < 2; ++c) EXPECT_TRUE(std::isnan(tile[r * 3 + c]));
  }
  EXPECT_EQ(tile[2], 0.0f);  // masked
  EXPECT_TRUE(std::isnan(tile[5]));
  EXPECT_EQ(tile[6], 0.0f);
  EXPECT_EQ(tile[7], 0.0f);
  EXPECT_EQ(tile[8], 1.0f);
  EXPECT_EQ(row_scale[2], 1.0f);
}

// bf16 results are rounded to nearest, both the exp values and the scaled
// rows: within half a bf16 ulp (2^-8 relative) plus fp32 error; nothing is
// written past the row.
void TestBF16OutputsRoundToNearest() {
  std::mt19937 rng(3);
  // On every target: pairs of vectors, one vector, a tail, masked zeros.
  const size_t cols = 100, valid = 93;
  const size_t padded = cols + 40;  // sentinels after the row
  const auto sentinel = hwy::BF16FromF32(42.0f);
  auto untouched_after_row = [&](const std::vector<hwy::bfloat16_t>& v) {
    for (size_t i = cols; i < padded; ++i) {
      EXPECT_EQ(v[i].bits, sentinel.bits) << "past the row at " << i;
    }
  };
  const float scale = 1.0f;
  std::vector<float> x = test::RandomVector(rng, cols, -4.f, 4.f);
  const float max = *std::max_element(x.begin(), x.begin() + valid);
  std::vector<double> expected_exp(cols, 0.0);
  for (size_t i = 0; i < valid; ++i) {
    expected_exp[i] = std::exp(double(scale) * (double(x[i]) - max));
  }
  std::vector<hwy::bfloat16_t> probs(padded, sentinel);
  float row_scale = 0.0f;
  CausalSoftmaxT<false>(x.data(), 1, cols, cols, valid - 1, scale, probs.data(),
                        cols, &row_scale);
  double sum = 0.0;
  for (size_t i = 0; i < cols; ++i) {
    const double got = hwy::F32FromBF16(probs[i]);
    EXPECT_LE(std::abs(got - expected_exp[i]),
              expected_exp[i] * (1.0 / 256) + 1e-7)
        << i;
    sum += expected_exp[i];
  }
  EXPECT_NEAR(row_scale, 1.0 / sum, 1e-6 / sum);
  untouched_after_row(probs);

  const std::vector<float> src = test::RandomVector(rng, cols, -3.f, 3.f);
  const float factor = 0.37f;
  std::vector<hwy::bfloat16_t> scaled(padded, sentinel);
  ScaleRowsT(src.data(), 1, cols, &factor, scaled.data(), cols);
  for (size_t i = 0; i < cols; ++i) {
    const double want = double(src[i]) * factor;
    EXPECT_LE(std::abs(hwy::F32FromBF16(scaled[i]) - want),
              std::abs(want) * (1.0 / 256) + 1e-7)
        << i;
  }
  untouched_after_row(scaled);
}

}  // namespace
}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {
namespace {
HWY_BEFORE_TEST(SoftmaxTest);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestMatchesReferenceForEveryPrefix);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestTileRowsFollowTheDiagonal);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestFullyMaskedRowsAreZero);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestHugeAndEqualLogits);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestNonFiniteScoresGiveNaNLikePyTorch);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestUnnormalizedRowsScaleToTheSoftmax);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestUnnormalizedNonFiniteRowsHaveFactorOne);
HWY_EXPORT_AND_TEST_P(SoftmaxTest, TestBF16OutputsRoundToNearest);
}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
