// RowsLinear (a decode step's projections) on every compiled Highway target
// against a double reference, at rows 1 to 8 and widths around the vector
// length and the panel; bf16 weights bitwise the f32 path on the widened
// weights; GELU on the way out; the panels' layout; and the threaded entry
// points, bitwise the same at 1, 2, 3 and 7 threads and in a team smaller
// than asked.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/rows_linear_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/elementwise-inl.h"
#include "kernels/elementwise.h"
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

// w [n, k] packed for RowsLinear, in a buffer of exactly its size.
template <typename T>
std::vector<T> Packed(const std::vector<T>& w, size_t n, size_t k) {
  std::vector<T> packed(kernels::RowsLinearPackedSize<T>(n, k));
  kernels::PackRowsLinear(w.data(), n, k, packed.data(), 1);
  return packed;
}

// Rounds w to bf16: the bf16 weights and their exact f32 widening.
inline std::pair<std::vector<hwy::bfloat16_t>, std::vector<float>> ToBF16(
    const std::vector<float>& w) {
  std::pair<std::vector<hwy::bfloat16_t>, std::vector<float>> out;
  for (float v : w) {
    out.first.push_back(hwy::BF16FromF32(v));
    out.second.push_back(hwy::F32FromBF16(out.first.back()));
  }
  return out;
}

}  // namespace attn::test
#endif  // ATTN_TESTS_ROWS_LINEAR_REFERENCE_

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

// Every work unit of y for w [n, k], packed here. One out-of-line copy per
// weight type: RowsLinearColumns is always inlined, and every call site
// would otherwise compile all its tiles again (minutes of this file's build
// under ASan).
template <typename TW>
HWY_NOINLINE void Linear(
    const float* x, size_t rows, size_t k, const std::vector<TW>& w,
    const float* bias, size_t n, float* y,
    RowsLinearPrefetch prefetch = RowsLinearPrefetch::kManyFmasPerLine) {
  const std::vector<TW> packed = test::Packed(w, n, k);
  for (size_t j0 = 0; j0 < n; j0 += RowsLinearUnitColumns<TW>()) {
    RowsLinearColumns(hn::ScalableTag<float>(), x, rows, k, packed.data(), bias,
                      n, j0, y + j0, n, prefetch);
  }
}

void TestRowsLinearMatchesReference() {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  std::mt19937 rng(7);
  for (size_t rows = 1; rows <= kRowsLinearMaxRows; ++rows) {
    // 2048: the rows of x lie a multiple of 4 KiB apart. n: within one
    // panel, at its edge and past it by a column or more, two whole panels,
    // a panel and a column, and a partial second panel (bf16: work items).
    for (size_t k : {size_t{1}, N - 1 ? N - 1 : 1, N, N + 1, 3 * N + 2,
                     size_t{64}, size_t{769}, size_t{2048}}) {
      for (size_t n : {size_t{1}, size_t{5}, size_t{17}, size_t{32}, size_t{33},
                       size_t{48}, size_t{77}, size_t{97}}) {
        const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
        const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
        const auto b = test::RandomVector(rng, n, -1.f, 1.f);
        for (const float* bias :
             {b.data(), static_cast<const float*>(nullptr)}) {
          // Exactly sized: the kernel must not read past x or the panels,
          // nor write past y (ASan in CI).
          std::vector<float> y(rows * n);
          Linear(x.data(), rows, k, w, bias, n, y.data());
          test::ExpectAllClose(
              test::RowsLinearReference(x, rows, k, w, bias, n), y.data(),
              1e-5 * double(k + 1), "rows_linear");
          // Prefetching in every tile changes no bit, nor does one row
          // reading its panels side by side.
          std::vector<float> prefetched(rows * n);
          Linear(x.data(), rows, k, w, bias, n, prefetched.data(),
                 RowsLinearPrefetch::kEveryTile);
          EXPECT_EQ(prefetched, y) << rows << "x" << k << "x" << n;
          std::vector<float> side(rows * n);
          RowsLinearGroup(
              x.data(), rows, k, test::Packed(w, n, k).data(), bias, n,
              side.data(), 0, (n + kRowsLinearPanel - 1) / kRowsLinearPanel,
              RowsLinearActivation::kNone,
              {RowsLinearPrefetch::kEveryTile, RowsLinearPanels::kSideBySide});
          EXPECT_EQ(side, y) << rows << "x" << k << "x" << n;
        }
      }
    }
  }
}

