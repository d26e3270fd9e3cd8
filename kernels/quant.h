// Weights quantized as llama.cpp's q8_0 and q4_0 blocks: their reference
// quantizers and QuantRowsLinear (a few rows of fp32 x times a packed
// quantized W, on int8 dot products), which prompts run over groups of
// rows. Packed layout in quant_layout.h, per-target bodies in quant-inl.h,
// dispatch and threads in quant.cc.
#ifndef ATTN_KERNELS_QUANT_H_
#define ATTN_KERNELS_QUANT_H_

#include <cstddef>
#include <cstdint>

#include "hwy/base.h"
#include "kernels/rows_linear.h"  // kRowsLinearMaxRows

namespace attn::kernels {

enum class QuantType { kQ8_0, kQ4_0 };

// Weights per block, along the input dimension k (a multiple of it).
constexpr size_t kQuantBlock = 32;

// llama.cpp's blocks (ggml-common.h), bit for bit. d: IEEE fp16 bits.
// q8_0: w[j] = qs[j] * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34, "llama.cpp's block_q8_0");
// q4_0: w[j] = ((qs[j] & 15) - 8) * d and w[j + 16] = ((qs[j] >> 4) - 8) * d
// for j < 16.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "llama.cpp's block_q4_0");

// "q8_0" or "q4_0", llama.cpp's names.
const char* QuantName(QuantType t);

// Bytes of one block: 34 or 18.
size_t QuantBlockBytes(QuantType t);

// fp32 to IEEE fp16 bits, rounded to nearest even as F16C's vcvtps2ph and
// GGML_FP32_TO_FP16: overflow to inf, subnormals kept, NaN stays NaN
// (quiet, its payload's top bits kept).
uint16_t F16FromF32(float f);
// Exact (NaNs quiet, as F16C's).
float F32FromF16(uint16_t h);

// The reference quantizers, bit for bit llama.cpp's quantize_row_q8_0_ref
// and quantize_row_q4_0_ref on finite x: k a multiple of kQuantBlock,
// `blocks` gets k / 32 blocks of type t (llama.cpp's row layout).
// Dispatched to SIMD; every target gives the same bits. Returns false when
// some x is NaN or infinite; the blocks then mean nothing.
bool QuantizeRow(QuantType t, const float* x, size_t k, void* blocks);
// Bytes of n rows of k / 32 blocks in llama.cpp's row layout.
size_t QuantRowsBytes(QuantType t, size_t n, size_t k);
// QuantizeRow on each row of x [n, k] into n rows of blocks, by a team of
// num_threads (the blocks do not depend on it). Returns the first row
// holding a value that is not finite, or n.
size_t QuantizeRows(QuantType t, const float* x, size_t n, size_t k,
                    void* blocks, int num_threads);
// y[0, k) from k / 32 blocks: q * d or (q - 8) * d, exact in fp32.
void DequantizeRow(QuantType t, const void* blocks, size_t k, float* y);

// Weights W [n, k] as n rows of k / 32 blocks (llama.cpp's layout) packed
// for QuantRowsLinear: groups of 16 output rows, each group's fp16 scales
// apart from its quants, the quants of one block index of the 16 rows side
// by side as the int8 dot products read them, q8_0 stored unsigned (+128)
// (quant_layout.h has the bytes). It holds exactly the blocks: no fp32
// copy, and UnpackQuantRows gives them back. Rows past n in the last group
// are zero weights. 64-byte aligned `packed` reads fastest.
size_t QuantPackedBytes(QuantType t, size_t n, size_t k);
void PackQuantRows(QuantType t, const void* row_blocks, size_t n, size_t k,
                   void* packed, int num_threads);
// The inverse: llama.cpp's row layout back from the packed form.
void UnpackQuantRows(QuantType t, const void* packed, size_t n, size_t k,
                     void* row_blocks);

// How QuantRowsLinear's threads read their groups of 16 columns at a few
// rows. No choice changes a bit of the result, only how fast W streams.
enum class QuantReading {
  // Group after group: one stream a thread.
  kGroupByGroup,
  // QuantGroupsSideBySide(rows) groups block by block, each its own stream
  // (the VNNI kernels; the others go group by group). A thread of an Ice
  // Lake Xeon (lscpu family 6 model 106) read q4_0 weights at one row
  // 9-11 GB/s group by group and 14-15 side by side, q8_0 11-12 and 14-15.
  kSideBySide,
};

// This CPU's choice: kSideBySide on Intel's, group by group on AMD's. A
// Zen 5 (family 26 model 2) reads one stream a thread at 80-95% of 8
// (stream_read), yet quant_bench's Llama layer at one row read q8_0 at
// 31-35 GB/s group by group against 30-31 side by side on one thread,
// 61-65 against 57 on two; q4_0 25-27 against 26-29 on one, 46-51 against
// 44-48 on two.
QuantReading QuantReadingOfThisCpu();

// Bytes of the scratch QuantRowsLinear quantizes x into (any alignment).
// It grows with rows and k: one sized for the most of each serves every
// call with fewer.
size_t QuantRowsLinearScratchBytes(size_t rows, size_t k);

// y[r, j] = bias[j] + sum over blocks b in order of (dw[j, b] * dx[r, b]) *
// isum[r, j, b], for r < rows <= kRowsLinearMaxRows and j < n: x [rows, k] and
// y [rows, n] dense fp32, W packed by PackQuantRows, bias [n] or null. Each row
// of x is quantized per block as quantize_row_q8_0_ref does (the reference
// of llama.cpp's activation quantizer): dx its fp16 scale widened, isum the
// exact int32 dot of the block's int8 quants with W's (q4_0: q - 8). The sum
// runs in fp32 (fused multiply-adds on AVX2 and AVX-512) from zero, the bias
// added last; each output is computed by one thread in one fixed order, so
// every bit of y is the same for every num_threads and reading on one CPU.
void QuantRowsLinear(QuantType t, const float* x, size_t rows, size_t k,
                     const void* packed, const float* bias, size_t n, float* y,
                     void* scratch, int num_threads,
                     QuantReading reading = QuantReadingOfThisCpu());

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_QUANT_H_
