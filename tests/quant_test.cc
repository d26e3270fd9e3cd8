// Quantized weights (kernels/quant.h): fp16 against known values and F16C;
// the q8_0/q4_0 quantizers on every compiled Highway target bit for bit
// against a transcription of llama.cpp's reference and against blocks worked
// by hand; the packed layout's bytes and round trip; dequantization to fp32
// and bf16; QuantRowsLinear on every dot-product kernel a target compiles
// against a scalar reference, exact at the int8/int16 saturation edges, and
// bitwise the same at 1, 2, 3 and 7 threads. Compiled with
// -ffp-contract=off, as llama.cpp's C reference is.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/quant_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "kernels/cpu.h"
#include "kernels/quant-inl.h"
#include "kernels/quant.h"
#include "kernels/quant_layout.h"
#include "tests/test_util.h"

#ifndef ATTN_TESTS_QUANT_REFERENCE_
#define ATTN_TESTS_QUANT_REFERENCE_
namespace attn::test {

using kernels::BlockQ4_0;
using kernels::BlockQ8_0;
using kernels::QuantType;

// The reference's float to int8 conversion where C leaves it undefined
// (|v| >= 2^31, NaN: a block whose scale's reciprocal overflows) as x86's
// cvttss2si gives it: INT_MIN, whose low byte is 0.
inline int8_t X86ToInt8(float v) {
  if (!(std::fabs(v) < 2147483648.0f)) return 0;
  return static_cast<int8_t>(static_cast<int32_t>(v));
}

// llama.cpp's quantize_row_q8_0_ref (ggml/src/ggml-quants.c), transcribed.
inline void ReferenceQuantizeQ8(const float* x, BlockQ8_0* y, size_t k) {
  const size_t nb = k / 32;
  for (size_t i = 0; i < nb; i++) {
    float amax = 0.0f;  // absolute max
    for (size_t j = 0; j < 32; j++) {
      const float v = x[i * 32 + j];
      amax = amax > std::fabs(v) ? amax : std::fabs(v);  // MAX
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = kernels::F16FromF32(d);
    for (size_t j = 0; j < 32; ++j) {
      const float x0 = x[i * 32 + j] * id;
      y[i].qs[j] = X86ToInt8(std::roundf(x0));
    }
  }
}

// llama.cpp's quantize_row_q4_0_ref, transcribed.
inline void ReferenceQuantizeQ4(const float* x, BlockQ4_0* y, size_t k) {
  const size_t qk = 32, nb = k / qk;
  for (size_t i = 0; i < nb; i++) {
    float amax = 0.0f;  // absolute max
    float max = 0.0f;
    for (size_t j = 0; j < qk; j++) {
      const float v = x[i * qk + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = kernels::F16FromF32(d);
    for (size_t j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;
      const auto xi0 = static_cast<uint8_t>(
          std::min(15, static_cast<int>(X86ToInt8(x0 + 8.5f))));
      const auto xi1 = static_cast<uint8_t>(
          std::min(15, static_cast<int>(X86ToInt8(x1 + 8.5f))));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

// Rows of x [rows, k] as llama.cpp's blocks of type t.
inline std::vector<uint8_t> ReferenceBlocks(QuantType t, const float* x,
                                            size_t rows, size_t k) {
  const size_t per_row = k / 32 * kernels::QuantBlockBytes(t);
  std::vector<uint8_t> blocks(rows * per_row);
  for (size_t r = 0; r < rows; ++r) {
    if (t == QuantType::kQ8_0) {
      ReferenceQuantizeQ8(
          x + r * k, reinterpret_cast<BlockQ8_0*>(&blocks[r * per_row]), k);
    } else {
      ReferenceQuantizeQ4(
          x + r * k, reinterpret_cast<BlockQ4_0*>(&blocks[r * per_row]), k);
    }
  }
  return blocks;
}

// Weight e of a block as the integer it stands for, and its scale.
inline int BlockWeight(QuantType t, const uint8_t* block, size_t e) {
  if (t == QuantType::kQ8_0)
    return reinterpret_cast<const BlockQ8_0*>(block)->qs[e];
  const uint8_t pair = reinterpret_cast<const BlockQ4_0*>(block)->qs[e % 16];
  return (e < 16 ? pair & 15 : pair >> 4) - 8;
}
inline float BlockScale(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return kernels::F32FromF16(d);
}

// QuantRowsLinear as quant.h defines it, in double, and for each output
// the bound on a sum in fp32 of its terms (two roundings each, at most, and
// the bias's add): (2 nb + 2) 2^-24 (|bias| + sum of |terms|).
struct QuantLinearExpected {
  std::vector<double> y, bound;
};
inline QuantLinearExpected QuantLinearReference(
    QuantType t, const std::vector<float>& x, size_t rows, size_t k,
    const std::vector<uint8_t>& w_blocks, const float* bias, size_t n) {
  const std::vector<uint8_t> xb =
      ReferenceBlocks(QuantType::kQ8_0, x.data(), rows, k);
  const size_t nb = k / 32, wbytes = kernels::QuantBlockBytes(t);
  QuantLinearExpected out{std::vector<double>(rows * n),
                          std::vector<double>(rows * n)};
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      double sum = 0.0, magnitude = bias ? std::fabs(bias[j]) : 0.0;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* wb = &w_blocks[(j * nb + b) * wbytes];
        const uint8_t* xq = &xb[(r * nb + b) * sizeof(BlockQ8_0)];
        int64_t isum = 0;
        for (size_t e = 0; e < 32; ++e) {
          isum += BlockWeight(t, wb, e) * BlockWeight(QuantType::kQ8_0, xq, e);
        }
        const float s = BlockScale(wb) * BlockScale(xq);  // exact
        sum += double(s) * double(isum);
        magnitude += std::fabs(double(s) * double(isum));
      }
      out.y[r * n + j] = (bias ? bias[j] : 0.0) + sum;
      out.bound[r * n + j] = double(2 * nb + 2) * std::ldexp(magnitude, -24);
    }
  }
  return out;
}

inline void ExpectWithinBounds(const QuantLinearExpected& expected,
                               const std::vector<float>& y, const char* what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!(std::fabs(double(y[i]) - expected.y[i]) <= expected.bound[i])) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(0u, bad) << what << ": first at " << first << " expected "
                     << expected.y[first] << " got " << y[first] << " bound "
                     << expected.bound[first];
}

// Activations or weights [rows, k] whose blocks take turns being random,
// and the quantizers' edge cases: all zeros, one huge value, exact ties
// x * id = m + 1/2 (amax 127 and q4_0's max -8 make id 1), the float just
// below a half, and equal magnitudes of both signs (q4_0 takes the first).
inline std::vector<float> EdgyRows(std::mt19937& rng, size_t rows, size_t k) {
  std::vector<float> x = RandomVector(rng, rows * k, -1.0f, 1.0f);
  std::uniform_int_distribution<int> half(-127, 126);
  for (size_t b = 0; b < rows * k / 32; ++b) {
    float* p = &x[b * 32];
    switch (b % 7) {
      case 0:  // every 14th block tiny: its scale's reciprocal overflows
        for (size_t j = 0; b % 14 == 0 && j < 32; ++j) p[j] *= 1e-38f;
        break;
      case 1:
        std::fill(p, p + 32, 0.0f);
        break;
      case 2:
        p[b % 32] = (b & 8) ? 3e4f : -3e4f;
        break;
      case 3:  // q8_0 ties: amax 127
      case 4:  // q4_0 ties: max -8, then halves of both signs
        for (size_t j = 0; j < 32; ++j) {
          p[j] = (b % 7 == 3 ? float(half(rng)) : float(half(rng) % 8)) + 0.5f;
        }
        p[0] = b % 7 == 3 ? 127.0f : -8.0f;
        p[1] = std::nextafter(0.5f, 0.0f);
        p[2] = std::nextafter(-2.5f, 0.0f);
        break;
      case 5:
        p[3] = 0.9f;
        p[9] = -0.9f;
        break;
      case 6:
        p[4] = -1.25f;
        p[20] = 1.25f;
        break;
    }
  }
  return x;
}

// A row of k weights of random llama.cpp blocks: every byte of qs, and
// normal fp16 scales between 2^-10 and 2^2, either sign.
inline std::vector<uint8_t> RandomBlocks(std::mt19937& rng, QuantType t,
                                         size_t rows, size_t k) {
  const size_t bytes = kernels::QuantBlockBytes(t);
  std::vector<uint8_t> blocks(rows * k / 32 * bytes);
  std::uniform_int_distribution<int> byte(0, 255), exponent(5, 17);
  for (size_t i = 0; i < blocks.size(); i += bytes) {
    const auto d = static_cast<uint16_t>(
        (byte(rng) & 0x80) << 8 | exponent(rng) << 10 | (byte(rng) << 2));
    std::memcpy(&blocks[i], &d, 2);
    for (size_t q = 2; q < bytes; ++q)
      blocks[i + q] = static_cast<uint8_t>(byte(rng));
  }
  return blocks;
}

inline std::vector<uint8_t> Packed(QuantType t,
                                   const std::vector<uint8_t>& blocks, size_t n,
                                   size_t k) {
  std::vector<uint8_t> packed(kernels::QuantPackedBytes(t, n, k));
  kernels::PackQuantRows(t, blocks.data(), n, k, packed.data(), 1);
  return packed;
}

}  // namespace attn::test
#endif  // ATTN_TESTS_QUANT_REFERENCE_

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace {

constexpr QuantType kTypes[] = {QuantType::kQ8_0, QuantType::kQ4_0};

// F16FromF32 and F32FromF16 give the bits of F16C's conversions (Highway's
// DemoteTo and PromoteTo on x86 from AVX2) for every 4099th float bit
// pattern (every exponent, both signs, NaNs) and every fp16.
void TestF16MatchesF16C() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> d16;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const size_t N = hn::Lanes(df);
  std::vector<uint32_t> bits(N);
  std::vector<uint16_t> halves(N);
  std::vector<float> widened(N);
  for (uint64_t first = 0; first <= UINT32_MAX; first += N * 4099) {
    for (size_t i = 0; i < N; ++i) {
      bits[i] = static_cast<uint32_t>(
          std::min<uint64_t>(first + i * 4099, UINT32_MAX));
    }
    const auto v = hn::BitCast(df, hn::LoadU(du, bits.data()));
    hn::StoreU(hn::BitCast(du16, hn::DemoteTo(d16, v)), du16, halves.data());
    for (size_t i = 0; i < N; ++i) {
      float f;
      std::memcpy(&f, &bits[i], 4);
      ASSERT_EQ(halves[i], F16FromF32(f)) << std::hex << bits[i];
    }
  }
  for (uint32_t h = 0; h <= 0xFFFF; h += static_cast<uint32_t>(N)) {
    for (size_t i = 0; i < N; ++i) halves[i] = static_cast<uint16_t>(h + i);
    const auto v = hn::BitCast(d16, hn::LoadU(du16, halves.data()));
    hn::StoreU(hn::PromoteTo(df, v), df, widened.data());
    for (size_t i = 0; i < N; ++i) {
      const float expected = F32FromF16(halves[i]);
      ASSERT_EQ(0, std::memcmp(&expected, &widened[i], 4))
          << std::hex << halves[i];
    }
  }
#endif
}

// QuantizeRowBlocks (QuantizeRow's body) gives the reference's bytes.
void TestQuantizeMatchesReference() {
  std::mt19937 rng(1);
  for (size_t k : {size_t{32}, size_t{96}, size_t{2048}}) {
    const std::vector<float> x = test::EdgyRows(rng, 4, k);
    for (QuantType t : kTypes) {
      const std::vector<uint8_t> expected =
          test::ReferenceBlocks(t, x.data(), 4, k);
      std::vector<uint8_t> blocks(expected.size());
      const size_t per_row = expected.size() / 4;
      for (size_t r = 0; r < 4; ++r) {
        ASSERT_TRUE(QuantizeRowBlocks(hn::ScalableTag<float>(), t, &x[r * k], k,
                                      &blocks[r * per_row]));
      }
      for (size_t i = 0; i < blocks.size(); ++i) {
        ASSERT_EQ(expected[i], blocks[i])
            << "type " << int(t) << " k " << k << " byte " << i << " of block "
            << i / QuantBlockBytes(t);
      }
    }
  }
}

// QuantizeRowBlocks answers false for a row holding NaN or an infinity at
// any position, whatever the other values, and true for the largest and
// smallest finite values.
void TestQuantizeTellsNonFinite() {
  const float kNotFinite[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  constexpr size_t k = 96;
  std::vector<uint8_t> blocks(k / kQuantBlock * sizeof(BlockQ8_0));
  for (QuantType t : kTypes) {
    std::vector<float> x(k, 0.5f);
    x[7] = std::numeric_limits<float>::max();
    x[8] = -std::numeric_limits<float>::denorm_min();
    ASSERT_TRUE(QuantizeRowBlocks(hn::ScalableTag<float>(), t, x.data(), k,
                                  blocks.data()));
    for (const float bad : kNotFinite) {
      for (size_t at : {size_t{0}, size_t{31}, size_t{32}, k - 1}) {
        std::vector<float> y = x;
        y[at] = bad;
        EXPECT_FALSE(QuantizeRowBlocks(hn::ScalableTag<float>(), t, y.data(), k,
                                       blocks.data()))
            << "type " << int(t) << " value " << bad << " at " << at;
      }
    }
  }
}

// The activations' quants and scales are quantize_row_q8_0_ref's, and corr
// the weights' offset times their sums.
void TestQuantizeActsMatchesReference() {
  std::mt19937 rng(2);
  const size_t rows = 3, k = 512, nb = k / 32;
  const std::vector<float> x = test::EdgyRows(rng, rows, k);
  const std::vector<uint8_t> expected =
      test::ReferenceBlocks(QuantType::kQ8_0, x.data(), rows, k);
  for (QuantType t : kTypes) {
    std::vector<uint8_t> scratch(QuantActsBytes(rows, k) + 1);
    const QuantActs acts = QuantActsIn(scratch.data() + 1, rows, k);
    QuantizeActs(hn::ScalableTag<float>(), t, x.data(), rows, k, acts);
    for (size_t i = 0; i < rows * nb; ++i) {  // row i / nb, block i % nb
      BlockQ8_0 block;
      std::memcpy(&block, &expected[i * sizeof(block)], sizeof(block));
      const size_t at = i % nb * rows + i / nb;
      ASSERT_EQ(0, std::memcmp(block.qs, acts.q + at * 32, 32))
          << "block " << i;
      ASSERT_EQ(F32FromF16(block.d), acts.d[at]) << "block " << i;
      int32_t sum = 0;
      for (int8_t q : block.qs) sum += q;
      ASSERT_EQ(-QuantWeightOffset(t) * sum, acts.corr[at]) << "block " << i;
    }
  }
}

// The dot products this target compiles and this CPU runs.
std::vector<QuantDot> DotsOfThisTarget() {
  std::vector<QuantDot> dots = {QuantDot::kPortable};
#if ATTN_QUANT_MADDUBS
  dots.push_back(QuantDot::kMaddubs);
#endif
#if ATTN_QUANT_VNNI
  if (HasAvx512Vnni()) dots.push_back(QuantDot::kVnni);
#endif
  return dots;
}

// Every group of y on `dot`, read as `reading` says, out of line:
// QuantGroups is inlined, and each call site would compile all its kernels
// again.
HWY_NOINLINE std::vector<float> Linear(QuantDot dot, QuantReading reading,
                                       QuantType t, const std::vector<float>& x,
                                       size_t rows, size_t k,
                                       const std::vector<uint8_t>& packed,
                                       const float* bias, size_t n) {
  std::vector<uint8_t> scratch(QuantActsBytes(rows, k));
  const QuantActs acts = QuantActsIn(scratch.data(), rows, k);
  QuantizeActs(hn::ScalableTag<float>(), t, x.data(), rows, k, acts);
  std::vector<float> y(rows * n);  // exactly sized: ASan sees any overrun
  const QuantGroupArgs args{
      acts, rows, k, packed.data(), bias, n, y.data(), reading,
  };
  const size_t groups = QuantGroupCount(n);
  switch (dot) {
    case QuantDot::kVnni:
      QuantGroups<QuantDot::kVnni>(t, args, 0, groups);
      break;
    case QuantDot::kMaddubs:
      QuantGroups<QuantDot::kMaddubs>(t, args, 0, groups);
      break;
    case QuantDot::kPortable:
      QuantGroups<QuantDot::kPortable>(t, args, 0, groups);
      break;
  }
  return y;
}

// Every kernel against the reference at rows 1 to 8, n around the group
// and its tails (125: 8 groups, the last partial; 229: 15 groups, every
// count of groups side by side, the last alone and partial), with and
// without bias; the kernels summing with FMAs (vpmaddubsw, vpdpbusd, group
// by group or side by side) give the same bits, their isums being exact.
void TestGroupsMatchReference() {
  std::mt19937 rng(3);
  const std::vector<QuantDot> dots = DotsOfThisTarget();
  for (QuantType t : kTypes) {
    for (size_t k : {size_t{32}, size_t{64}, size_t{96}, size_t{512}}) {
      for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17},
                       size_t{33}, size_t{100}, size_t{125}, size_t{229}}) {
        const std::vector<float> wf = test::EdgyRows(rng, n, k);
        const std::vector<uint8_t> blocks =
            test::ReferenceBlocks(t, wf.data(), n, k);
        const std::vector<uint8_t> packed = test::Packed(t, blocks, n, k);
        const std::vector<float> b = test::RandomVector(rng, n, -1.0f, 1.0f);
        for (size_t rows = 1; rows <= kRowsLinearMaxRows; ++rows) {
          const std::vector<float> x = test::EdgyRows(rng, rows, k);
          for (const float* bias :
               {b.data(), static_cast<const float*>(nullptr)}) {
            const auto expected =
                test::QuantLinearReference(t, x, rows, k, blocks, bias, n);
            std::vector<float> fused;
            for (QuantDot dot : dots) {
              for (QuantReading reading :
                   {QuantReading::kGroupByGroup, QuantReading::kSideBySide}) {
                const std::vector<float> y =
                    Linear(dot, reading, t, x, rows, k, packed, bias, n);
                test::ExpectWithinBounds(expected, y, "kernel");
                if (dot == QuantDot::kPortable) continue;
                if (fused.empty()) fused = y;
                ASSERT_EQ(0, std::memcmp(fused.data(), y.data(), y.size() * 4))
                    << "fused kernels differ: dot " << int(dot) << " reading "
                    << int(reading) << " type " << int(t) << " k " << k << " n "
                    << n << " rows " << rows;
              }
            }
          }
        }
      }
    }
  }
}

