// Per-target bodies of the quantized kernels (quant.h): the q8_0 and q4_0
// block quantizers, QuantRowsLinear's group kernels on three integer dot
// products (AVX-512 VNNI's vpdpbusd, AVX2's vpmaddubsw, plain C++), and the
// dequantization of packed weights. Included once per Highway target by
// quant.cc and by the tests.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_QUANT_INL_H_
#undef ATTN_KERNELS_QUANT_INL_H_
#else
#define ATTN_KERNELS_QUANT_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_layout.h"

// The dot-product kernels this target compiles: vpmaddubsw from AVX2 on,
// and on AVX-512 targets also vpdpbusd, in functions of their own compiled
// for VNNI (Highway 1.0.3 has no target that implies it: AVX3_DL needs
// HWY_WANT_AVX3_DL), which run only where the CPU reports it.
#undef ATTN_QUANT_MADDUBS
#undef ATTN_QUANT_VNNI
#undef ATTN_QUANT_VNNI_ATTR
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define ATTN_QUANT_MADDUBS 1
#else
#define ATTN_QUANT_MADDUBS 0
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define ATTN_QUANT_VNNI 1
#define ATTN_QUANT_VNNI_ATTR \
  __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#define ATTN_QUANT_VNNI 0
#endif

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------ Quantizers

// roundf(v): halves away from zero. hn::Round ties to even, and
// Trunc(v + 0.5) is wrong where the add rounds up (0.49999997 + 0.5 is 1).
// v - Trunc(v) is exact.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V RoundHalfAway(D d, V v) {
  const V t = hn::Trunc(v);
  const auto up = hn::Ge(hn::Abs(hn::Sub(v, t)), hn::Set(d, 0.5f));
  return hn::IfThenElse(up, hn::Add(t, hn::CopySignToAbs(hn::Set(d, 1.0f), v)),
                        t);
}

