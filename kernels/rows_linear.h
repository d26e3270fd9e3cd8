// y = act(x W^T + b) for a few rows of x (act: none, or GPT-2's GELU): the
// projections of a decode step. They are bound by reading W once, so W is
// read in the order that streams it fastest: packed in panels of
// kRowsLinearPanel columns, two to a work item, each item one contiguous run
// of memory that every row consumes as it streams by. Each output is one sum
// over k in order, computed by one tile whatever the team size, so every bit
// of the result is the same for every num_threads.
// Per-target bodies in rows_linear-inl.h.
#ifndef ATTN_KERNELS_ROWS_LINEAR_H_
#define ATTN_KERNELS_ROWS_LINEAR_H_

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hwy/base.h"

namespace attn::kernels {

// The most rows RowsLinear takes: past a few rows, reading W once no longer
// bounds the time and a blocked matmul wins.
constexpr size_t kRowsLinearMaxRows = 8;
// Columns of a panel: two AVX-512 vectors of fp32, and one 64-byte cache
// line of bf16 weights per step along k.
constexpr size_t kRowsLinearPanel = 32;
// Columns of one work item: two panels, which one tile of a few rows reads
// side by side.
constexpr size_t kRowsLinearColumns = 2 * kRowsLinearPanel;

// Columns a thread takes at a time, the unit RowsLinearColumns computes: a
// work item of bf16 weights, whose tiles read both panels side by side, and
// one panel of fp32 weights, whose panels lie one after the other. The
// smaller the unit, the less a thread done early waits for the last one
// (393 KB for a panel of GPT-2's feed-forward down projection).
template <typename TW>
constexpr size_t RowsLinearUnitColumns() {
  return std::is_same_v<TW, float> ? kRowsLinearPanel : kRowsLinearColumns;
}

// bf16 items hold k in blocks of this many (16 pairs), zeros past k.
constexpr size_t kRowsLinearBf16Block = 32;

// The rows of k an item of TW weights holds: fp32 k, bf16 k padded to
// whole blocks.
template <typename TW>
constexpr size_t RowsLinearPaddedK(size_t k) {
  return std::is_same_v<TW, float>
             ? k
             : (k + kRowsLinearBf16Block - 1) / kRowsLinearBf16Block *
                   kRowsLinearBf16Block;
}

// Elements of w [n, k] packed for RowsLinear as TW: fp32 ceil(n / 32)
// panels of k x 32; bf16 ceil(n / 64) items of RowsLinearPaddedK(k) x 64.
template <typename TW>
size_t RowsLinearPackedSize(size_t n, size_t k) {
  const size_t width =
      std::is_same_v<TW, float> ? kRowsLinearPanel : kRowsLinearColumns;
  return (n + width - 1) / width * width * RowsLinearPaddedK<TW>(k);
}

// Where the panels of the work item of columns [j0, j0 + 64) lie, from
// packed + j0 * RowsLinearPaddedK<T>(k): panel q at q * panel, its row r
// at r * row after that.
// - fp32: panel after panel, rows of 32 columns, every tile of one panel,
//   so that a thread's share of units is one stream (but
//   RowsLinearPanels::kSideBySide): a GPT-2 step's weights at 1 row on one
//   thread of a Zen 4 read 6-14% faster than with both panels in one tile
//   (two streams). Row by row would make 5-8 rows, whose accumulators for
//   two panels do not fit, read every other 128 bytes: 30% slower.
// - bf16: a row per pair of i (2p, 2p + 1), both panels side by side, each
//   column one 32-bit word with w[j, 2p] in its low half and w[j, 2p + 1]
//   in its high half; items always 64 columns wide (zeros past n): oneDNN's
//   blocked layout BA16a64b2a, so that a bf16 linear's packed copy for
//   prompts is its panels too (kernels::MatMul::PacksAsRowsLinear). A tile
//   of both panels reads one stream: a GPT-2 decode step at batch 1 on one
//   thread of a Zen 4, 6-13% faster than two streams. Tiles of one panel
//   (AVX-512 from 5 rows, AVX2 from 2) read every other 128 bytes.
struct RowsLinearItemStrides {
  size_t panel;
  size_t row;
};
template <typename T>
RowsLinearItemStrides RowsLinearStrides(size_t k) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, hwy::bfloat16_t>,
                "fp32 or bf16 weights");
  if constexpr (std::is_same_v<T, float>) {
    return {k * kRowsLinearPanel, kRowsLinearPanel};
  } else {
    return {2 * kRowsLinearPanel, 2 * kRowsLinearColumns};
  }
}

// Lays out w [n, k] (nn.Linear's [out, in]) as RowsLinear reads it: panel p
// holds columns [32p, 32p + 32), zeros past column n (and bf16 past k), in
// rows placed by RowsLinearStrides, each in column order. `packed` holds
// RowsLinearPackedSize<T>(n, k).
void PackRowsLinear(const float* w, size_t n, size_t k, float* packed,
                    int num_threads);