// bf16 weights: the bits of the f32 path on the widened weights (the same
// tiles, only the load differs), and so the reference's values, at every
// shape the f32 test covers.
void TestRowsLinearBF16MatchesF32() {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  std::mt19937 rng(17);
  for (size_t rows = 1; rows <= kRowsLinearMaxRows; ++rows) {
    for (size_t k : {size_t{1}, N - 1 ? N - 1 : 1, N, N + 1, 3 * N + 2,
                     size_t{64}, size_t{769}, size_t{2048}}) {
      for (size_t n : {size_t{1}, size_t{5}, size_t{17}, size_t{32}, size_t{33},
                       size_t{48}, size_t{77}, size_t{97}}) {
        const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
        const auto [wb, wf] =
            test::ToBF16(test::RandomVector(rng, n * k, -1.f, 1.f));
        const auto b = test::RandomVector(rng, n, -1.f, 1.f);
        for (const float* bias :
             {b.data(), static_cast<const float*>(nullptr)}) {
          // Exactly sized, as above.
          std::vector<float> y(rows * n), y32(rows * n);
          Linear(x.data(), rows, k, wb, bias, n, y.data());
          Linear(x.data(), rows, k, wf, bias, n, y32.data());
          ASSERT_EQ(0, std::memcmp(y.data(), y32.data(), y.size() * 4))
              << rows << " rows, k " << k << ", n " << n;
          test::ExpectAllClose(
              test::RowsLinearReference(x, rows, k, wf, bias, n), y.data(),
              1e-5 * double(k + 1), "rows_linear bf16");
        }
      }
    }
  }
}

// Every tile sums each output over k in the same order: a row's outputs
// are the same bits whether it runs alone or among 2..8 rows, for f32 and
// bf16 weights.
template <typename TW>
void ExpectBitsDoNotDependOnRows(const std::vector<TW>& w, size_t k) {
  std::mt19937 rng(9);
  const size_t n = w.size() / k;
  const auto x = test::RandomVector(rng, kRowsLinearMaxRows * k, -1.f, 1.f);
  const auto bias = test::RandomVector(rng, n, -1.f, 1.f);
  std::vector<float> alone(n), all(kRowsLinearMaxRows * n);
  for (size_t rows = 2; rows <= kRowsLinearMaxRows; ++rows) {
    Linear(x.data(), rows, k, w, bias.data(), n, all.data());
    for (size_t r = 0; r < rows; ++r) {
      Linear(x.data() + r * k, 1, k, w, bias.data(), n, alone.data());
      for (size_t j = 0; j < n; ++j) {
        ASSERT_EQ(alone[j], all[r * n + j]) << rows << " rows, row " << r;
      }
    }
  }
}

void TestRowsLinearBitsDoNotDependOnRows() {
  std::mt19937 rng(10);
  for (size_t k : {size_t{1539}, size_t{2048}}) {
    // 77 columns: bf16 takes two-panel tiles for up to 4 rows (AVX-512),
    // one-panel ones past that, as fp32 always does.
    const auto w = test::RandomVector(rng, 77 * k, -1.f, 1.f);
    ExpectBitsDoNotDependOnRows(w, k);
    ExpectBitsDoNotDependOnRows(test::ToBF16(w).first, k);
  }
}

// A work unit in the middle, or the last one (part of a panel), writes
// exactly its columns, of every row; w holds TW weights, wf their values as
// floats.
template <typename TW>
void ExpectUnitWritesOnlyItsColumns(const std::vector<TW>& w,
                                    const std::vector<float>& wf, size_t k) {
  std::mt19937 rng(8);
  const size_t n = w.size() / k;
  constexpr size_t kUnit = RowsLinearUnitColumns<TW>();
  const std::vector<TW> packed = test::Packed(w, n, k);
  ASSERT_NE(n % kUnit, 0u);
  for (size_t j0 : {kUnit, (n - 1) / kUnit * kUnit})
    for (size_t rows : {size_t{1}, size_t{3}, size_t{8}}) {
      const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
      const auto full = test::RowsLinearReference(x, rows, k, wf, nullptr, n);
      std::vector<float> y(rows * n, -7.0f);
      RowsLinearColumns(hn::ScalableTag<float>(), x.data(), rows, k,
                        packed.data(), nullptr, n, j0, y.data() + j0, n,
                        RowsLinearPrefetch::kEveryTile);
      for (size_t r = 0; r < rows; ++r) {
        for (size_t j = 0; j < n; ++j) {
          if (j >= j0 && j < j0 + kUnit) {
            EXPECT_NEAR(y[r * n + j], full[r * n + j], 1e-4);
          } else {
            EXPECT_EQ(y[r * n + j], -7.0f) << r << ", " << j;
          }
        }
      }
    }
}

