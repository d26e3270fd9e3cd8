// Where QuantRowsLinear's operands lie (quant.h): the packed weights that
// PackQuantRows writes, and the quantized activations in its scratch. Plain
// C++, shared by quant.cc, the per-target bodies (quant-inl.h) and tests.
//
// Packed weights: ceil(n / 16) groups of 16 output rows (the last padded
// with zero weights), QuantGroupBytes apart, each one stream of pairs of
// block indices (the last alone where k / 32 is odd), each pair
//   a line of scales: 2 x 16 fp16, the 16 rows' of its first block, then of
//           its second (or 32 zero bytes);
//   its two tiles: QuantTileChunks(t) chunks of 64 bytes for each block,
//           chunk c = [16 lanes][4 bytes], lane l the bytes qs[4c, 4c + 4)
//           of row 16g + l's block, plus kQuantByteOffset (mod 256).
// So one chunk is one 512-bit operand of VNNI's vpdpbusd, each 32-bit lane
// one row's 4 consecutive weights (q8_0), or 4 + 4 in nibbles (q4_0: the
// low nibbles elements 4c + t, the high 16 + 4c + t, llama.cpp's own
// pairs), against 4 bytes of x broadcast. vpdpbusd multiplies unsigned by
// signed bytes: q8_0's int8 weights are stored +128 (q4_0's nibbles are
// q - 8 + 8 already), and QuantActs::corr takes the offset back off. The
// scales lie in the stream of their tiles, every line 64-byte aligned: with
// the scales of a group apart from its tiles (two streams per group) a
// thread read q8_0 weights at 1 row 20% slower on a Zen 5.
#ifndef ATTN_KERNELS_QUANT_LAYOUT_H_
#define ATTN_KERNELS_QUANT_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/quant.h"

