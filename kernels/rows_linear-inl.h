// Per-target body of RowsLinear (rows_linear.h).

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_ROWS_LINEAR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_ROWS_LINEAR_INL_H_
#undef ATTN_KERNELS_ROWS_LINEAR_INL_H_
#else
#define ATTN_KERNELS_ROWS_LINEAR_INL_H_
#endif

#include <stddef.h>

#include <algorithm>
#include <cstring>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/rows_linear.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) weights at p as floats. The tiles below take w as float or bf16
// through these two loads and nothing else: bf16 widens to f32 exactly (a
// 16-bit shift), so every product and sum is the one the f32 path makes on
// the widened weights, bit for bit.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}

// The first count < Lanes(d) weights at p, zeros in the other lanes; reads
// nothing past p + count. Once per column and block of k: a cold path.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeightsTail(D d, const float* p, size_t count) {
  return LoadTail(d, p, count);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeightsTail(D d, const hwy::bfloat16_t* p,
                                      size_t count) {
  const hn::Rebind<hwy::bfloat16_t, D> dbf;
  alignas(64) hwy::bfloat16_t buf[hn::MaxLanes(dbf)] = {};
  std::memcpy(buf, p, std::min(count, hn::MaxLanes(dbf)) * sizeof(*p));
  return hn::PromoteTo(d, hn::Load(dbf, buf));
}

// Hints that p will be read soon, into L2 rather than L1. The tiles below
// stream w slower than the memory delivers it, and the hardware prefetcher
// does not run far enough ahead of their several streams; prefetches into
// L1 (hwy::Prefetch) gained nothing on Zen 5, those into L2 a third.
template <typename T>
HWY_INLINE void PrefetchL2(const T* p) {
#if HWY_COMPILER_GCC || HWY_COMPILER_CLANG
  __builtin_prefetch(p, 0, 1);  // prefetcht2 on x86
#else
  hwy::Prefetch(p);
#endif
}

// Vector registers of the target: x86 before AVX-512 has 16, the others 32.
// A tile keeps its accumulators in them, so this bounds its rows.
constexpr size_t kVectorRegisters =
    (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 16 : 32;

// One k block [k0, k1) of a tile: rows [g, g + kTileRows) of the kRows rows
// in xb (kBlock floats apart) by kCols columns of w (wc), accumulators in
// acc[col * kRows + row] (vectors; loaded unless the block is the first,
// stored after; only the first `valid` columns are stored, the others
// repeat a column of a short run). While streaming, also prefetches pf[c] at
// the same offsets (when `prefetch`): the next column of each of the tile's
// streams. Every output is one vector accumulator over k in order, then its
// lanes summed (RowsLinearColumnsT): the same bits whatever tile computes it.
template <size_t kTileRows, size_t kCols, size_t kRows, size_t kBlock, class D,
          typename TW>
HWY_INLINE void RowsLinearTile(D d, const float* xb, size_t g, size_t k0,
                               size_t k1, const TW* const* wc,
                               const TW* const* pf, bool prefetch,
                               const size_t* col, size_t valid, float* acc) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V sum[kTileRows][kCols];
  for (size_t r = 0; r < kTileRows; ++r) {
    for (size_t c = 0; c < kCols; ++c) {
      sum[r][c] = k0 == 0 ? hn::Zero(d)
                          : hn::Load(d, acc + (col[c] * kRows + g + r) * N);
    }
  }
  size_t i = k0;
  for (; i + N <= k1; i += N) {
    V wv[kCols];
    for (size_t c = 0; c < kCols; ++c) {
      if (prefetch) PrefetchL2(pf[c] + i);
      wv[c] = LoadWeights(d, wc[c] + i);
    }
    for (size_t r = 0; r < kTileRows; ++r) {
      const V xv = hn::Load(d, xb + (g + r) * kBlock + i - k0);
      for (size_t c = 0; c < kCols; ++c) {
        sum[r][c] = hn::MulAdd(xv, wv[c], sum[r][c]);
      }
    }
  }
  if (i < k1) {  // k's tail, zero-filled (blocks are whole vectors)
    V wv[kCols];
    for (size_t c = 0; c < kCols; ++c) {
      wv[c] = LoadWeightsTail(d, wc[c] + i, k1 - i);
    }
    for (size_t r = 0; r < kTileRows; ++r) {
      const V xv = LoadTail(d, xb + (g + r) * kBlock + i - k0, k1 - i);
      for (size_t c = 0; c < kCols; ++c) {
        sum[r][c] = hn::MulAdd(xv, wv[c], sum[r][c]);
      }
    }
  }
  for (size_t r = 0; r < kTileRows; ++r) {
    for (size_t c = 0; c < valid; ++c) {
      hn::Store(sum[r][c], d, acc + (col[c] * kRows + g + r) * N);
    }
  }
}