// expect(w, wf, k) on random weights w [n, k] in [-1, 1], fp32 and then
// bf16 (wf: their values as floats).
template <class Expect>
void ForF32AndBF16Weights(uint32_t seed, size_t n, size_t k,
                          const Expect& expect) {
  std::mt19937 rng(seed);
  const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
  expect(w, w, k);
  const auto [wb, wf] = test::ToBF16(w);
  expect(wb, wf, k);
}

void TestRowsLinearUnitWritesOnlyItsColumns() {
  ForF32AndBF16Weights(8, 150, 19, [](const auto& w, const auto& wf, size_t k) {
    ExpectUnitWritesOnlyItsColumns(w, wf, k);
  });
}

// A group of units (all but the first, the last one partial) writes its
// columns of every row and no other: with no activation the bits of its
// units one by one, with GELU the bits GeluT (kernels::Gelu's body) gives
// on those, so a step's fused GELU is the pass a matmul's rows take, and
// the book's GELU of the reference within the linear's error.
template <typename TW>
void ExpectGroupWritesActivatedColumns(const std::vector<TW>& w,
                                       const std::vector<float>& wf, size_t k) {
  std::mt19937 rng(12);
  const size_t n = w.size() / k;
  constexpr size_t kUnit = RowsLinearUnitColumns<TW>();
  const size_t units = (n + kUnit - 1) / kUnit;
  ASSERT_NE(n % kUnit, 0u);
  ASSERT_LE((units - 1) * kUnit, kRowsLinearGroupColumns);
  const std::vector<TW> packed = test::Packed(w, n, k);
  for (size_t rows : {size_t{1}, size_t{3}, size_t{8}}) {
    const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
    const auto bias = test::RandomVector(rng, n, -1.f, 1.f);
    std::vector<float> plain(rows * n);
    Linear(x.data(), rows, k, w, bias.data(), n, plain.data());
    std::vector<float> gelu(rows * n);
    GeluT(plain.data(), gelu.data(), plain.size());
    for (auto activation :
         {RowsLinearActivation::kNone, RowsLinearActivation::kGelu}) {
      const auto& expected =
          activation == RowsLinearActivation::kGelu ? gelu : plain;
      for (RowsLinearReading reading :
           {RowsLinearReading{RowsLinearPrefetch::kManyFmasPerLine,
                              RowsLinearPanels::kOneByOne},
            RowsLinearReading{RowsLinearPrefetch::kEveryTile,
                              RowsLinearPanels::kSideBySide}}) {
        std::vector<float> y(rows * n, -7.0f);
        RowsLinearGroup(x.data(), rows, k, packed.data(), bias.data(), n,
                        y.data(), 1, units - 1, activation, reading);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(i % n < kUnit ? -7.0f : expected[i], y[i])
              << rows << " rows, column " << i % n << ", prefetch "
              << int(reading.prefetch) << ", panels " << int(reading.panels);
        }
      }
    }
    std::vector<double> reference =
        test::RowsLinearReference(x, rows, k, wf, bias.data(), n);
    for (double& v : reference) v = test::GeluReference(v);
    test::ExpectAllClose(reference, gelu.data(), 1e-4, "gelu");
  }
}