// Weight blocks of `weights` (q8_0: -128 to 127; q4_0: 0 to 15) with scale
// 1, for the saturation edges.
std::vector<uint8_t> UnitBlocks(QuantType t, size_t n, size_t k,
                                const std::vector<int>& weights) {
  const size_t bytes = QuantBlockBytes(t);
  std::vector<uint8_t> blocks(n * k / 32 * bytes);
  for (size_t i = 0; i < blocks.size() / bytes; ++i) {
    uint8_t* block = &blocks[i * bytes];
    const uint16_t one = 0x3C00;
    std::memcpy(block, &one, 2);
    for (size_t e = 0; e < 32; ++e) {
      const int w = weights[(i * 32 + e) % weights.size()];
      if (t == QuantType::kQ8_0) {
        block[2 + e] = static_cast<uint8_t>(w);
      } else {
        block[2 + e % 16] =
            static_cast<uint8_t>(block[2 + e % 16] | w << (e < 16 ? 0 : 4));
      }
    }
  }
  return blocks;
}

// Weights and activations at the extremes of int8 (q8_0 down to -128, which
// llama.cpp's blocks may hold though its quantizer never writes it) and of
// q4_0's nibbles: every kernel's isums are exact (no int16 saturation in
// vpmaddubsw's pairs), and with unit scales every output is an integer
// below 2^24, so exactly the reference's.
void TestSaturationEdges() {
  const size_t k = 256, n = 33, rows = 8;
  const std::vector<std::vector<int>> q8 = {
      {127}, {-127}, {-128}, {127, -128, -127, 127}};
  const std::vector<std::vector<int>> q4 = {{0}, {15}, {0, 15, 15, 0}};
  std::vector<float> x(rows * k);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t r = i / k;  // rows of +127, -127, and sign patterns
    x[i] = (r == 0 || (r > 1 && ((i >> (r - 2)) & 1))) ? 127.0f : -127.0f;
  }
  for (QuantType t : kTypes) {
    for (const std::vector<int>& w : t == QuantType::kQ8_0 ? q8 : q4) {
      const std::vector<uint8_t> blocks = UnitBlocks(t, n, k, w);
      const std::vector<uint8_t> packed = test::Packed(t, blocks, n, k);
      const auto expected =
          test::QuantLinearReference(t, x, rows, k, blocks, nullptr, n);
      for (QuantDot dot : DotsOfThisTarget()) {
        const std::vector<float> y = Linear(dot, QuantReading::kSideBySide, t,
                                            x, rows, k, packed, nullptr, n);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(expected.y[i], double(y[i]))
              << "dot " << int(dot) << " at " << i;
        }
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

HWY_BEFORE_TEST(QuantTest);
HWY_EXPORT_AND_TEST_P(QuantTest, TestF16MatchesF16C);
HWY_EXPORT_AND_TEST_P(QuantTest, TestQuantizeMatchesReference);
HWY_EXPORT_AND_TEST_P(QuantTest, TestQuantizeTellsNonFinite);
HWY_EXPORT_AND_TEST_P(QuantTest, TestQuantizeActsMatchesReference);
HWY_EXPORT_AND_TEST_P(QuantTest, TestGroupsMatchReference);
HWY_EXPORT_AND_TEST_P(QuantTest, TestSaturationEdges);

float Pow2(int e) { return std::ldexp(1.0f, e); }

TEST(QuantF16Test, KnownValues) {
  const std::pair<float, uint16_t> cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.5f, 0x3800},
      {65504.0f, 0x7BFF},                      // largest finite
      {65519.99f, 0x7BFF},                     // below the tie
      {65520.0f, 0x7C00},                      // the tie: to even, inf
      {1e10f, 0x7C00},                         // overflow
      {-INFINITY, 0xFC00},                     //
      {1.0f + Pow2(-11), 0x3C00},              // tie: to even (down)
      {1.0f + 3 * Pow2(-11), 0x3C02},          // tie: to even (up)
      {1.0f + Pow2(-11) + Pow2(-20), 0x3C01},  // past the tie
      {Pow2(-14), 0x0400},                     // smallest normal
      {Pow2(-14) - Pow2(-25), 0x0400},         // tie with 0x03FF: even
      {Pow2(-24), 0x0001},                     // smallest subnormal
      {Pow2(-25), 0x0000},                     // tie with 0: even
      {std::nextafter(Pow2(-25), 1.0f), 0x0001},
      {3 * Pow2(-25), 0x0002},  // tie: to even (up)
      {5 * Pow2(-25), 0x0002},  // tie: to even (down)
      {Pow2(-30), 0x0000},
      {-Pow2(-24), 0x8001},
  };
  for (const auto& [f, h] : cases) {
    EXPECT_EQ(h, F16FromF32(f)) << f;
    if ((h & 0x7C00) != 0x7C00) {
      // Exact widening: back to the fp16 value, which rounds to itself.
      EXPECT_EQ(h, F16FromF32(F32FromF16(h))) << f;
    }
  }
  EXPECT_EQ(0x7E00, F16FromF32(NAN) & 0x7E00);  // NaN stays a quiet NaN
  EXPECT_EQ(65504.0f, F32FromF16(0x7BFF));
  EXPECT_EQ(Pow2(-24), F32FromF16(0x0001));
  EXPECT_EQ(-Pow2(-14), F32FromF16(0x8400));
  EXPECT_TRUE(std::isinf(F32FromF16(0xFC00)) && F32FromF16(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(F32FromF16(0x7E01)));
}

// Blocks worked by hand from the rules, through the dispatched QuantizeRow.
TEST(QuantizeRowTest, HandWorkedBlocks) {
  // q8_0, amax 127: d = 1, id = 1, roundf halves away from zero.
  float x[32] = {127.0f, -127.0f, 0.5f,  -0.5f,
                 1.5f,   2.5f,    -2.5f, std::nextafter(0.5f, 0.0f),
                 3.7f,   -126.6f};
  const int8_t q8[32] = {127, -127, 1, -1, 2, 3, -3, 0, 4, -127};
  BlockQ8_0 b8;
  QuantizeRow(QuantType::kQ8_0, x, 32, &b8);
  EXPECT_EQ(0x3C00, b8.d);
  EXPECT_EQ(0, std::memcmp(q8, b8.qs, 32));
  // q4_0, max -8 (first of |8|): d = 1, id = 1; q = min(15, trunc(x + 8.5)).
  float y[32] = {-8.0f, 7.0f, 7.6f, -0.5f, 0.5f, -7.5f, 8.0f};
  y[16] = 2.5f;
  y[17] = -3.5f;
  const uint8_t q4[16] = {0xB0, 0x5F, 0x8F, 0x88, 0x89, 0x81, 0x8F, 0x88,
                          0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
  BlockQ4_0 b4;
  QuantizeRow(QuantType::kQ4_0, y, 32, &b4);
  EXPECT_EQ(0x3C00, b4.d);
  EXPECT_EQ(0, std::memcmp(q4, b4.qs, 16));
  // q4_0, max +4: d = -0.5, id = -2.
  float z[32] = {4.0f, -4.0f, 1.0f};
  BlockQ4_0 c4;
  QuantizeRow(QuantType::kQ4_0, z, 32, &c4);
  EXPECT_EQ(0xB800, c4.d);
  EXPECT_EQ(0x80, c4.qs[0]);  // 4 * -2 + 8.5: 0
  EXPECT_EQ(0x8F, c4.qs[1]);  // 16.5: 16, clamped to 15
  EXPECT_EQ(0x86, c4.qs[2]);  // 6.5: 6
  // Zeros: q8_0's d is +0; q4_0's is 0 / -8 = -0, and its q 8.
  const float zeros[32] = {};
  QuantizeRow(QuantType::kQ8_0, zeros, 32, &b8);
  QuantizeRow(QuantType::kQ4_0, zeros, 32, &b4);
  EXPECT_EQ(0x0000, b8.d);
  EXPECT_EQ(0x8000, b4.d);
  EXPECT_EQ(0x88, b4.qs[7]);
}

// QuantizeRows answers the first row holding NaN or an infinity, or n, at
// every team size.
TEST(QuantizeRowTest, RowsTellTheFirstThatIsNotFinite) {
  constexpr size_t n = 9, k = 64;
  std::vector<float> x(n * k, 0.25f);
  std::vector<uint8_t> blocks(QuantRowsBytes(QuantType::kQ8_0, n, k));
  for (const int threads : {1, 2, 3}) {
    EXPECT_EQ(
        QuantizeRows(QuantType::kQ4_0, x.data(), n, k, blocks.data(), threads),
        n);
  }
  x[7 * k + 40] = std::numeric_limits<float>::quiet_NaN();
  x[5 * k + 3] = -std::numeric_limits<float>::infinity();
  for (const int threads : {1, 2, 3}) {
    EXPECT_EQ(
        QuantizeRows(QuantType::kQ8_0, x.data(), n, k, blocks.data(), threads),
        5u);
  }
}

// Unpack gives back the blocks packed, whatever the buffer held before;
// and the bytes lie where quant_layout.h says.
TEST(QuantPackTest, RoundTripAndLayout) {
  std::mt19937 rng(5);
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_0}) {
    for (size_t n : {1, 15, 16, 17, 33, 100}) {
      for (size_t k : {32, 96}) {
        const std::vector<uint8_t> blocks = test::RandomBlocks(rng, t, n, k);
        std::vector<uint8_t> packed(QuantPackedBytes(t, n, k), 0xCD);
        PackQuantRows(t, blocks.data(), n, k, packed.data(), 3);
        EXPECT_EQ(test::Packed(t, blocks, n, k), packed) << "n " << n;
        std::vector<uint8_t> unpacked(blocks.size());
        UnpackQuantRows(t, packed.data(), n, k, unpacked.data());
        EXPECT_EQ(blocks, unpacked) << "n " << n << " k " << k;
        // Row j, block b (the first of a pair, or alone), byte i of qs.
        const size_t j = n - 1, b = k / 32 - 1, i = QuantQsBytes(t) - 1;
        const uint8_t* group = &packed[j / 16 * QuantGroupBytes(t, k)];
        const uint8_t* block = &blocks[(j * (k / 32) + b) * QuantBlockBytes(t)];
        const size_t pair = b / 2 * (64 + 2 * 16 * QuantQsBytes(t));
        EXPECT_EQ(0, std::memcmp(group + pair + (j % 16) * 2, block, 2));
        const size_t at = pair + 64 + i / 4 * 64 + j % 16 * 4 + i % 4;
        EXPECT_EQ(block[2 + i] ^ (t == QuantType::kQ8_0 ? 0x80 : 0), group[at]);
      }
    }
  }
}

