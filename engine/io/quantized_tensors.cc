// Quantized matrices in safetensors files (see quantized_tensors.h).
#include "engine/io/quantized_tensors.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "attn/safetensors.hpp"
#include "engine/io/json_limits.h"

namespace attn {
namespace {

using kernels::QuantType;

constexpr int64_t kBlock = static_cast<int64_t>(kernels::kQuantBlock);
// Blocks read or written at a time (whole rows of them): a few MiB.
constexpr int64_t kChunkBlocks = int64_t{1} << 17;

// Bytes of one block's quants (its scale apart): 32 or 16.
int64_t QuantBytes(QuantType t) {
  return static_cast<int64_t>(kernels::QuantBlockBytes(t)) - 2;
}

const char* QuantDType(QuantType t) {
  return t == QuantType::kQ8_0 ? "I8" : "U8";
}

// Rows per chunk for rows of `blocks` blocks: at least one.
int64_t ChunkRows(int64_t blocks) {
  return std::max<int64_t>(1, kChunkBlocks / blocks);
}

}  // namespace

std::map<std::string, std::string> QuantizationMetadata(QuantType t) {
  return {{kQuantizationKey, kernels::QuantName(t)},
          {kQuantizationBlockKey, std::to_string(kBlock)}};
}

Result<std::optional<QuantType>> ReadQuantization(const WeightFiles& file) {
  const auto& meta = file.first().metadata();
  const auto type = meta.find(kQuantizationKey);
  const auto block = meta.find(kQuantizationBlockKey);
  const std::string where = " of " + Quoted(file.first().path());
  if (type == meta.end()) {
    if (block == meta.end()) return std::optional<QuantType>();
    return InvalidArgument(std::string("metadata '") + kQuantizationBlockKey +
                           "'" + where + " is given without '" +
                           kQuantizationKey + "'");
  }
  std::optional<QuantType> found;
  for (const QuantType t : {QuantType::kQ8_0, QuantType::kQ4_0}) {
    if (type->second == kernels::QuantName(t)) found = t;
  }
  if (!found) {
    return InvalidArgument(std::string("metadata '") + kQuantizationKey + "'" +
                           where + " is " + Quoted(type->second, 40) +
                           ", want 'q8_0' or 'q4_0'");
  }
  if (block == meta.end() || block->second != std::to_string(kBlock)) {
    return InvalidArgument(
        std::string("metadata '") + kQuantizationBlockKey + "'" + where +
        " is " + (block == meta.end() ? "missing" : Quoted(block->second, 40)) +
        ", want '" + std::to_string(kBlock) + "'");
  }
  return found;
}

std::string ScaleName(const std::string& name) { return name + "_scale"; }

std::vector<TensorSpec> QuantizedSpecs(const std::string& name, QuantType t,
                                       int64_t rows, int64_t cols) {
  const int64_t blocks = cols / kBlock;
  return {{name, QuantDType(t), {rows, blocks * QuantBytes(t)}},
          {ScaleName(name), "F16", {rows, blocks}}};
}

Result<std::vector<int64_t>> QuantizedShape(const WeightFiles& file,
                                            const std::string& name,
                                            QuantType t) {
  const TensorInfo* quants = file.Find(name);
  const TensorInfo* scales = file.Find(ScaleName(name));
  const std::string where = " in " + Quoted(file.path());
  if (!quants || !scales) {
    return InvalidArgument(
        "tensor " + Quoted(quants ? ScaleName(name) : name) + " is missing" +
        where + " (a " + kernels::QuantName(t) + " matrix is two tensors, " +
        Quoted(name) + " and " + Quoted(ScaleName(name)) + ")");
  }
  const bool ranks = quants->shape.size() == 2 && scales->shape.size() == 2;
  const int64_t rows = ranks ? quants->shape[0] : 0;
  const int64_t blocks = ranks ? scales->shape[1] : 0;
  if (quants->dtype != QuantDType(t) || scales->dtype != "F16" || !ranks ||
      rows <= 0 || blocks <= 0 || scales->shape[0] != rows ||
      quants->shape[1] != blocks * QuantBytes(t)) {
    return InvalidArgument(
        "tensors " + Quoted(name) + " (" + quants->dtype + " " +
        ShapeString(quants->shape) + ") and " + Quoted(ScaleName(name)) + " (" +
        scales->dtype + " " + ShapeString(scales->shape) + ")" + where +
        " are not a " + kernels::QuantName(t) + " matrix: want " +
        QuantDType(t) + " [rows, " + std::to_string(QuantBytes(t)) +
        " x blocks] and F16 [rows, blocks]");
  }
  return std::vector<int64_t>{rows, blocks * kBlock};
}

Status AppendQuantized(SafetensorsWriter& out, QuantType t, const void* blocks,
                       int64_t rows, int64_t cols) {
  const int64_t per_row = cols / kBlock, step = ChunkRows(per_row);
  const auto block_bytes = static_cast<int64_t>(kernels::QuantBlockBytes(t));
  const int64_t quant_bytes = QuantBytes(t);
  const auto* in = static_cast<const unsigned char*>(blocks);
  std::vector<unsigned char> chunk;
  for (const bool scales : {false, true}) {
    const int64_t width = scales ? 2 : quant_bytes;
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t n = std::min(step, rows - r) * per_row;
      chunk.resize(static_cast<size_t>(n * width));
      const unsigned char* block = in + r * per_row * block_bytes;
      for (int64_t b = 0; b < n; ++b, block += block_bytes) {
        std::memcpy(&chunk[b * width], block + (scales ? 0 : 2), width);
      }
      ATTN_RETURN_IF_ERROR(out.Append(chunk.data(), chunk.size()));
    }
  }
  return {};
}

Result<AlignedBuffer> ReadQuantizedRows(const WeightFiles& file,
                                        const std::string& name, QuantType t,
                                        int64_t first, int64_t count,
                                        int64_t cols) {
  const int64_t per_row = cols / kBlock, step = ChunkRows(per_row);
  const auto block_bytes = static_cast<int64_t>(kernels::QuantBlockBytes(t));
  const int64_t quant_bytes = QuantBytes(t);
  ATTN_ASSIGN_OR_RETURN(AlignedBuffer blocks,
                        AlignedBuffer::Allocate(static_cast<size_t>(
                            count * per_row * block_bytes)));
  auto* out = static_cast<unsigned char*>(blocks.data());
  std::vector<unsigned char> quants, scales;
  for (int64_t r = 0; r < count; r += step) {
    const int64_t n = std::min(step, count - r) * per_row;
    const int64_t at = (first + r) * per_row;  // the chunk's first block
    quants.resize(static_cast<size_t>(n * quant_bytes));
    scales.resize(static_cast<size_t>(n * 2));
    ATTN_RETURN_IF_ERROR(
        file.ReadBytes(name, at * quant_bytes, quants.size(), quants.data()));
    ATTN_RETURN_IF_ERROR(
        file.ReadBytes(ScaleName(name), at * 2, scales.size(), scales.data()));
    unsigned char* block = out + r * per_row * block_bytes;
    for (int64_t b = 0; b < n; ++b, block += block_bytes) {
      std::memcpy(block, &scales[b * 2], 2);
      std::memcpy(block + 2, &quants[b * quant_bytes], quant_bytes);
    }
  }
  return blocks;
}

}  // namespace attn