void TestRowsLinearGroupWritesActivatedColumns() {
  // 150 columns of 40: outputs over about [-8, 8], where GELU bends. 487
  // columns: 15 fp32 panels after the first, which one row reads 8, 4, 2
  // and 1 side by side (RowsLinearPanels::kSideBySide), the last partial.
  for (size_t n : {size_t{150}, size_t{487}}) {
    ForF32AndBF16Weights(11, n, 40,
                         [](const auto& w, const auto& wf, size_t k) {
                           ExpectGroupWritesActivatedColumns(w, wf, k);
                         });
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
HWY_EXPORT_AND_TEST_P(RowsLinearTest, TestRowsLinearUnitWritesOnlyItsColumns);
HWY_EXPORT_AND_TEST_P(RowsLinearTest, TestRowsLinearBitsDoNotDependOnRows);
HWY_EXPORT_AND_TEST_P(RowsLinearTest, TestRowsLinearBF16MatchesF32);
HWY_EXPORT_AND_TEST_P(RowsLinearTest,
                      TestRowsLinearGroupWritesActivatedColumns);

// RowsLinear on `packed` (w's TW weights; wf their values as floats) at 1
// thread against the reference, and the same bits at 1, 2, 3 and 7 for
// every RowsLinearReading.
template <typename TW>
void ExpectSameBitsAtEveryThreadCount(const std::vector<float>& x, size_t rows,
                                      size_t k, const std::vector<TW>& packed,
                                      const std::vector<float>& wf,
                                      const std::vector<float>& b, size_t n) {
  std::vector<float> one(rows * n);
  RowsLinear(x.data(), rows, k, packed.data(), b.data(), n, one.data(), 1);
  test::ExpectAllClose(test::RowsLinearReference(x, rows, k, wf, b.data(), n),
                       one.data(), 1e-4, "1 thread");
  for (int threads : {1, 2, 3, 7}) {
    for (RowsLinearPrefetch prefetch : {RowsLinearPrefetch::kManyFmasPerLine,
                                        RowsLinearPrefetch::kEveryTile}) {
      for (RowsLinearPanels panels :
           {RowsLinearPanels::kOneByOne, RowsLinearPanels::kSideBySide}) {
        std::vector<float> many(rows * n);
        RowsLinear(x.data(), rows, k, packed.data(), b.data(), n, many.data(),
                   threads, RowsLinearActivation::kNone, {prefetch, panels});
        EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * 4))
            << threads << " threads, prefetch " << int(prefetch) << ", panels "
            << int(panels) << " differ from 1 thread, n " << n;
      }
    }
  }
}

// The dispatched entry point spreads columns over threads: the same bits at
// every team size, and the reference's values, for fp32 and bf16 weights.
// n 9001: 282 fp32 units (141 bf16), shares taken in groups that shrink to
// one unit (8 rows) or to the panels one row reads side by side, and a last
// partial unit.
TEST(RowsLinearDispatchTest, SameBitsAtEveryThreadCount) {
  std::mt19937 rng(9);
  const size_t k = 300;
  for (auto [rows, n] :
       {std::pair<size_t, size_t>{5, 1001}, {8, 9001}, {1, 9001}}) {
    const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
    const auto w = test::RandomVector(rng, n * k, -0.2f, 0.2f);
    const auto b = test::RandomVector(rng, n, -1.f, 1.f);
    ExpectSameBitsAtEveryThreadCount(x, rows, k, test::Packed(w, n, k), w, b,
                                     n);
    const auto [wb, wf] = test::ToBF16(w);
    ExpectSameBitsAtEveryThreadCount(x, rows, k, test::Packed(wb, n, k), wf, b,
                                     n);
  }
}

// RowsLinear with GELU on `packed` at 1, 2 and 3 threads: the bits of
// kernels::Gelu on its plain outputs.
template <typename TW>
void ExpectGeluOfOutputs(const std::vector<float>& x, size_t rows, size_t k,
                         const std::vector<TW>& packed,
                         const std::vector<float>& b, size_t n) {
  std::vector<float> expected(rows * n);
  RowsLinear(x.data(), rows, k, packed.data(), b.data(), n, expected.data(), 1);
  Gelu(expected.data(), expected.data(), expected.size(), 1);
  for (int threads : {1, 2, 3}) {
    std::vector<float> fused(rows * n);
    RowsLinear(x.data(), rows, k, packed.data(), b.data(), n, fused.data(),
               threads, RowsLinearActivation::kGelu);
    EXPECT_EQ(0, std::memcmp(expected.data(), fused.data(), fused.size() * 4))
        << threads << " threads, n " << n;
  }
}

