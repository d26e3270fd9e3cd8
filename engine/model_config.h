// What every model reads the same way: metadata counts, the heads and
// context length of an attention (option, then graph attribute, then file),
// and whether the CPU can run a dtype.
#ifndef ATTN_ENGINE_MODEL_CONFIG_H_
#define ATTN_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "attn/status.hpp"

namespace attn {

// Metadata value `key` of `file` as a positive integer (decimal digits
// only); 0 when absent.
Result<int64_t> MetadataCount(const SafetensorsFile& file,
                              const std::string& key);

struct AttentionDims {
  int64_t num_heads = 0;
  int64_t context_length = 0;  // 0: no limit
};

// Each field from the first that sets it: `option` (the user's), `attribute`
// (a graph node's; zeros for the MHA), the metadata of `file`; the context
// length last from the book's square causal buffer `mask_name` when the file
// holds one. Heads given nowhere is an error starting with `who`.
Result<AttentionDims> ResolveAttentionDims(const SafetensorsFile& file,
                                           const AttentionDims& option,
                                           const AttentionDims& attribute,
                                           const std::string& mask_name,
                                           const std::string& who);

// Unsupported when this CPU cannot run `dtype` (bf16 needs AVX512_BF16).
Status CheckDTypeSupported(DType dtype);

}  // namespace attn

#endif  // ATTN_ENGINE_MODEL_CONFIG_H_
