// What every model reads the same way: metadata counts, the heads and
// context length of an attention (option, then graph attribute, then file),
// and whether the CPU can run a dtype.
#ifndef ATTN_ENGINE_IO_MODEL_CONFIG_H_
#define ATTN_ENGINE_IO_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "attn/status.hpp"
#include "kernels/rope.h"

namespace attn {

// Metadata value `key` of `file` as a positive integer (decimal digits
// only); 0 when absent.
Result<int64_t> MetadataCount(const SafetensorsFile& file,
                              const std::string& key);
// Metadata value `key` of `file` as a positive finite number; 0 when absent.
Result<double> MetadataNumber(const SafetensorsFile& file,
                              const std::string& key);

struct AttentionDims {
  int64_t num_heads = 0;
  int64_t context_length = 0;  // 0: no limit
  int64_t num_kv_heads = 0;    // 0: from the weights' shapes
  RopeConfig rope;             // theta 0: none
  int64_t sliding_window = 0;  // 0: none
};

// The dims ResolveAttentionDims settles on, and, for errors, where it took
// the heads from, e.g. "metadata 'num_heads' of 'm.safetensors'" (empty for
// a field left 0).
struct ResolvedDims : AttentionDims {
  std::string num_heads_from, num_kv_heads_from;
};

// Each field from the first that sets it: `option` (the user's), `attribute`
// (a graph node's; zeros for the MHA), the metadata of `file` (the field's
// name, the rope fields as "rope_theta", "rope_factor", ...); the context
// length last from the book's square causal buffer `mask_name` when the file
// holds one. The rope fields come together from one source. Heads given
// nowhere is an error starting with `who`.
Result<ResolvedDims> ResolveAttentionDims(const SafetensorsFile& file,
                                          const AttentionDims& option,
                                          const AttentionDims& attribute,
                                          const std::string& mask_name,
                                          const std::string& who);

// num_heads divides `width` (d_out, or a model's embedding width: named
// `width_name`, read from `width_from`) and num_kv_heads, where set,
// divides num_heads. The errors say where the heads came from.
Status CheckHeads(const ResolvedDims& dims, int64_t width,
                  const std::string& width_name, const std::string& width_from);

// Sets `config`'s heads, context length, rope and window from `dims` (K/V
// heads from the rows of `w_key`, tensor `key_name`, where nothing gave
// them) and checks them against config.d_out, read from `width_from`.
Status ApplyDims(ResolvedDims dims, const TensorInfo* w_key,
                 const std::string& key_name, const std::string& width_from,
                 MhaConfig& config);

// The fields of AttentionDims that `options` sets.
AttentionDims DimsOf(const ModelOptions& options);

// Where nothing gave num_kv_heads: W_key's rows (`key_rows`, of tensor
// `key_name`) over the head_dim of `width`, when whole heads, else
// num_heads (and reading W_key names the shape it wants).
void KvHeadsFromRows(int64_t key_rows, const std::string& key_name,
                     int64_t width, ResolvedDims& dims);

// Unsupported when this CPU cannot run `dtype` (bf16 needs AVX512_BF16).
Status CheckDTypeSupported(DType dtype);

// InvalidArgument for a quantized dtype: only language models hold
// quantized linears. `model` names the kind refusing it ("an MHA model").
Status CheckDenseDType(DType dtype, const char* model);

// The attention variant of `c` (num_kv_heads, rope, sliding_window) is
// valid for its heads; errors name the field.
Status CheckAttentionVariant(const MhaConfig& c);

// `rope` as the RoPE kernels take it (fp32, as PyTorch computes it).
kernels::RopeConfig KernelRope(const RopeConfig& rope);

}  // namespace attn

#endif  // ATTN_ENGINE_IO_MODEL_CONFIG_H_
