// Dynamic dispatch and threads of the quantized kernels (quant.h): one
// HWY_DYNAMIC_DISPATCH per call or per run of groups, bodies in
// quant-inl.h; and their scalar parts: fp16, the packing, DequantizeRow.
// Compiled with -ffp-contract=off (kernels/CMakeLists.txt): the quantizers
// round x * id before adding 8.5 as llama.cpp's C does.
#include "kernels/quant.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quant.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/quant-inl.h"
#include "kernels/quant_layout.h"
#include "kernels/threads.h"
#include "kernels/unit_split.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

bool QuantizeRowT(QuantType t, const float* x, size_t k, void* blocks) {
  return QuantizeRowBlocks(hn::ScalableTag<float>(), t, x, k, blocks);
}

void QuantizeActsT(QuantType t, const float* x, size_t rows, size_t k,
                   void* scratch) {
  QuantizeActs(hn::ScalableTag<float>(), t, x, rows, k,
               QuantActsIn(scratch, rows, k));
}

void QuantGroupsT(QuantType t, const QuantGroupArgs& a, size_t first,
                  size_t count) {
  switch (BestQuantDot()) {
    case QuantDot::kVnni:
      return QuantGroups<QuantDot::kVnni>(t, a, first, count);
    case QuantDot::kMaddubs:
      return QuantGroups<QuantDot::kMaddubs>(t, a, first, count);
    case QuantDot::kPortable:
      return QuantGroups<QuantDot::kPortable>(t, a, first, count);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(QuantizeRowT);
HWY_EXPORT(QuantizeActsT);
HWY_EXPORT(QuantGroupsT);

namespace {

// v >> shift rounded to nearest even (0 < shift < 32).
uint32_t ShiftRoundedEven(uint32_t v, uint32_t shift) {
  const uint32_t q = v >> shift;
  const uint32_t rest = v & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return q + (rest > half || (rest == half && (q & 1)) ? 1 : 0);
}

// Groups of 16 columns a thread takes at most at a time (SplitUnits): 512
// columns, as RowsLinear's groups.
constexpr uint32_t kMostGroupsPerRun = 32;
static_assert(QuantGroupsSideBySide(1) <= kMostGroupsPerRun,
              "a run holds the groups read side by side");

// Group g of llama.cpp's row blocks into the packed layout; rows past n
// are blocks of zero bytes (scale 0: zero weights).
void PackGroup(QuantType t, const uint8_t* rows, size_t n, size_t k, size_t g,
               uint8_t* packed) {
  uint8_t* group = QuantGroupAt(t, packed, k, g);
  std::memset(group, 0, QuantGroupBytes(t, k));  // and its padding
  const size_t nb = QuantBlocksPerRow(k), bytes = QuantBlockBytes(t);
  const uint8_t zero[sizeof(BlockQ8_0)] = {};
  for (size_t lane = 0; lane < kQuantGroupRows; ++lane) {
    const size_t j = g * kQuantGroupRows + lane;
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* block = j < n ? rows + (j * nb + b) * bytes : zero;
      ScatterBlock(t, block, b, lane, group);
    }
  }
}

}  // namespace

const char* QuantName(QuantType t) {
  return t == QuantType::kQ8_0 ? "q8_0" : "q4_0";
}

size_t QuantBlockBytes(QuantType t) {
  return t == QuantType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
}

// Bit manipulation rather than _cvtss_sh: this part is built for the
// baseline x86-64, which has no F16C.
uint16_t F16FromF32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  uint32_t h;
  if (abs > 0x7F800000u) {  // NaN: quiet, the payload's top bits kept
    h = 0x7E00u | ((abs >> 13) & 0x3FFu);
  } else if (abs >= 0x477FF000u) {  // inf, or rounds past 65504 to it
    h = 0x7C00u;
  } else if (abs >= 0x38800000u) {  // normal: exponent bias 127 -> 15
    h = ShiftRoundedEven(abs - 0x38000000u, 13);
  } else if (abs >= 0x33000000u) {  // subnormal: units of 2^-24
    h = ShiftRoundedEven((abs & 0x7FFFFFu) | 0x800000u, 126 - (abs >> 23));
  } else {  // below 2^-25, or the tie at it: rounds to zero
    h = 0;
  }
  return static_cast<uint16_t>(sign | h);
}