// max |x[i]| over one block.
template <class D>
HWY_INLINE float BlockAbsMax(D d, const float* x) {
  auto m = hn::Zero(d);
  for (size_t i = 0; i < kQuantBlock; i += hn::Lanes(d)) {
    m = hn::Max(m, hn::Abs(hn::LoadU(d, x + i)));
  }
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

// One block of x as quantize_row_q8_0_ref: its quants and fp16 scale;
// returns the sum of the quants. The scale divides by 127 and the quants
// multiply by its fp32 reciprocal, as the reference does (not by the fp16
// scale stored).
template <class D>
HWY_INLINE int32_t QuantizeBlockQ8(D d, const float* x, uint16_t* d16,
                                   int8_t* qs) {
  const float scale = BlockAbsMax(d, x) / 127;
  // A scale below 1/FLT_MAX has an infinite reciprocal, whose products the
  // reference converts to int8 outside the range C defines: 0 on x86.
  const float reciprocal = scale != 0.0f ? 1.0f / scale : 0.0f;
  const float inv = std::isinf(reciprocal) ? 0.0f : reciprocal;
  *d16 = F16FromF32(scale);
  const hn::RebindToSigned<D> di;
  const hn::Rebind<int8_t, D> d8;
  auto sum = hn::Zero(di);
  for (size_t i = 0; i < kQuantBlock; i += hn::Lanes(d)) {
    const auto v = hn::Mul(hn::LoadU(d, x + i), hn::Set(d, inv));
    const auto q = hn::ConvertTo(di, RoundHalfAway(d, v));
    sum = hn::Add(sum, q);
    hn::StoreU(hn::DemoteTo(d8, q), d8, qs + i);
  }
  return hn::GetLane(hn::SumOfLanes(di, sum));
}

// q4_0's `max`: the first value of the largest magnitude, where the
// reference's scan (`if (amax < fabsf(v))` from amax = 0) last updates it;
// +0 if none is above 0.
inline float FirstOfLargestMagnitude(const float* x, float amax) {
  if (!(amax > 0.0f)) return 0.0f;
  size_t j = 0;
  while (j + 1 < kQuantBlock && std::fabs(x[j]) != amax) ++j;
  return x[j];
}

// One block of x as quantize_row_q4_0_ref. x * id + 8.5f rounds twice, as
// there: quant.cc is compiled with -ffp-contract=off.
template <class D>
HWY_INLINE void QuantizeBlockQ4(D d, const float* x, BlockQ4_0* block) {
  const float scale = FirstOfLargestMagnitude(x, BlockAbsMax(d, x)) / -8;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  block->d = F16FromF32(scale);
  if (std::isinf(inv)) {  // as in QuantizeBlockQ8: every quant 0 on x86
    std::fill(block->qs, block->qs + kQuantBlock / 2, uint8_t{0});
    return;
  }
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint8_t, D> d8;
  const auto nibble = [&](const float* p) {
    const auto v =
        hn::Add(hn::Mul(hn::LoadU(d, p), hn::Set(d, inv)), hn::Set(d, 8.5f));
    return hn::Min(hn::ConvertTo(di, v), hn::Set(di, 15));  // truncates
  };
  constexpr size_t kHalf = kQuantBlock / 2;
  for (size_t i = 0; i < kHalf; i += hn::Lanes(d)) {
    const auto pair =
        hn::Or(nibble(x + i), hn::ShiftLeft<4>(nibble(x + kHalf + i)));
    hn::StoreU(hn::DemoteTo(d8, pair), d8, block->qs + i);
  }
}

// Whether every value of one block is finite.
template <class D>
HWY_INLINE bool BlockFinite(D d, const float* x) {
  auto finite = hn::IsFinite(hn::LoadU(d, x));
  for (size_t i = hn::Lanes(d); i < kQuantBlock; i += hn::Lanes(d)) {
    finite = hn::And(finite, hn::IsFinite(hn::LoadU(d, x + i)));
  }
  return hn::AllTrue(d, finite);
}

// QuantizeRow's body: k / 32 blocks of type t; false if some x is not
// finite.
template <class D>
HWY_INLINE bool QuantizeRowBlocks(D d, QuantType t, const float* x, size_t k,
                                  void* blocks) {
  bool finite = true;
  for (size_t b = 0; b < QuantBlocksPerRow(k); ++b) {
    const float* xb = x + b * kQuantBlock;
    if (!BlockFinite(d, xb)) {  // converting NaN to int is undefined
      finite = false;
      continue;
    }
    if (t == QuantType::kQ8_0) {
      BlockQ8_0* block = static_cast<BlockQ8_0*>(blocks) + b;
      QuantizeBlockQ8(d, xb, &block->d, block->qs);
    } else {
      QuantizeBlockQ4(d, xb, static_cast<BlockQ4_0*>(blocks) + b);
    }
  }
  return finite;
}

// x [rows, k] quantized for QuantRowsLinear on weights of type t.
template <class D>
HWY_INLINE void QuantizeActs(D d, QuantType t, const float* x, size_t rows,
                             size_t k, QuantActs acts) {
  const size_t nb = QuantBlocksPerRow(k);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t b = 0; b < nb; ++b) {
      const size_t i = r * k + b * kQuantBlock;
      uint16_t d16;
      const size_t at = b * rows + r;
      const int32_t sum =
          QuantizeBlockQ8(d, x + i, &d16, acts.q + at * kQuantBlock);
      acts.d[at] = F32FromF16(d16);
      acts.corr[at] = -QuantWeightOffset(t) * sum;
    }
  }
}

// ------------------------------------------------ QuantRowsLinear kernels

// The integer dot products a group kernel runs on.
enum class QuantDot { kPortable, kMaddubs, kVnni };

// Row `lane`'s weights of one tile (signed: q8_0's byte - 128, q4_0's
// nibble - 8) dotted with the block's quants of x.
inline int32_t PortableDot(QuantType t, const uint8_t* tile, size_t lane,
                           const int8_t* xq) {
  int32_t sum = 0;
  for (size_t c = 0; c < QuantTileChunks(t); ++c) {
    for (size_t i = 0; i < kQuantLaneBytes; ++i) {
      const int32_t byte =
          tile[c * kQuantChunkBytes + lane * kQuantLaneBytes + i];
      const size_t e = c * kQuantLaneBytes + i;
      if (t == QuantType::kQ8_0) {
        sum += (byte - 128) * xq[e];
      } else {
        sum += ((byte & 15) - 8) * xq[e] + ((byte >> 4) - 8) * xq[16 + e];
      }
    }
  }
  return sum;
}