// GELU as RowsLinear writes y (a decode step's feed-forward) gives what the
// separate pass gives, whatever the team, for fp32 and bf16 weights.
TEST(RowsLinearDispatchTest, GeluIsGeluOfOutputs) {
  std::mt19937 rng(13);
  const size_t rows = 8, k = 300, n = 9001;
  const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
  const auto w = test::RandomVector(rng, n * k, -0.3f, 0.3f);
  const auto b = test::RandomVector(rng, n, -1.f, 1.f);
  ExpectGeluOfOutputs(x, rows, k, test::Packed(w, n, k), b, n);
  ExpectGeluOfOutputs(x, rows, k, test::Packed(test::ToBF16(w).first, n, k), b,
                      n);
}

// RowsLinear on `packed` inside a parallel region (teams of one thread) and
// with more threads than units: the bits of one thread, every column
// written.
template <typename TW>
void ExpectEveryColumnWhateverTheTeam(const std::vector<float>& x, size_t rows,
                                      size_t k, const std::vector<TW>& packed,
                                      size_t n) {
  std::vector<float> one(rows * n);
  RowsLinear(x.data(), rows, k, packed.data(), nullptr, n, one.data(), 1);
  const int saved_levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);  // the inner teams are of one thread
  std::vector<std::vector<float>> nested(
      2, std::vector<float>(rows * n, std::nanf("")));
  int outer_team = 0;
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < 2; ++i) {
    if (i == 0) outer_team = omp_get_num_threads();
    RowsLinear(x.data(), rows, k, packed.data(), nullptr, n,
               nested[size_t(i)].data(), 4);
  }
  omp_set_max_active_levels(saved_levels);
  ASSERT_EQ(2, outer_team) << "the inner calls must run in a team";
  std::vector<float> wide(rows * n, std::nanf(""));
  RowsLinear(x.data(), rows, k, packed.data(), nullptr, n, wide.data(), 7);
  for (const auto* got : {&nested[0], &nested[1], &wide}) {
    EXPECT_EQ(0, std::memcmp(one.data(), got->data(), one.size() * 4))
        << "n " << n;
  }
}

// Each thread's share of columns has an owner only when the team is as large
// as asked: inside an enclosing parallel region the team is one thread,
// which must take the other shares too; and more threads than work units
// (n 100: four fp32 units, two bf16) get one share per unit. Every column is
// still written, with the same bits.
TEST(RowsLinearDispatchTest, EveryColumnWhateverTheTeam) {
  std::mt19937 rng(10);
  const size_t rows = 3, k = 64;
  for (size_t n : {size_t{100}, size_t{1001}}) {
    const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
    const auto w = test::RandomVector(rng, n * k, -0.2f, 0.2f);
    ExpectEveryColumnWhateverTheTeam(x, rows, k, test::Packed(w, n, k), n);
    ExpectEveryColumnWhateverTheTeam(
        x, rows, k, test::Packed(test::ToBF16(w).first, n, k), n);
  }
}

// The bf16 entry point: at 1 and 2 threads, every row count, and n not a
// multiple of the panel, the bits of the f32 entry point on the widened
// weights and the reference's values.
TEST(RowsLinearDispatchTest, BF16IsF32OnWidenedWeights) {
  std::mt19937 rng(11);
  for (size_t rows = 1; rows <= kRowsLinearMaxRows; ++rows) {
    for (size_t k : {size_t{300}, size_t{1539}}) {
      const size_t n = 203;
      const auto x = test::RandomVector(rng, rows * k, -1.f, 1.f);
      const auto [wb, wf] =
          test::ToBF16(test::RandomVector(rng, n * k, -0.2f, 0.2f));
      const auto packed_b = test::Packed(wb, n, k);
      const auto packed_f = test::Packed(wf, n, k);
      const auto b = test::RandomVector(rng, n, -1.f, 1.f);
      for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
        const auto expected =
            test::RowsLinearReference(x, rows, k, wf, bias, n);
        for (int threads : {1, 2}) {
          std::vector<float> y(rows * n), y32(rows * n);
          RowsLinear(x.data(), rows, k, packed_b.data(), bias, n, y.data(),
                     threads);
          RowsLinear(x.data(), rows, k, packed_f.data(), bias, n, y32.data(),
                     threads);
          ASSERT_EQ(0, std::memcmp(y.data(), y32.data(), y.size() * 4))
              << rows << " rows, k " << k << ", " << threads << " threads";
          test::ExpectAllClose(expected, y.data(), 1e-5 * double(k + 1),
                               "bf16 dispatch");
        }
      }
    }
  }
}

