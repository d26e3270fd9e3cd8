// HfConfig: config.json's keys by type.
#include "engine/models/families/hf_config.h"

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>

#include "engine/io/json_limits.h"
#include "nlohmann/json.hpp"

namespace attn::lm {
namespace {

constexpr uint64_t kMaxConfigBytes = 1 << 20;
constexpr int kMaxConfigDepth = 16;

}  // namespace

Result<HfConfig> ReadConfigBeside(const std::string& weights_path) {
  const size_t slash = weights_path.rfind('/');
  HfConfig config;
  const std::string path =
      (slash == std::string::npos ? "" : weights_path.substr(0, slash + 1)) +
      "config.json";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return config;
  config.path = path;
  ATTN_ASSIGN_OR_RETURN(
      const std::string text,
      ReadRegularFile(path, kMaxConfigBytes, "config file " + Quoted(path)));
  ATTN_ASSIGN_OR_RETURN(config.json,
                        ParseCheckedJson(text, kMaxConfigDepth, Quoted(path)));
  if (!config.json.is_object()) {
    return InvalidArgument(Quoted(path) + " is a JSON " +
                           config.json.type_name() +
                           ", want an object of the model's settings");
  }
  return config;
}

Status HfConfig::Refuse(const char* key, const std::string& want) const {
  return InvalidArgument(Quoted(path) + ": " + Quoted(key) + " is " +
                         json[key].dump() + ", " + want);
}

Result<int64_t> HfConfig::Count(const char* key, int64_t fallback) const {
  // Sizes past 2^24 are no model's, and their products would overflow.
  constexpr int64_t kMaxCount = int64_t{1} << 24;
  if (!Has(key)) return fallback;
  if (!json[key].is_number_integer() || json[key].get<int64_t>() <= 0 ||
      json[key].get<int64_t>() > kMaxCount) {
    return Refuse(key,
                  "want a positive integer up to " + std::to_string(kMaxCount));
  }
  return json[key].get<int64_t>();
}

Result<double> HfConfig::Number(const char* key, double fallback) const {
  if (!Has(key)) return fallback;
  if (!json[key].is_number() || !(json[key].get<double>() > 0.0) ||
      !std::isfinite(json[key].get<double>())) {
    return Refuse(key, "want a positive number");
  }
  return json[key].get<double>();
}

Result<bool> HfConfig::Bool(const char* key, bool fallback) const {
  if (!Has(key)) return fallback;
  if (!json[key].is_boolean()) return Refuse(key, "want true or false");
  return json[key].get<bool>();
}

Result<std::string> HfConfig::String(const char* key,
                                     const char* fallback) const {
  if (!Has(key)) return std::string(fallback);
  if (!json[key].is_string()) return Refuse(key, "want a string");
  return json[key].get<std::string>();
}

Status HfConfig::Expect(const char* key,
                        std::initializer_list<nlohmann::json> wanted,
                        const std::string& why) const {
  if (!Has(key)) return {};
  std::string list;
  for (const nlohmann::json& w : wanted) {
    if (json[key] == w) return {};
    list += (list.empty() ? "" : " or ") + w.dump();
  }
  return Refuse(key, "want " + list + " (" + why + ")");
}

namespace {

// Refuses what Hugging Face computes but the book's Llama block does not.
Status CheckComputesLlama(const HfConfig& hf, const DecoderVariant& v) {
  ATTN_RETURN_IF_ERROR(hf.Expect("model_type", {v.model_type},
                                 std::string(v.architecture) + "'s"));
  ATTN_RETURN_IF_ERROR(hf.Expect("architectures",
                                 {nlohmann::json::array({v.architecture})},
                                 "a causal language model"));
  if (v.activation) {
    ATTN_RETURN_IF_ERROR(hf.Expect("hidden_act", {v.activation},
                                   "the family's gated feed-forward"));
  }
  ATTN_RETURN_IF_ERROR(hf.Expect("partial_rotary_factor", {1, 1.0},
                                 "rotary embeddings on every dimension"));
  if (v.qkv_bias) {  // Qwen2's layers past max_window_layers slide
    ATTN_RETURN_IF_ERROR(hf.Expect("use_sliding_window", {false},
                                   "one attention for every layer"));
  } else if (v.default_window < 0 && hf.Has("sliding_window")) {
    return hf.Refuse("sliding_window", "want null (" +
                                           std::string(v.architecture) +
                                           " attends to the whole context)");
  }
  return {};
}

// rope_scaling: null, or Llama 3.1's frequency scaling.
Status ReadRopeScaling(const HfConfig& hf, RopeConfig& rope) {
  if (!hf.Has("rope_scaling")) return {};
  const nlohmann::json& s = hf.json["rope_scaling"];
  const char* type_key =
      s.is_object() && s.contains("rope_type") ? "rope_type" : "type";
  if (!s.is_object() || !s.contains(type_key)) {
    return hf.Refuse("rope_scaling",
                     "want null or an object with 'rope_type' \"llama3\"");
  }
  if (s[type_key] == "default") return {};
  if (s[type_key] != "llama3") {
    return hf.Refuse("rope_scaling",
                     "want 'rope_type' \"llama3\" or null "
                     "(other scalings are not run)");
  }
  HfConfig scaling{hf.path + " 'rope_scaling'", s};
  ATTN_ASSIGN_OR_RETURN(rope.factor, scaling.Number("factor", 0.0));
  ATTN_ASSIGN_OR_RETURN(rope.low_freq_factor,
                        scaling.Number("low_freq_factor", 0.0));
  ATTN_ASSIGN_OR_RETURN(rope.high_freq_factor,
                        scaling.Number("high_freq_factor", 0.0));
  ATTN_ASSIGN_OR_RETURN(rope.original_context_length,
                        scaling.Count("original_max_position_embeddings", 0));
  if (!rope.factor || !rope.low_freq_factor || !rope.high_freq_factor ||
      !rope.original_context_length) {
    return hf.Refuse("rope_scaling",
                     "want 'factor', 'low_freq_factor', 'high_freq_factor' "
                     "and 'original_max_position_embeddings' for \"llama3\"");
  }
  return {};
}

// The attention's dims: heads, K/V heads, head width, context, RoPE and
// the window.
Status ReadAttention(const HfConfig& hf, const DecoderVariant& v,
                     SideConfig& c) {
  AttentionDims& d = c.dims;
  ATTN_ASSIGN_OR_RETURN(d.num_heads, hf.Count("num_attention_heads", 0));
  if (!d.num_heads) {
    return InvalidArgument(Quoted(hf.path) +
                           " has no 'num_attention_heads', want the number "
                           "of query heads");
  }
  c.heads_key = "num_attention_heads";
  ATTN_ASSIGN_OR_RETURN(d.num_kv_heads,
                        hf.Count("num_key_value_heads", d.num_heads));
  ATTN_ASSIGN_OR_RETURN(c.head_dim, hf.Count("head_dim", v.default_head_dim));
  ATTN_ASSIGN_OR_RETURN(d.context_length,
                        hf.Count("max_position_embeddings", v.default_context));
  ATTN_ASSIGN_OR_RETURN(d.rope.theta, hf.Number("rope_theta", 10000.0));
  ATTN_RETURN_IF_ERROR(ReadRopeScaling(hf, d.rope));
  if (v.default_window >= 0) {  // an explicit null is no window
    ATTN_ASSIGN_OR_RETURN(
        d.sliding_window,
        hf.Count("sliding_window",
                 hf.json.contains("sliding_window") ? 0 : v.default_window));
  }
  return {};
}

}  // namespace

Result<SideConfig> ReadDecoderConfig(const std::string& weights_path,
                                     const DecoderVariant& v) {
  ATTN_ASSIGN_OR_RETURN(const HfConfig hf, ReadConfigBeside(weights_path));
  if (hf.path.empty()) {
    return InvalidArgument("the Hugging Face " + std::string(v.architecture) +
                           " weights " + Quoted(weights_path) +
                           " have no config.json beside them");
  }
  ATTN_RETURN_IF_ERROR(CheckComputesLlama(hf, v));
  SideConfig c;
  c.path = hf.path;
  ATTN_RETURN_IF_ERROR(ReadAttention(hf, v, c));
  ATTN_ASSIGN_OR_RETURN(c.norm_eps,
                        hf.Number("rms_norm_eps", v.default_norm_eps));
  if (hf.Has("tie_word_embeddings") || v.tied_by_default) {
    ATTN_ASSIGN_OR_RETURN(const bool tied,
                          hf.Bool("tie_word_embeddings", v.tied_by_default));
    c.tie_word_embeddings = tied ? 1 : 0;
  }
  for (auto [size, key] :
       {std::make_pair(&c.layers, "num_hidden_layers"),
        std::make_pair(&c.emb_dim, "hidden_size"),
        std::make_pair(&c.vocab_size, "vocab_size"),
        std::make_pair(&c.hidden_dim, "intermediate_size")}) {
    size->key = key;
    ATTN_ASSIGN_OR_RETURN(size->value, hf.Count(key, 0));
  }
  ATTN_ASSIGN_OR_RETURN(const bool attention_bias,
                        hf.Bool("attention_bias", false));
  ATTN_ASSIGN_OR_RETURN(const bool mlp_bias, hf.Bool("mlp_bias", false));
  c.qkv_bias = {v.qkv_bias ? "model_type" : "attention_bias",
                v.qkv_bias || attention_bias};
  c.out_bias = {"attention_bias", !v.qkv_bias && attention_bias};
  c.mlp_bias = {"mlp_bias", mlp_bias};
  return c;
}

}  // namespace attn::lm