// The dispatched, threaded QuantRowsLinear: the reference's values at 1
// thread, the same bits at 1, 2, 3 and 7 threads and either reading, with
// scratch at an odd address. n 9001: 563 groups, runs that shrink to single
// groups (at 8 rows) or to the groups read side by side (1 and 2 rows), a tail.
TEST(QuantRowsLinearTest, SameBitsAtEveryThreadCount) {
  std::mt19937 rng(6);
  const size_t k = 256;
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_0}) {
    for (auto [rows, n] : {std::pair<size_t, size_t>{5, 1001},
                           {8, 9001},
                           {1, 37},
                           {1, 9001},
                           {2, 1001}}) {
      const std::vector<float> x = test::EdgyRows(rng, rows, k);
      const std::vector<float> wf = test::RandomVector(rng, n * k, -0.2f, 0.2f);
      const std::vector<uint8_t> blocks =
          test::ReferenceBlocks(t, wf.data(), n, k);
      const std::vector<uint8_t> packed = test::Packed(t, blocks, n, k);
      const std::vector<float> b = test::RandomVector(rng, n, -1.0f, 1.0f);
      std::vector<uint8_t> scratch(QuantRowsLinearScratchBytes(rows, k) + 1);
      std::vector<float> one(rows * n);
      QuantRowsLinear(t, x.data(), rows, k, packed.data(), b.data(), n,
                      one.data(), scratch.data() + 1, 1);
      test::ExpectWithinBounds(
          test::QuantLinearReference(t, x, rows, k, blocks, b.data(), n), one,
          "1 thread");
      for (int threads : {1, 2, 3, 7}) {
        for (QuantReading reading :
             {QuantReading::kGroupByGroup, QuantReading::kSideBySide}) {
          std::vector<float> many(rows * n);
          QuantRowsLinear(t, x.data(), rows, k, packed.data(), b.data(), n,
                          many.data(), scratch.data() + 1, threads, reading);
          EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * 4))
              << threads << " threads, reading " << int(reading)
              << " differ from 1 thread, n " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace attn::kernels
#endif  // HWY_ONCE
