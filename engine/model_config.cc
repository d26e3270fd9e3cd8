#include "engine/model_config.h"

#include "kernels/matmul.h"

namespace attn {

Result<int64_t> MetadataCount(const SafetensorsFile& file,
                              const std::string& key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) return int64_t{0};
  const std::string& text = it->second;
  int64_t value = 0;
  bool ok = !text.empty();
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9' &&
         !__builtin_mul_overflow(value, 10, &value) &&
         !__builtin_add_overflow(value, c - '0', &value);
  }
  if (!ok || value <= 0) {
    return InvalidArgument("metadata '" + key + "' of '" + file.path() +
                           "' is '" + text + "', want a positive integer");
  }
  return value;
}

Result<AttentionDims> ResolveAttentionDims(const SafetensorsFile& file,
                                           const AttentionDims& option,
                                           const AttentionDims& attribute,
                                           const std::string& mask_name,
                                           const std::string& who) {
  ATTN_ASSIGN_OR_RETURN(const int64_t heads, MetadataCount(file, "num_heads"));
  ATTN_ASSIGN_OR_RETURN(const int64_t context,
                        MetadataCount(file, "context_length"));
  const auto first = [](int64_t a, int64_t b, int64_t c) {
    return a ? a : b ? b : c;
  };
  AttentionDims dims;
  dims.num_heads = first(option.num_heads, attribute.num_heads, heads);
  if (dims.num_heads == 0) {
    // Only a graph node (named by `who`) has attributes.
    return InvalidArgument(
        who +
        "num_heads is not given: pass --heads, set metadata "
        "'num_heads' in '" +
        file.path() + "'" +
        (who.empty() ? "" : " or the node's attribute 'num_heads'"));
  }
  dims.context_length =
      first(option.context_length, attribute.context_length, context);
  if (const TensorInfo* mask = file.Find(mask_name);
      dims.context_length == 0 && mask && mask->shape.size() == 2 &&
      mask->shape[0] == mask->shape[1]) {
    dims.context_length = mask->shape[0];
  }
  return dims;
}

Status CheckDTypeSupported(DType dtype) {
  if (dtype == DType::kBF16 && !kernels::HasNativeBF16()) {
    return Unsupported(std::string("dtype bf16 needs a CPU with AVX512_BF16 "
                                   "(oneDNN reports ") +
                       kernels::MatMulIsaName() + "); use f32");
  }
  return {};
}

}  // namespace attn
