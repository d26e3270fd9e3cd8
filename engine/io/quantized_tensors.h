// A quantized matrix in a safetensors file (attn quantize's output): W
// [rows, cols] in llama.cpp's blocks of 32 along cols is two tensors, its
// quants under the weight's own name (q8_0: I8 [rows, cols], the int8
// values; q4_0: U8 [rows, cols / 2], each block's 16 bytes as llama.cpp
// packs them, element j in the low nibble and j + 16 in the high one) and
// its scales under the name + "_scale" (F16 [rows, cols / 32]). The file's
// metadata names the type and the block size.
#ifndef ATTN_ENGINE_IO_QUANTIZED_TENSORS_H_
#define ATTN_ENGINE_IO_QUANTIZED_TENSORS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attn/status.hpp"
#include "engine/io/safetensors_writer.h"
#include "engine/io/weight_files.h"
#include "engine/runtime/buffer.h"
#include "kernels/quant.h"

namespace attn {

inline constexpr char kQuantizationKey[] = "quantization";
inline constexpr char kQuantizationBlockKey[] = "quantization_block_size";

// The metadata a file quantized to `t` carries.
std::map<std::string, std::string> QuantizationMetadata(kernels::QuantType t);
// The type `file`'s metadata names; none when it names none. Refused in
// one line naming the key: a type or block size we do not read.
Result<std::optional<kernels::QuantType>> ReadQuantization(
    const WeightFiles& file);

// The name of the scales of quantized matrix `name`: name + "_scale".
std::string ScaleName(const std::string& name);
// The two tensors quantized matrix `name` [rows, cols] is written as.
std::vector<TensorSpec> QuantizedSpecs(const std::string& name,
                                       kernels::QuantType t, int64_t rows,
                                       int64_t cols);
// The [rows, cols] quantized matrix `name` of `file` holds, its quants and
// scales checked against each other; refused in one line naming the tensor
// when either is missing or of another dtype, rank or size.
Result<std::vector<int64_t>> QuantizedShape(const WeightFiles& file,
                                            const std::string& name,
                                            kernels::QuantType t);
// Appends `blocks` ([rows, cols / 32] blocks in llama.cpp's row layout) to
// `out` as the two tensors QuantizedSpecs names, quants then scales.
Status AppendQuantized(SafetensorsWriter& out, kernels::QuantType t,
                       const void* blocks, int64_t rows, int64_t cols);
// Rows [first, first + count) of quantized matrix `name` (`cols` wide, its
// shape already checked) as blocks in llama.cpp's row layout.
Result<AlignedBuffer> ReadQuantizedRows(const WeightFiles& file,
                                        const std::string& name,
                                        kernels::QuantType t, int64_t first,
                                        int64_t count, int64_t cols);

}  // namespace attn

#endif  // ATTN_ENGINE_IO_QUANTIZED_TENSORS_H_