float AsFloat(float v) { return v; }
float AsFloat(hwy::bfloat16_t v) { return hwy::F32FromBF16(v); }

// w[j, i] as packed for column j of panel p and i < k: fp32 panel after
// panel, k rows of 32 columns; bf16 item (two panels) after item, each
// RowsLinearPaddedK(k) / 2 rows of 64 words, the word of column j holding
// i = 2 * row in its low half and 2 * row + 1 in its high half.
float PackedAt(const std::vector<float>& packed, size_t k, size_t p, size_t c,
               size_t i) {
  return packed[(p * k + i) * kRowsLinearPanel + c];
}
float PackedAt(const std::vector<hwy::bfloat16_t>& packed, size_t k, size_t p,
               size_t c, size_t i) {
  const size_t item = p / 2, column = p % 2 * kRowsLinearPanel + c;
  const size_t padded = RowsLinearPaddedK<hwy::bfloat16_t>(k);
  const size_t word = item * kRowsLinearColumns * padded / 2 +
                      i / 2 * kRowsLinearColumns + column;
  uint32_t bits;
  std::memcpy(&bits, packed.data() + 2 * word, sizeof(bits));
  return AsFloat(
      hwy::bfloat16_t{static_cast<uint16_t>(i % 2 == 0 ? bits : bits >> 16)});
}

// Panel p holds columns [32p, 32p + 32) of w [n, k], zeros past n; bf16
// items are 64 columns wide and hold k padded to 32 rows, zeros past k.
template <typename T>
void ExpectPanelLayout(const std::vector<T>& w, size_t n, size_t k) {
  const std::vector<T> packed = test::Packed(w, n, k);
  const bool bf16 = std::is_same_v<T, hwy::bfloat16_t>;
  const size_t width = bf16 ? kRowsLinearColumns : kRowsLinearPanel;
  const size_t rows = bf16 ? (k + 31) / 32 * 32 : k;
  ASSERT_EQ(packed.size(), (n + width - 1) / width * width * rows);
  const size_t panels = packed.size() / rows / kRowsLinearPanel;
  for (size_t p = 0; p < panels; ++p) {
    for (size_t i = 0; i < rows; ++i) {
      for (size_t c = 0; c < kRowsLinearPanel; ++c) {
        const size_t j = p * kRowsLinearPanel + c;
        const float want = j < n && i < k ? AsFloat(w[j * k + i]) : 0.0f;
        ASSERT_EQ(PackedAt(packed, k, p, c, i), want)
            << "panel " << p << ", k " << i << ", column " << c;
      }
    }
  }
}

TEST(RowsLinearPackTest, PanelsHoldColumnsSideBySide) {
  std::mt19937 rng(12);
  for (size_t n : {size_t{1}, size_t{32}, size_t{45}, size_t{64}, size_t{77},
                   size_t{96}, size_t{128}}) {
    for (const size_t k : {size_t{7}, size_t{32}, size_t{45}}) {
      const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
      ExpectPanelLayout(w, n, k);
      ExpectPanelLayout(test::ToBF16(w).first, n, k);
    }
  }
}

// Packing spreads panels (bf16: items) over threads: the same bytes at
// every team size.
template <typename T>
void ExpectSameLayoutAtEveryThreadCount(const std::vector<T>& w, size_t k) {
  const size_t n = w.size() / k;
  const std::vector<T> one = test::Packed(w, n, k);
  for (int threads : {2, 3}) {
    std::vector<T> many(one.size());
    std::memset(many.data(), 0xFF, many.size() * sizeof(T));
    PackRowsLinear(w.data(), n, k, many.data(), threads);
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(T)))
        << threads << " threads";
  }
}

TEST(RowsLinearPackTest, SameLayoutAtEveryThreadCount) {
  std::mt19937 rng(13);
  const size_t n = 1001, k = 67;
  const auto w = test::RandomVector(rng, n * k, -1.f, 1.f);
  ExpectSameLayoutAtEveryThreadCount(w, k);
  ExpectSameLayoutAtEveryThreadCount(test::ToBF16(w).first, k);
}

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