float F32FromF16(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact
    const float v = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  // NaNs come out quiet, as F16C's vcvtph2ps makes them.
  const uint32_t bits =
      sign | (mantissa << 13) |
      (exponent != 31 ? (exponent + 112) << 23
                      : 0x7F800000u | (mantissa != 0 ? 0x400000u : 0));
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

bool QuantizeRow(QuantType t, const float* x, size_t k, void* blocks) {
  HWY_DASSERT(k % kQuantBlock == 0);
  return HWY_DYNAMIC_DISPATCH(QuantizeRowT)(t, x, k, blocks);
}

size_t QuantRowsBytes(QuantType t, size_t n, size_t k) {
  return n * QuantBlocksPerRow(k) * QuantBlockBytes(t);
}

size_t QuantizeRows(QuantType t, const float* x, size_t n, size_t k,
                    void* blocks, int num_threads) {
  HWY_DASSERT(k % kQuantBlock == 0);
  const size_t row_bytes = QuantRowsBytes(t, 1, k);
  auto* out = static_cast<uint8_t*>(blocks);
  const auto rows = static_cast<int64_t>(n);
  int64_t first_not_finite = rows;
  // clang-format off
#pragma omp parallel for num_threads(num_threads) schedule(static) \
    reduction(min : first_not_finite)
  // clang-format on
  for (int64_t r = 0; r < rows; ++r) {
    const auto i = static_cast<size_t>(r);
    if (!HWY_DYNAMIC_DISPATCH(QuantizeRowT)(t, x + i * k, k,
                                            out + i * row_bytes)) {
      first_not_finite = std::min(first_not_finite, r);
    }
  }
  return static_cast<size_t>(first_not_finite);
}

void DequantizeRow(QuantType t, const void* blocks, size_t k, float* y) {
  HWY_DASSERT(k % kQuantBlock == 0);
  constexpr size_t kHalf = kQuantBlock / 2;
  for (size_t b = 0; b < QuantBlocksPerRow(k); ++b, y += kQuantBlock) {
    if (t == QuantType::kQ8_0) {
      const BlockQ8_0& block = static_cast<const BlockQ8_0*>(blocks)[b];
      const float d = F32FromF16(block.d);
      for (size_t j = 0; j < kQuantBlock; ++j) y[j] = block.qs[j] * d;
    } else {
      const BlockQ4_0& block = static_cast<const BlockQ4_0*>(blocks)[b];
      const float d = F32FromF16(block.d);
      for (size_t j = 0; j < kHalf; ++j) {
        y[j] = ((block.qs[j] & 15) - 8) * d;
        y[j + kHalf] = ((block.qs[j] >> 4) - 8) * d;
      }
    }
  }
}

size_t QuantPackedBytes(QuantType t, size_t n, size_t k) {
  return QuantGroupCount(n) * QuantGroupBytes(t, k);
}

void PackQuantRows(QuantType t, const void* row_blocks, size_t n, size_t k,
                   void* packed, int num_threads) {
  HWY_DASSERT(k % kQuantBlock == 0);
  const auto* rows = static_cast<const uint8_t*>(row_blocks);
  auto* out = static_cast<uint8_t*>(packed);
  const auto groups = static_cast<int64_t>(QuantGroupCount(n));
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    PackGroup(t, rows, n, k, static_cast<size_t>(g), out);
  }
}

void UnpackQuantRows(QuantType t, const void* packed, size_t n, size_t k,
                     void* row_blocks) {
  const size_t nb = QuantBlocksPerRow(k), bytes = QuantBlockBytes(t);
  auto* out = static_cast<uint8_t*>(row_blocks);
  for (size_t j = 0; j < n; ++j) {
    const uint8_t* group = QuantGroupAt(t, static_cast<const uint8_t*>(packed),
                                        k, j / kQuantGroupRows);
    for (size_t b = 0; b < nb; ++b) {
      GatherBlock(t, group, b, j % kQuantGroupRows, out + (j * nb + b) * bytes);
    }
  }
}

size_t QuantRowsLinearScratchBytes(size_t rows, size_t k) {
  return QuantActsBytes(rows, k);
}

QuantReading QuantReadingOfThisCpu() {
  static const QuantReading reading =
      IsIntelCpu() ? QuantReading::kSideBySide : QuantReading::kGroupByGroup;
  return reading;
}

// x is quantized on the caller before the team starts (8 rows of k = 8192
// take microseconds); the groups then split as RowsLinear's units.
void QuantRowsLinear(QuantType t, const float* x, size_t rows, size_t k,
                     const void* packed, const float* bias, size_t n, float* y,
                     void* scratch, int num_threads, QuantReading reading) {
  HWY_DASSERT(rows >= 1 && rows <= kRowsLinearMaxRows);
  HWY_DASSERT(k % kQuantBlock == 0);
  HWY_DYNAMIC_DISPATCH(QuantizeActsT)(t, x, rows, k, scratch);
  const auto groups = HWY_DYNAMIC_DISPATCH(QuantGroupsT);
  const QuantGroupArgs args{QuantActsIn(scratch, rows, k),
                            rows,
                            k,
                            static_cast<const uint8_t*>(packed),
                            bias,
                            n,
                            y,
                            reading};
  const size_t least =
      reading == QuantReading::kSideBySide ? QuantGroupsSideBySide(rows) : 1;
  SplitUnits(QuantGroupCount(n), static_cast<uint32_t>(least),
             kMostGroupsPerRun, num_threads, [&](size_t first, size_t count) {
               groups(t, args, first, count);
             });
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