// Group g's outputs (columns 16g + lane) of every row, one at a time, in
// plain C++: the targets without vpmaddubsw (SSE4 and older).
inline void PortableGroup(QuantType t, const QuantGroupArgs& a, size_t g) {
  const uint8_t* group = QuantGroupAt(t, a.packed, a.k, g);
  const size_t nb = QuantBlocksPerRow(a.k), j0 = g * kQuantGroupRows;
  const size_t columns = std::min(kQuantGroupRows, a.n - j0);
  for (size_t r = 0; r < a.rows; ++r) {
    for (size_t lane = 0; lane < columns; ++lane) {
      float acc = 0.0f;
      for (size_t b = 0; b < nb; ++b) {
        uint16_t d16;
        std::memcpy(&d16, QuantScalesAt(t, group, b) + lane * 2, 2);
        const size_t at = b * a.rows + r;
        const float s = F32FromF16(d16) * a.acts.d[at];
        const int32_t isum = PortableDot(t, QuantTileAt(t, group, b), lane,
                                         a.acts.q + at * kQuantBlock);
        acc += static_cast<float>(isum) * s;
      }
      a.y[r * a.n + j0 + lane] = a.bias ? a.bias[j0 + lane] + acc : acc;
    }
  }
}

// Group kernels of this many rows or more prefetch their weights
// kQuantPrefetchBytes ahead: with 8 rows, 64 vpdpbusd a 544-byte tile, too
// few lines are in flight for memory's rate. A thread of a Zen 5 read
// q8_0 weights at 8 rows 50% faster 8 KiB ahead (4 and 16 KiB: less); at
// 1 row the CPU's own prefetchers keep up, and prefetching only cost (q8_0
// 5-20% slower).
constexpr size_t kQuantPrefetchMinRows = 2;
constexpr size_t kQuantPrefetchBytes = 8192;

// Prefetches the lines kQuantPrefetchBytes past a tile into L2.
HWY_INLINE void PrefetchAhead(QuantType t, const uint8_t* tile) {
  for (size_t c = 0; c < QuantTileChunks(t); ++c) {
    PrefetchL2(tile + kQuantPrefetchBytes + c * kQuantChunkBytes);
  }
}

// Four bytes of x's quants, to broadcast to every 32-bit lane.
HWY_INLINE int32_t LoadQuad(const int8_t* p) {
  int32_t quad;
  std::memcpy(&quad, p, sizeof(quad));
  return quad;
}

// The group kernels hold one accumulator per row in arrays indexed only by
// constants (folds over Rs...): GCC 12 keeps arrays indexed by a loop's
// variable on the stack, unrolled or not, and 8 rows then ran at a third
// of the speed.

#if ATTN_QUANT_MADDUBS

// Rows of one vpmaddubsw tile: its accumulators and isums (8 ymm) leave
// room for the weights and x in AVX2's 16 registers; further rows read the
// group again, from L1 or L2.
constexpr size_t kMaddubsTileRows = 2;

// An empty asm that takes v and gives it back: GCC 12 reassociates the
// integer sums of a fully unrolled tile into trees whose partial sums no
// longer fit AVX2's 16 registers (300 spills for 128 vpmaddubsw); this
// keeps each sum in program order.
HWY_INLINE void KeepInOrder(__m256i& v) {
#if HWY_COMPILER_GCC || HWY_COMPILER_CLANG
  asm("" : "+x"(v));
#else
  (void)v;
#endif
}

// acc + the dot of signed weights w (|w| in aw) with the 4 bytes at x, in
// every 32-bit lane: |w| times x with w's sign, since vpmaddubsw multiplies
// unsigned by signed bytes; |w| <= 128 and |x| <= 127 keep each pair's sum
// within int16.
HWY_INLINE __m256i MaddubsSigned(__m256i acc, __m256i w, __m256i aw,
                                 const int8_t* x) {
  const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(LoadQuad(x)), w);
  const __m256i pairs = _mm256_maddubs_epi16(aw, xs);
  acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  KeepInOrder(acc);
  return acc;
}

// The signed q8_0 weights of one tile's chunk c, lanes 8h to 8h + 8.
HWY_INLINE __m256i SignedHalfQ8(const uint8_t* tile, size_t c, size_t h) {
  const __m256i stored = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(tile + c * kQuantChunkBytes + h * 32));
  return _mm256_xor_si256(stored, _mm256_set1_epi8(-128));
}