void PackRowsLinear(const hwy::bfloat16_t* w, size_t n, size_t k,
                    hwy::bfloat16_t* packed, int num_threads);

// Which tiles prefetch the weights a few KiB ahead of their reads. No
// choice changes a bit of the result, only how fast W streams.
enum class RowsLinearPrefetch {
  // Only tiles of many FMAs per cache line of weights (6 or more: fp32 from
  // 6 rows, bf16 from 3). With fewer, AMD's Zen 4 and Zen 5 keep enough
  // lines in flight without help, and a GPT-2 step on Zen 4 ran 4-8%
  // faster at 1 row without the prefetches; on Zen 5, fp32 at 8 rows reads
  // 57 GB/s against 41 prefetching in every tile (2 threads).
  kManyFmasPerLine,
  // Every tile, fp32 2 KiB ahead (bf16 8 KiB). On a Xeon with AVX-512 and
  // AMX (lscpu family 6 model 167), a GPT-2 step's weights on one thread
  // read 15% faster at 1 row (fp32; bf16 2-8%), and fp32 13% faster at 8
  // rows 2 KiB ahead than 8 KiB.
  kEveryTile,
};

// How one row of fp32 weights reads its panels.
enum class RowsLinearPanels {
  // Panel after panel, prefetching as RowsLinearPrefetch says.
  kOneByOne,
  // Up to kRowsLinearSidePanels panels side by side (as many as the
  // target's accumulators hold: 8 on AVX-512, 2 on AVX2 and NEON), each
  // its own stream, prefetching nothing whatever RowsLinearPrefetch says.
  kSideBySide,
};

// How RowsLinear reads W. No choice changes a bit of the result.
struct RowsLinearReading {
  RowsLinearPrefetch prefetch;
  RowsLinearPanels panels;  // one row of fp32 weights; the rest one by one
};

// The most fp32 panels a one-row tile reads side by side, and the fewest
// units a thread takes at a time while its share has that many left
// (SplitUnits).
constexpr size_t kRowsLinearSidePanels = 8;

// Whether rows of TW weights read panels side by side.
template <typename TW>
constexpr bool RowsLinearReadsSidePanels(size_t rows,
                                         RowsLinearReading reading) {
  return std::is_same_v<TW, float> && rows == 1 &&
         reading.panels == RowsLinearPanels::kSideBySide;
}

// This CPU's choice: prefetching in every tile on Intel's, in tiles of many
// FMAs per line on the others; one fp32 row side by side everywhere. A
// GPT-2 step's weights at one row read 10-20% faster side by side on an
// Ice Lake Xeon (family 6 model 106, one thread), and on a Zen 5 (family
// 26 model 2) 34-39 GB/s against 30-36 on one thread, 66-74 against 46-64
// on two: that Zen 5 too reads more from 8 streams (stream_read: one
// stream a thread 80-95% of 8). Highway's AVX2 target, 2 panels, on that
// Zen 5: 30-31 GB/s either way on one thread, 45-57 against 43-50 on two.
// Not measured on the AMX Xeon, Zen 4 or other architectures.
RowsLinearReading RowsLinearReadingOfThisCpu();

// What RowsLinear applies to each output after the bias, while the
// outputs are still in the thread's cache: a separate pass over y would
// read from the other threads' caches what they just wrote.
enum class RowsLinearActivation {
  kNone,
  // The book's tanh GELU: the bits kernels::Gelu gives on the outputs.
  kGelu,
};

// The most columns a thread computes into one buffer on its stack before
// one copy (with the activation) spreads them over y's rows. Tiles storing
// straight into y touch a page per row for every panel: on the AMX Xeon of
// RowsLinearPrefetch::kEveryTile, 8 rows then streamed their weights 13-15%
// slower than through the buffer (the L2 prefetcher's streams seem to lose
// track of the weights). 512 columns of 8 rows: 16 KiB.
constexpr size_t kRowsLinearGroupColumns = 8 * kRowsLinearColumns;

// y[r, j] = act(bias[j] + sum_i x[r, i] * w[j, i]) for r < rows <= 8,
// j < n, i < k: x [rows, k] and y [rows, n] dense, w as PackRowsLinear lays
// it out, bias [n] or null, act as `activation` says.
void RowsLinear(const float* x, size_t rows, size_t k, const float* packed,
                const float* bias, size_t n, float* y, int num_threads,
                RowsLinearActivation activation = RowsLinearActivation::kNone,
                RowsLinearReading reading = RowsLinearReadingOfThisCpu());

// As above with bf16 weights: each weight is widened to fp32 exactly, so the
// result has the bits of the fp32 overload on the widened weights.
void RowsLinear(const float* x, size_t rows, size_t k,
                const hwy::bfloat16_t* packed, const float* bias, size_t n,
                float* y, int num_threads,
                RowsLinearActivation activation = RowsLinearActivation::kNone,
                RowsLinearReading reading = RowsLinearReadingOfThisCpu());

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_ROWS_LINEAR_H_
