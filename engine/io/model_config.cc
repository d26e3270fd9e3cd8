#include "engine/io/model_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <sstream>
#include <system_error>

#include "engine/io/json_limits.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"

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
    return InvalidArgument("metadata " + Quoted(key) + " of " +
                           Quoted(file.path()) + " is " + Quoted(text) +
                           ", want a positive integer");
  }
  return value;
}

Result<double> MetadataNumber(const SafetensorsFile& file,
                              const std::string& key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) return 0.0;
  const std::string& text = it->second;
  // from_chars: the same in every locale, and no leading space or sign.
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || !std::isfinite(value) ||
      !(value > 0.0)) {
    return InvalidArgument("metadata " + Quoted(key) + " of " +
                           Quoted(file.path()) + " is " + Quoted(text) +
                           ", want a positive number");
  }
  return value;
}

namespace {

// rope_theta, and Llama 3.1's scaling as all four of its keys or none: a
// key given alone would otherwise be dropped, and the model run unscaled.
Result<RopeConfig> MetadataRope(const SafetensorsFile& file) {
  RopeConfig rope;
  ATTN_ASSIGN_OR_RETURN(rope.theta, MetadataNumber(file, "rope_theta"));
  ATTN_ASSIGN_OR_RETURN(rope.factor, MetadataNumber(file, "rope_factor"));
  ATTN_ASSIGN_OR_RETURN(rope.low_freq_factor,
                        MetadataNumber(file, "rope_low_freq_factor"));
  ATTN_ASSIGN_OR_RETURN(rope.high_freq_factor,
                        MetadataNumber(file, "rope_high_freq_factor"));
  ATTN_ASSIGN_OR_RETURN(rope.original_context_length,
                        MetadataCount(file, "rope_original_context_length"));
  static const char* const kScaling[] = {"rope_factor", "rope_low_freq_factor",
                                         "rope_high_freq_factor",
                                         "rope_original_context_length"};
  const auto& meta = file.metadata();
  const auto given = [&](const char* key) { return meta.count(key) > 0; };
  const auto some =
      std::find_if(std::begin(kScaling), std::end(kScaling), given);
  if (some == std::end(kScaling)) return rope;
  if (!rope.theta) {
    return InvalidArgument("metadata '" + std::string(*some) + "' of " +
                           Quoted(file.path()) +
                           " is set without 'rope_theta'");
  }
  for (const char* key : kScaling) {
    if (!given(key)) {
      return InvalidArgument("metadata '" + std::string(*some) + "' of " +
                             Quoted(file.path()) + " is set without " +
                             Quoted(key) +
                             ": want all four rope scaling keys or none");
    }
  }
  return rope;
}

}  // namespace

Result<ResolvedDims> ResolveAttentionDims(const SafetensorsFile& file,
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
  const auto from = [&](int64_t by_option, int64_t by_attribute,
                        const char* key, const char* flag) {
    return by_option      ? "option " + std::string(key) + ", " + flag
           : by_attribute ? std::string("the node's attribute '") + key + "'"
                          : "metadata '" + std::string(key) + "' of " +
                                Quoted(file.path());
  };
  ResolvedDims dims;
  dims.num_heads = first(option.num_heads, attribute.num_heads, heads);
  dims.num_heads_from =
      from(option.num_heads, attribute.num_heads, "num_heads", "--heads");
  if (dims.num_heads == 0) {
    // Only a graph node (named by `who`) has attributes.
    return InvalidArgument(
        who +
        "num_heads is not given: pass --heads, set metadata "
        "'num_heads' in " +
        Quoted(file.path()) +
        (who.empty() ? "" : " or the node's attribute 'num_heads'"));
  }
  dims.context_length =
      first(option.context_length, attribute.context_length, context);
  if (const TensorInfo* mask = file.Find(mask_name);
      dims.context_length == 0 && mask && mask->shape.size() == 2 &&
      mask->shape[0] == mask->shape[1]) {
    dims.context_length = mask->shape[0];
  }
  ATTN_ASSIGN_OR_RETURN(const int64_t kv_heads,
                        MetadataCount(file, "num_kv_heads"));
  dims.num_kv_heads =
      first(option.num_kv_heads, attribute.num_kv_heads, kv_heads);
  if (dims.num_kv_heads) {
    dims.num_kv_heads_from = from(option.num_kv_heads, attribute.num_kv_heads,
                                  "num_kv_heads", "--kv-heads");
  }
  ATTN_ASSIGN_OR_RETURN(const int64_t window,
                        MetadataCount(file, "sliding_window"));
  dims.sliding_window =
      first(option.sliding_window, attribute.sliding_window, window);
  if (option.rope.theta || attribute.rope.theta) {
    dims.rope = option.rope.theta ? option.rope : attribute.rope;
  } else {
    ATTN_ASSIGN_OR_RETURN(dims.rope, MetadataRope(file));
  }
  return dims;
}