// isum of one q8_0 tile for rows Rs of x (xq: the first row's quants of the
// block, QuantActs' rows 32 apart), lanes 8h to 8h + 8 in isum[r][h]: the
// signed weights times x, no offset to take off.
template <size_t... Rs>
HWY_INLINE void MaddubsTileQ8(const uint8_t* tile, const int8_t* xq,
                              __m256i (&isum)[sizeof...(Rs)][2],
                              std::index_sequence<Rs...>) {
  ((isum[Rs][0] = isum[Rs][1] = _mm256_setzero_si256()), ...);
  for (size_t c = 0; c < QuantTileChunks(QuantType::kQ8_0); ++c) {
    const __m256i w0 = SignedHalfQ8(tile, c, 0), w1 = SignedHalfQ8(tile, c, 1);
    const __m256i aw0 = _mm256_abs_epi8(w0), aw1 = _mm256_abs_epi8(w1);
    ((isum[Rs][0] =
          MaddubsSigned(isum[Rs][0], w0, aw0, xq + Rs * kQuantBlock + c * 4),
      isum[Rs][1] =
          MaddubsSigned(isum[Rs][1], w1, aw1, xq + Rs * kQuantBlock + c * 4)),
     ...);
  }
}

// sum16 + the nibbles q in [0, 15] times x's 4 + 4 bytes at x and x + 16.
HWY_INLINE __m256i MaddubsNibbles(__m256i sum16, __m256i lo, __m256i hi,
                                  const int8_t* x) {
  const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(LoadQuad(x)));
  const __m256i p_hi =
      _mm256_maddubs_epi16(hi, _mm256_set1_epi32(LoadQuad(x + 16)));
  sum16 = _mm256_add_epi16(sum16, _mm256_add_epi16(p_lo, p_hi));
  KeepInOrder(sum16);
  return sum16;
}

// As MaddubsTileQ8 for q4_0: nibbles times x summed in int16 (8 pairs of
// at most 15 * 127 each: 30480), then minus 8 times x's sum (corr: the
// first row's, QuantActs' rows side by side).
template <size_t... Rs>
HWY_INLINE void MaddubsTileQ4(const uint8_t* tile, const int8_t* xq,
                              const int32_t* corr,
                              __m256i (&isum)[sizeof...(Rs)][2],
                              std::index_sequence<Rs...>) {
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256i sum16[sizeof...(Rs)][2];
  ((sum16[Rs][0] = sum16[Rs][1] = _mm256_setzero_si256()), ...);
  for (size_t c = 0; c < QuantTileChunks(QuantType::kQ4_0); ++c) {
    const uint8_t* chunk = tile + c * kQuantChunkBytes;
    const __m256i raw0 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk));
    const __m256i raw1 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32));
    const __m256i lo0 = _mm256_and_si256(raw0, low),
                  lo1 = _mm256_and_si256(raw1, low);
    const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(raw0, 4), low);
    const __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(raw1, 4), low);
    ((sum16[Rs][0] =
          MaddubsNibbles(sum16[Rs][0], lo0, hi0, xq + Rs * kQuantBlock + c * 4),
      sum16[Rs][1] = MaddubsNibbles(sum16[Rs][1], lo1, hi1,
                                    xq + Rs * kQuantBlock + c * 4)),
     ...);
  }
  ((isum[Rs][0] = _mm256_add_epi32(_mm256_set1_epi32(corr[Rs]),
                                   _mm256_madd_epi16(sum16[Rs][0], ones)),
    isum[Rs][1] = _mm256_add_epi32(_mm256_set1_epi32(corr[Rs]),
                                   _mm256_madd_epi16(sum16[Rs][1], ones))),
   ...);
}

// Stores the first `columns` of acc (+ bias, if any) to y.
HWY_INLINE void StoreColumns8(__m256 acc, const float* bias, size_t columns,
                              float* y) {
  if (columns >= 8) {
    _mm256_storeu_ps(y, bias ? _mm256_add_ps(_mm256_loadu_ps(bias), acc) : acc);
    return;
  }
  alignas(32) float buf[8];
  _mm256_store_ps(buf, acc);
  for (size_t i = 0; i < columns; ++i) y[i] = bias ? bias[i] + buf[i] : buf[i];
}

// acc + isum * (dw * dx) for 8 outputs, one FMA.
HWY_INLINE __m256 AccumulateBlock8(__m256 acc, __m256i isum, __m256 dw,
                                   float dx) {
  const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(dx));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc);
}

