// Hugging Face's Llama and the models that share its names and block:
// LlamaForCausalLM (Llama 2, 3, 3.1, 3.2, SmolLM2, TinyLlama),
// MistralForCausalLM (a sliding window) and Qwen2ForCausalLM (q, k and v
// biases). nn.Linear weights as [out, in] under "model.", a head of its own
// or tied to the embedding, the book's Llama program. config.json says which
// model it is and gives what the tensors do not.
#include <string>

#include "engine/io/json_limits.h"
#include "engine/models/families/hf_config.h"
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

// What one model type's config.json may say, as Hugging Face reads it.
struct Variant {
  const char* model_type;
  const char* architecture;
  int64_t default_context;  // max_position_embeddings when absent
  bool qkv_bias;            // Qwen2: always; the others: attention_bias
};

constexpr Variant kLlama = {"llama", "LlamaForCausalLM", 2048, false};
constexpr Variant kMistral = {"mistral", "MistralForCausalLM", 4096 * 32,
                              false};
constexpr Variant kQwen2 = {"qwen2", "Qwen2ForCausalLM", 32768, true};

// Refuses what Hugging Face computes but the book's Llama block does not.
Status CheckComputesLlama(const HfConfig& hf, const Variant& v) {
  ATTN_RETURN_IF_ERROR(hf.Expect("model_type", {v.model_type},
                                 std::string(v.architecture) + "'s"));
  ATTN_RETURN_IF_ERROR(hf.Expect("architectures",
                                 {nlohmann::json::array({v.architecture})},
                                 "a causal language model"));
  ATTN_RETURN_IF_ERROR(
      hf.Expect("hidden_act", {"silu"}, "the SiLU-gated feed-forward"));
  ATTN_RETURN_IF_ERROR(hf.Expect("partial_rotary_factor", {1, 1.0},
                                 "rotary embeddings on every dimension"));
  if (v.qkv_bias) {  // Qwen2's layers past max_window_layers slide
    ATTN_RETURN_IF_ERROR(hf.Expect("use_sliding_window", {false},
                                   "one attention for every layer"));
  } else if (&v != &kMistral && hf.Has("sliding_window")) {
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
  if (!s.is_object() || !s.contains(type_key) || s[type_key] == "default") {
    if (s.is_object() && s.contains(type_key)) return {};
    return hf.Refuse("rope_scaling",
                     "want null or an object with 'rope_type' \"llama3\"");
  }
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
Status ReadAttention(const HfConfig& hf, const Variant& v, SideConfig& c) {
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
  ATTN_ASSIGN_OR_RETURN(c.head_dim, hf.Count("head_dim", 0));
  ATTN_ASSIGN_OR_RETURN(d.context_length,
                        hf.Count("max_position_embeddings", v.default_context));
  ATTN_ASSIGN_OR_RETURN(d.rope.theta, hf.Number("rope_theta", 10000.0));
  ATTN_RETURN_IF_ERROR(ReadRopeScaling(hf, d.rope));
  if (&v == &kMistral) {
    ATTN_ASSIGN_OR_RETURN(d.sliding_window, hf.Count("sliding_window", 0));
  }
  return {};
}

Result<SideConfig> ReadConfig(const std::string& weights_path,
                              const Variant& v) {
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
  ATTN_ASSIGN_OR_RETURN(c.norm_eps, hf.Number("rms_norm_eps", 1e-6));
  if (hf.Has("tie_word_embeddings")) {
    ATTN_ASSIGN_OR_RETURN(const bool tied,
                          hf.Bool("tie_word_embeddings", false));
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

Result<SideConfig> ReadLlamaConfig(const std::string& path) {
  return ReadConfig(path, kLlama);
}
Result<SideConfig> ReadMistralConfig(const std::string& path) {
  return ReadConfig(path, kMistral);
}
Result<SideConfig> ReadQwen2Config(const std::string& path) {
  return ReadConfig(path, kQwen2);
}

// The names every variant shares.
NameMap LlamaNames() {
  return ByRole({
      {Role::kTokEmb, {"embed_tokens.weight"}},
      {Role::kNorm1Scale, {"layers.{i}.input_layernorm.weight"}},
      {Role::kQuery, {"layers.{i}.self_attn.q_proj.weight"}},
      {Role::kKey, {"layers.{i}.self_attn.k_proj.weight"}},
      {Role::kValue, {"layers.{i}.self_attn.v_proj.weight"}},
      {Role::kQueryBias, {"layers.{i}.self_attn.q_proj.bias"}},
      {Role::kKeyBias, {"layers.{i}.self_attn.k_proj.bias"}},
      {Role::kValueBias, {"layers.{i}.self_attn.v_proj.bias"}},
      {Role::kOut, {"layers.{i}.self_attn.o_proj.weight"}},
      {Role::kOutBias, {"layers.{i}.self_attn.o_proj.bias"}},
      {Role::kNorm2Scale, {"layers.{i}.post_attention_layernorm.weight"}},
      {Role::kUp, {"layers.{i}.mlp.gate_proj.weight"}},  // SiLU'd: fc1
      {Role::kUpBias, {"layers.{i}.mlp.gate_proj.bias"}},
      {Role::kGate, {"layers.{i}.mlp.up_proj.weight"}},  // fc2
      {Role::kGateBias, {"layers.{i}.mlp.up_proj.bias"}},
      {Role::kDown, {"layers.{i}.mlp.down_proj.weight"}},
      {Role::kDownBias, {"layers.{i}.mlp.down_proj.bias"}},
      {Role::kFinalScale, {"norm.weight"}},
      {Role::kHead, {"lm_head.weight"}},
  });
}

Family LlamaLike(const char* name, const char* what, const Variant& variant,
                 Result<SideConfig> (*read)(const std::string&)) {
  return {name,
          what,
          LmArchitecture::kLlama,
          LlamaNames(),
          {"layers.{i}.self_attn.rotary_emb.inv_freq"},
          {"model."},
          nullptr,
          read,
          " or 'num_attention_heads' in the config.json beside it",
          LlamaProgram,
          variant.model_type};
}

}  // namespace

const Family& HfLlama() {
  static const Family family =
      LlamaLike("hf-llama", "Hugging Face Llama", kLlama, ReadLlamaConfig);
  return family;
}

const Family& HfMistral() {
  static const Family family = LlamaLike("hf-mistral", "Hugging Face Mistral",
                                         kMistral, ReadMistralConfig);
  return family;
}

const Family& HfQwen2() {
  static const Family family =
      LlamaLike("hf-qwen2", "Hugging Face Qwen2", kQwen2, ReadQwen2Config);
  return family;
}

}  // namespace attn::lm