Status CheckHeads(const ResolvedDims& dims, int64_t width,
                  const std::string& width_name,
                  const std::string& width_from) {
  const std::string heads = std::to_string(dims.num_heads);
  if (dims.num_heads <= 0 || width % dims.num_heads != 0) {
    return InvalidArgument("num_heads is " + heads + " (from " +
                           dims.num_heads_from +
                           "), want a positive divisor of " + width_name + " " +
                           std::to_string(width) + " (" + width_from + ")");
  }
  if (dims.num_kv_heads < 0 ||
      (dims.num_kv_heads && dims.num_heads % dims.num_kv_heads != 0)) {
    return InvalidArgument(
        "num_kv_heads is " + std::to_string(dims.num_kv_heads) + " (from " +
        dims.num_kv_heads_from + "), want a divisor of num_heads " + heads);
  }
  return {};
}

Status ApplyDims(ResolvedDims dims, const TensorInfo* w_key,
                 const std::string& key_name, const std::string& width_from,
                 MhaConfig& config) {
  const bool matrix = w_key && w_key->shape.size() == 2;
  KvHeadsFromRows(matrix ? w_key->shape[0] : 0, key_name, config.d_out, dims);
  ATTN_RETURN_IF_ERROR(CheckHeads(dims, config.d_out, "d_out", width_from));
  config.num_heads = dims.num_heads;
  config.context_length = dims.context_length;
  config.num_kv_heads = dims.num_kv_heads;
  config.rope = dims.rope;
  config.sliding_window = dims.sliding_window;
  return CheckAttentionVariant(config);
}

AttentionDims DimsOf(const ModelOptions& options) {
  return {options.num_heads, options.context_length, options.num_kv_heads,
          options.rope, options.sliding_window};
}

void KvHeadsFromRows(int64_t key_rows, const std::string& key_name,
                     int64_t width, ResolvedDims& dims) {
  if (dims.num_kv_heads) return;
  const int64_t heads = dims.num_heads;
  const int64_t head_dim = heads > 0 && width % heads == 0 ? width / heads : 0;
  dims.num_kv_heads = head_dim && key_rows > 0 && key_rows % head_dim == 0
                          ? key_rows / head_dim
                          : heads;
  dims.num_kv_heads_from = "the rows of " + Quoted(key_name);
}

Status CheckDTypeSupported(DType dtype) {
  if (dtype == DType::kBF16 && !kernels::HasNativeBF16()) {
    return Unsupported(std::string("dtype bf16 needs a CPU with AVX512_BF16 "
                                   "(oneDNN reports ") +
                       kernels::MatMulIsaName() + "); use f32");
  }
  return {};
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bf16";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kF32:
      break;
  }
  return "f32";
}

Status CheckDenseDType(DType dtype, const char* model) {
  if (dtype != DType::kQ8_0 && dtype != DType::kQ4_0) return {};
  return InvalidArgument(std::string("dtype ") + DTypeName(dtype) +
                         " quantizes a language model's linears; " + model +
                         " takes f32 or bf16");
}

Status CheckAttentionVariant(const MhaConfig& c) {
  const std::string heads = std::to_string(c.num_heads);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument("num_kv_heads is " + std::to_string(c.num_kv_heads) +
                           ", want a divisor of num_heads " + heads);
  }
  if (c.sliding_window < 0) {
    return InvalidArgument("sliding_window is " +
                           std::to_string(c.sliding_window) +
                           ", want a positive window (or 0 for none)");
  }
  const RopeConfig& r = c.rope;
  if (r.theta == 0.0) return {};
  // The tables are float: a positive value float holds as 0, a subnormal
  // or inf would turn the scaling off or fill the tables with NaN (a factor
  // <= 0 means no scaling; ValidateRopeConfig checks the rest).
  const std::pair<const char*, double> values[] = {
      {"rope_theta", r.theta},
      {"rope_factor", r.factor},
      {"rope_low_freq_factor", r.low_freq_factor},
      {"rope_high_freq_factor", r.high_freq_factor}};
  for (const auto& [name, value] : values) {
    if (value > 0.0 && !std::isnormal(static_cast<float>(value))) {
      std::ostringstream shown;
      shown << value;
      return InvalidArgument(std::string(name) + " is " + shown.str() +
                             ", want a value float holds (magnitude 1.2e-38 "
                             "to 3.4e38)");
    }
  }
  const int64_t head_dim = c.d_out / c.num_heads;
  if (head_dim % 2 != 0) {
    return InvalidArgument("rotary embeddings need an even head_dim, got " +
                           std::to_string(head_dim) + " (d_out / num_heads)");
  }
  return kernels::ValidateRopeConfig(KernelRope(r));
}

kernels::RopeConfig KernelRope(const RopeConfig& rope) {
  kernels::RopeConfig config;
  config.theta = static_cast<float>(rope.theta);
  config.factor = static_cast<float>(rope.factor);
  config.low_freq_factor = static_cast<float>(rope.low_freq_factor);
  config.high_freq_factor = static_cast<float>(rope.high_freq_factor);
  config.original_context_length = rope.original_context_length;
  return config;
}

}  // namespace attn