// Rows row + Rs of group g on vpmaddubsw: per block, sum += isum * (dw *
// dx) in fp32 with one FMA, 8 outputs to a vector; prefetching the weights
// ahead if kPrefetch.
template <QuantType kType, bool kPrefetch, size_t... Rs>
HWY_INLINE void MaddubsTile(const QuantGroupArgs& a, size_t g, size_t row,
                            std::index_sequence<Rs...> rows) {
  const uint8_t* group = QuantGroupAt(kType, a.packed, a.k, g);
  const size_t nb = QuantBlocksPerRow(a.k), j0 = g * kQuantGroupRows;
  __m256 acc[sizeof...(Rs)][2];
  ((acc[Rs][0] = acc[Rs][1] = _mm256_setzero_ps()), ...);
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* tile = QuantTileAt(kType, group, b);
    if constexpr (kPrefetch) PrefetchAhead(kType, tile);
    const size_t first = b * a.rows + row;  // row `row` of block b
    const int8_t* xq = a.acts.q + first * kQuantBlock;
    const float* dx = a.acts.d + first;
    __m256i isum[sizeof...(Rs)][2];
    if constexpr (kType == QuantType::kQ8_0) {
      MaddubsTileQ8(tile, xq, isum, rows);
    } else {
      MaddubsTileQ4(tile, xq, a.acts.corr + first, isum, rows);
    }
    const auto* scales =
        reinterpret_cast<const __m128i*>(QuantScalesAt(kType, group, b));
    const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128(scales));
    const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128(scales + 1));
    ((acc[Rs][0] = AccumulateBlock8(acc[Rs][0], isum[Rs][0], dw0, dx[Rs]),
      acc[Rs][1] = AccumulateBlock8(acc[Rs][1], isum[Rs][1], dw1, dx[Rs])),
     ...);
  }
  const size_t columns = std::min(kQuantGroupRows, a.n - j0);
  const float* bias = a.bias ? a.bias + j0 : nullptr;
  float* y = a.y + row * a.n + j0;
  ((StoreColumns8(acc[Rs][0], bias, columns, y + Rs * a.n),
    columns > 8 ? StoreColumns8(acc[Rs][1], bias ? bias + 8 : nullptr,
                                columns - 8, y + Rs * a.n + 8)
                : void()),
   ...);
}

// Group g of kRows rows, in tiles of kMaddubsTileRows: the first streams
// the group from memory (prefetching as VnniBlock), the others read it
// from L1 or L2.
template <size_t kRows, QuantType kType>
HWY_INLINE void MaddubsGroup(const QuantGroupArgs& a, size_t g) {
  constexpr size_t kTile = std::min(kRows, kMaddubsTileRows);
  constexpr bool kPrefetch = kRows >= kQuantPrefetchMinRows;
  MaddubsTile<kType, kPrefetch>(a, g, 0, std::make_index_sequence<kTile>());
  size_t row = kTile;
  for (; row + kTile <= kRows; row += kTile) {
    MaddubsTile<kType, false>(a, g, row, std::make_index_sequence<kTile>());
  }
  if constexpr (kRows % kTile != 0) {
    MaddubsTile<kType, false>(a, g, row,
                              std::make_index_sequence<kRows % kTile>());
  }
}

#endif  // ATTN_QUANT_MADDUBS

#if ATTN_QUANT_VNNI

// acc + the dot of w's unsigned bytes with the 4 signed bytes at x in every
// 32-bit lane: vpdpbusd with x broadcast from memory, one instruction where
// GCC 12 emits a vpbroadcastd and a vpdpbusd for the intrinsics.
ATTN_QUANT_VNNI_ATTR HWY_INLINE __m512i DotQuad(__m512i acc, __m512i w,
                                                const int8_t* x) {
#if HWY_COMPILER_GCC || HWY_COMPILER_CLANG
  struct Quad {
    int8_t bytes[4];
  };
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const Quad*>(x)));
  return acc;
#else
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(LoadQuad(x)));
#endif
}