namespace attn::kernels {

// Output rows of a group: the 32-bit lanes of a 512-bit vector.
constexpr size_t kQuantGroupRows = 16;
// Bytes of one row in one chunk, and of one chunk.
constexpr size_t kQuantLaneBytes = 4;
constexpr size_t kQuantChunkBytes = kQuantGroupRows * kQuantLaneBytes;

inline size_t QuantGroupCount(size_t n) {
  return (n + kQuantGroupRows - 1) / kQuantGroupRows;
}
inline size_t QuantBlocksPerRow(size_t k) { return k / kQuantBlock; }

// Groups a kernel of `rows` rows reads side by side (QuantReading::
// kSideBySide; a power of 2), and the fewest a thread takes at a time while
// its share has that many left (SplitUnits). At 2 rows 4 read 5-10% faster
// than 1 on an Ice Lake Xeon; more rows compute longer on each byte and
// gain less.
constexpr size_t QuantGroupsSideBySide(size_t rows) {
  return rows == 1 ? 8 : rows == 2 ? 4 : rows <= 4 ? 2 : 1;
}

// Bytes of one block's quants (qs): 32 or 16.
constexpr size_t QuantQsBytes(QuantType t) {
  return t == QuantType::kQ8_0 ? kQuantBlock : kQuantBlock / 2;
}
constexpr size_t QuantTileChunks(QuantType t) {
  return QuantQsBytes(t) / kQuantLaneBytes;
}
constexpr size_t QuantTileBytes(QuantType t) {
  return QuantTileChunks(t) * kQuantChunkBytes;
}
// What a stored byte adds to llama.cpp's (q8_0: 128, so that each is an
// unsigned byte w + 128; q4_0: none).
constexpr uint8_t QuantByteOffset(QuantType t) {
  return t == QuantType::kQ8_0 ? 0x80 : 0;
}
// The unsigned value a packed weight holds minus the signed weight it
// stands for: 128 (q8_0) or 8 (q4_0's q - 8).
constexpr int32_t QuantWeightOffset(QuantType t) {
  return t == QuantType::kQ8_0 ? 128 : 8;
}

// Bytes of a line of scales, and of a pair of blocks.
constexpr size_t kQuantScaleLine = 64;
constexpr size_t QuantPairBytes(QuantType t) {
  return kQuantScaleLine + 2 * QuantTileBytes(t);
}
inline size_t QuantGroupBytes(QuantType t, size_t k) {
  const size_t nb = QuantBlocksPerRow(k);
  return (nb + 1) / 2 * kQuantScaleLine + nb * QuantTileBytes(t);
}

// Where group g of packed weights starts.
template <typename Byte>  // uint8_t or const uint8_t
Byte* QuantGroupAt(QuantType t, Byte* packed, size_t k, size_t g) {
  return packed + g * QuantGroupBytes(t, k);
}
// Block b's 16 fp16 scales, and its tile, in the group at `group`.
template <typename Byte>
Byte* QuantScalesAt(QuantType t, Byte* group, size_t b) {
  return group + b / 2 * QuantPairBytes(t) + b % 2 * kQuantGroupRows * 2;
}
template <typename Byte>
Byte* QuantTileAt(QuantType t, Byte* group, size_t b) {
  return group + b / 2 * QuantPairBytes(t) + kQuantScaleLine +
         b % 2 * QuantTileBytes(t);
}

// Row `lane` of a group's block b, as llama.cpp's block (d, then qs), from
// the packed group and back.
inline void GatherBlock(QuantType t, const uint8_t* group, size_t b,
                        size_t lane, uint8_t* block) {
  std::memcpy(block, QuantScalesAt(t, group, b) + lane * 2, 2);
  const uint8_t* tile = QuantTileAt(t, group, b);
  for (size_t c = 0; c < QuantTileChunks(t); ++c) {
    for (size_t i = 0; i < kQuantLaneBytes; ++i) {
      const uint8_t stored =
          tile[c * kQuantChunkBytes + lane * kQuantLaneBytes + i];
      block[2 + c * kQuantLaneBytes + i] = stored ^ QuantByteOffset(t);
    }
  }
}
inline void ScatterBlock(QuantType t, const uint8_t* block, size_t b,
                         size_t lane, uint8_t* group) {
  std::memcpy(QuantScalesAt(t, group, b) + lane * 2, block, 2);
  uint8_t* tile = QuantTileAt(t, group, b);
  for (size_t c = 0; c < QuantTileChunks(t); ++c) {
    for (size_t i = 0; i < kQuantLaneBytes; ++i) {
      tile[c * kQuantChunkBytes + lane * kQuantLaneBytes + i] =
          block[2 + c * kQuantLaneBytes + i] ^ QuantByteOffset(t);
    }
  }
}

// x [rows, k] quantized for QuantRowsLinear, in its scratch: per row and
// block as quantize_row_q8_0_ref, its quants, its fp16 scale widened, and
// -QuantWeightOffset(t) times the sum of its quants, the isum of packed
// weights' unsigned values less their offset's. Block by block, the rows of
// one block side by side, so that the kernels reach every row's from one
// pointer (with one pointer a row, 8 rows spilled pointers to the stack).
struct QuantActs {
  int8_t* q;      // [k / 32][rows][32]
  float* d;       // [k / 32][rows]
  int32_t* corr;  // [k / 32][rows]
};

inline size_t QuantAligned64(size_t bytes) { return (bytes + 63) / 64 * 64; }

inline size_t QuantActsBytes(size_t rows, size_t k) {
  const size_t per_block = rows * QuantBlocksPerRow(k) * 4;
  return 64 + QuantAligned64(rows * k) + 2 * QuantAligned64(per_block);
}

// The parts of a scratch of QuantActsBytes, each 64-byte aligned.
inline QuantActs QuantActsIn(void* scratch, size_t rows, size_t k) {
  const auto address = reinterpret_cast<uintptr_t>(scratch);
  auto* base =
      static_cast<uint8_t*>(scratch) + (QuantAligned64(address) - address);
  const size_t per_block = QuantAligned64(rows * QuantBlocksPerRow(k) * 4);
  uint8_t* d = base + QuantAligned64(rows * k);
  return {reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(d),
          reinterpret_cast<int32_t*>(d + per_block)};
}

// The operands of one QuantRowsLinear call, the same for every group.
struct QuantGroupArgs {
  QuantActs acts;
  size_t rows, k;
  const uint8_t* packed;
  const float* bias;  // or null
  size_t n;
  float* y;  // [rows, n]
  QuantReading reading;
};

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_QUANT_LAYOUT_H_