// Columns [j0, j1) (at most kRowsLinearColumns) of y for kRows rows. The
// columns are cut into kCols runs of consecutive columns, and a tile takes
// the t-th column of every run: kCols streams through w, each reading
// consecutive memory for the whole run (the access pattern that reads w at
// the machine's bandwidth; kCols adjacent columns instead are kCols short
// streams that restart every column). Each vector of w serves every row:
// with 32 vector registers all rows are one tile, so w is loaded once (8
// rows by 4 columns: the compiler keeps 30 of the 32 accumulators in
// registers; on Zen 4 a GPT-2 decode step's linears of 8 rows take 29 ms,
// 40 ms in tiles of 4 rows, which measured faster than 3 or 2 columns);
// with 16, the rows go through in tiles of at most 4 while the tile's w is
// in L1. k is taken in blocks of kBlock so
// that the rows' slices of x stay in L1; each output's accumulator is kept
// between blocks, so it still sums over k in order.
template <size_t kRows, size_t kCols, class D, typename TW>
HWY_INLINE void RowsLinearColumnsT(D d, const float* x, size_t k, const TW* w,
                                   const float* bias, size_t n, size_t j0,
                                   size_t j1, float* y) {
  using V = hn::Vec<D>;
  constexpr size_t kBlock = 768;
  constexpr size_t kTileRows = kVectorRegisters >= 32 ? kRows : 4;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float acc[kRowsLinearColumns * kRows * HWY_MAX_BYTES / 4];
  // The block's slices of x, side by side: rows of a large k lie a multiple
  // of 4 KiB apart, so in place they would share L1 sets with each other.
  HWY_ALIGN float xb[kRows * kBlock];
  const size_t run = (j1 - j0 + kCols - 1) / kCols;
  for (size_t k0 = 0; k0 < k; k0 += kBlock) {
    const size_t k1 = std::min(k, k0 + kBlock);
    for (size_t r = 0; r < kRows; ++r) {
      std::copy(x + r * k + k0, x + r * k + k1, xb + r * kBlock);
    }
    for (size_t t = 0; t < run; ++t) {
      size_t col[kCols];  // relative to j0
      const TW* wc[kCols];
      const TW* pf[kCols];
      for (size_t c = 0; c < kCols; ++c) {
        col[c] = std::min(c * run + t, j1 - j0 - 1);
        wc[c] = w + (j0 + col[c]) * k;
        pf[c] = w + std::min(j0 + col[c] + 1, n - 1) * k;
      }
      // Runs past j1 - j0 repeat its last column: the first `valid` count.
      const size_t valid = std::min(kCols, (j1 - j0 - t + run - 1) / run);
      size_t g = 0;
      for (; g + kTileRows <= kRows; g += kTileRows) {
        RowsLinearTile<kTileRows, kCols, kRows, kBlock>(
            d, xb, g, k0, k1, wc, pf, g == 0, col, valid, acc);
      }
      if constexpr (kRows % kTileRows != 0) {
        RowsLinearTile<kRows % kTileRows, kCols, kRows, kBlock>(
            d, xb, g, k0, k1, wc, pf, g == 0, col, valid, acc);
      }
    }
  }
  for (size_t j = j0; j < j1; ++j) {
    for (size_t r = 0; r < kRows; ++r) {
      const V sum = hn::Load(d, acc + ((j - j0) * kRows + r) * N);
      y[r * n + j] =
          (bias ? bias[j] : 0.0f) + hn::GetLane(hn::SumOfLanes(d, sum));
    }
  }
}

// Columns [j0, j1) of y. One row streams eight runs of columns at once, and
// more rows four, enough to read w at the machine's bandwidth (Zen 5: one
// row at stream_read's rate; eight rows at about the FMA units' rate).
template <class D, typename TW>
HWY_INLINE void RowsLinearT(D d, const float* x, size_t rows, size_t k,
                            const TW* w, const float* bias, size_t n, size_t j0,
                            size_t j1, float* y) {
  switch (rows) {
    case 1:
      return RowsLinearColumnsT<1, 8>(d, x, k, w, bias, n, j0, j1, y);
    case 2:
      return RowsLinearColumnsT<2, 4>(d, x, k, w, bias, n, j0, j1, y);
    case 3:
      return RowsLinearColumnsT<3, 4>(d, x, k, w, bias, n, j0, j1, y);
    case 4:
      return RowsLinearColumnsT<4, 4>(d, x, k, w, bias, n, j0, j1, y);
    case 5:
      return RowsLinearColumnsT<5, 4>(d, x, k, w, bias, n, j0, j1, y);
    case 6:
      return RowsLinearColumnsT<6, 4>(d, x, k, w, bias, n, j0, j1, y);
    case 7:
      return RowsLinearColumnsT<7, 4>(d, x, k, w, bias, n, j0, j1, y);
    default:
      return RowsLinearColumnsT<8, 4>(d, x, k, w, bias, n, j0, j1, y);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ROWS_LINEAR_INL_H_