// isum of one tile (block b of 16 rows) for rows Rs of x (xq: row 0's
// quants of the block, and corr, as QuantActs lays them out): the stored
// unsigned weights times x by vpdpbusd, from -offset times x's sum. Two
// chains a row, the even chunks' and the odd's (q4_0: the low nibbles' and
// the high), halve the latency a block's isum waits for.
template <QuantType kType, size_t... Rs>
ATTN_QUANT_VNNI_ATTR HWY_INLINE void VnniTile(const uint8_t* tile,
                                              const int8_t* xq,
                                              const int32_t* corr,
                                              __m512i (&isum)[sizeof...(Rs)],
                                              std::index_sequence<Rs...>) {
  __m512i other[sizeof...(Rs)];
  ((isum[Rs] = _mm512_set1_epi32(corr[Rs]), other[Rs] = _mm512_setzero_si512()),
   ...);
  if constexpr (kType == QuantType::kQ8_0) {
    for (size_t c = 0; c < QuantTileChunks(kType); c += 2) {
      const __m512i even = _mm512_loadu_si512(tile + c * kQuantChunkBytes);
      const __m512i odd = _mm512_loadu_si512(tile + (c + 1) * kQuantChunkBytes);
      ((isum[Rs] = DotQuad(isum[Rs], even, xq + Rs * kQuantBlock + c * 4),
        other[Rs] = DotQuad(other[Rs], odd, xq + Rs * kQuantBlock + c * 4 + 4)),
       ...);
    }
  } else {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (size_t c = 0; c < QuantTileChunks(kType); ++c) {
      const __m512i raw = _mm512_loadu_si512(tile + c * kQuantChunkBytes);
      const __m512i lo = _mm512_and_si512(raw, low);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
      ((isum[Rs] = DotQuad(isum[Rs], lo, xq + Rs * kQuantBlock + c * 4),
        other[Rs] = DotQuad(other[Rs], hi, xq + Rs * kQuantBlock + c * 4 + 16)),
       ...);
    }
  }
  ((isum[Rs] = _mm512_add_epi32(isum[Rs], other[Rs])), ...);
}

// acc + isum * (dw * dx) for 16 outputs, one FMA.
ATTN_QUANT_VNNI_ATTR HWY_INLINE __m512 AccumulateBlock16(__m512 acc,
                                                         __m512i isum,
                                                         __m512 dw, float dx) {
  const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc);
}

// acc[Rs] += block b of the group at `group` for rows Rs on vpdpbusd:
// isum * (dw * dx) in fp32 with one FMA, 16 outputs to a vector.
template <QuantType kType, size_t... Rs>
ATTN_QUANT_VNNI_ATTR HWY_INLINE void VnniBlock(
    const QuantGroupArgs& a, const uint8_t* group, size_t b,
    __m512 (&acc)[sizeof...(Rs)], std::index_sequence<Rs...> rows) {
  if constexpr (sizeof...(Rs) >= kQuantPrefetchMinRows) {
    PrefetchAhead(kType, QuantTileAt(kType, group, b));
  }
  __m512i isum[sizeof...(Rs)];
  const size_t first = b * sizeof...(Rs);  // row 0 of block b: all rows
  VnniTile<kType>(QuantTileAt(kType, group, b), a.acts.q + first * kQuantBlock,
                  a.acts.corr + first, isum, rows);
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(QuantScalesAt(kType, group, b))));
  ((acc[Rs] = AccumulateBlock16(acc[Rs], isum[Rs], dw, a.acts.d[first + Rs])),
   ...);
}

template <size_t... Rs>
ATTN_QUANT_VNNI_ATTR HWY_INLINE void VnniZero(__m512 (&acc)[sizeof...(Rs)],
                                              std::index_sequence<Rs...>) {
  ((acc[Rs] = _mm512_setzero_ps()), ...);
}

// Group g's outputs for rows Rs, plus the bias.
template <size_t... Rs>
ATTN_QUANT_VNNI_ATTR HWY_INLINE void VnniStore(
    const QuantGroupArgs& a, size_t g, const __m512 (&acc)[sizeof...(Rs)],
    std::index_sequence<Rs...>) {
  const size_t j0 = g * kQuantGroupRows;
  const size_t columns = std::min(kQuantGroupRows, a.n - j0);
  const __mmask16 valid = static_cast<__mmask16>((1u << columns) - 1);
  const __m512 bias =
      a.bias ? _mm512_maskz_loadu_ps(valid, a.bias + j0) : _mm512_setzero_ps();
  ((_mm512_mask_storeu_ps(a.y + Rs * a.n + j0, valid,
                          a.bias ? _mm512_add_ps(bias, acc[Rs]) : acc[Rs])),
   ...);
}

// Groups g + Gs for rows Rs, block by block: each group is a stream of its
// own, so that one thread reads as many streams at once.
template <QuantType kType, size_t... Gs, size_t... Rs>
ATTN_QUANT_VNNI_ATTR HWY_INLINE void VnniGroupsSideBySide(
    const QuantGroupArgs& a, size_t g, std::index_sequence<Gs...>,
    std::index_sequence<Rs...> rows) {
  const uint8_t* group[] = {QuantGroupAt(kType, a.packed, a.k, g + Gs)...};
  __m512 acc[sizeof...(Gs)][sizeof...(Rs)];
  (VnniZero(acc[Gs], rows), ...);
  for (size_t b = 0; b < QuantBlocksPerRow(a.k); ++b) {
    (VnniBlock<kType>(a, group[Gs], b, acc[Gs], rows), ...);
  }
  (VnniStore(a, g + Gs, acc[Gs], rows), ...);
}

// Groups [first, first + count), kSide side by side while that many are
// left, then half as many.
template <size_t kRows, QuantType kType, size_t kSide>
ATTN_QUANT_VNNI_ATTR HWY_NOINLINE void VnniGroups(const QuantGroupArgs& a,
                                                  size_t first, size_t count) {
  const size_t end = first + count;
  size_t g = first;
  for (; g + kSide <= end; g += kSide) {
    VnniGroupsSideBySide<kType>(a, g, std::make_index_sequence<kSide>(),
                                std::make_index_sequence<kRows>());
  }
  if constexpr (kSide > 1) {
    if (g < end) VnniGroups<kRows, kType, kSide / 2>(a, g, end - g);
  }
}

#endif  // ATTN_QUANT_VNNI

// Groups [first, first + count) of kRows rows on the dot products kDot,
// which this target must compile.
template <QuantDot kDot, size_t kRows, QuantType kType>
HWY_INLINE void QuantGroupsOf(const QuantGroupArgs& a, size_t first,
                              size_t count) {
  if constexpr (kDot == QuantDot::kVnni) {
#if ATTN_QUANT_VNNI
    if (a.reading == QuantReading::kSideBySide) {
      VnniGroups<kRows, kType, QuantGroupsSideBySide(kRows)>(a, first, count);
    } else {
      VnniGroups<kRows, kType, 1>(a, first, count);
    }
#else
    HWY_ABORT("VNNI kernels are not compiled for this target");
#endif
  } else if constexpr (kDot == QuantDot::kMaddubs) {
#if ATTN_QUANT_MADDUBS
    for (size_t g = first; g < first + count; ++g) {
      MaddubsGroup<kRows, kType>(a, g);
    }
#else
    HWY_ABORT("vpmaddubsw kernels are not compiled for this target");
#endif
  } else {
    for (size_t g = first; g < first + count; ++g) PortableGroup(kType, a, g);
  }
}

// fn(std::integral_constant<size_t, rows>()) for 1 <= rows <= 8.
template <class Fn>
HWY_INLINE void WithRows(size_t rows, const Fn& fn) {
  switch (rows) {
    case 1:
      return fn(std::integral_constant<size_t, 1>());
    case 2:
      return fn(std::integral_constant<size_t, 2>());
    case 3:
      return fn(std::integral_constant<size_t, 3>());
    case 4:
      return fn(std::integral_constant<size_t, 4>());
    case 5:
      return fn(std::integral_constant<size_t, 5>());
    case 6:
      return fn(std::integral_constant<size_t, 6>());
    case 7:
      return fn(std::integral_constant<size_t, 7>());
    default:
      return fn(std::integral_constant<size_t, 8>());
  }
}

// Groups [first, first + count) of y for QuantRowsLinear on kDot.
template <QuantDot kDot>
HWY_INLINE void QuantGroups(QuantType t, const QuantGroupArgs& a, size_t first,
                            size_t count) {
  WithRows(a.rows, [&](auto rows) {
    constexpr size_t kRows = decltype(rows)::value;
    if (t == QuantType::kQ8_0) {
      QuantGroupsOf<kDot, kRows, QuantType::kQ8_0>(a, first, count);
    } else {
      QuantGroupsOf<kDot, kRows, QuantType::kQ4_0>(a, first, count);
    }
  });
}

// The fastest dot products of this target on this CPU.
inline QuantDot BestQuantDot() {
#if ATTN_QUANT_VNNI
  if (HasAvx512Vnni()) return QuantDot::kVnni;
#endif
  return ATTN_QUANT_MADDUBS ? QuantDot::kMaddubs : QuantDot::kPortable;
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_QUANT_INL_H_
