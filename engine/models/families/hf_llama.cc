// Hugging Face's Llama and the models that share its names and block:
// LlamaForCausalLM (Llama 2, 3, 3.1, 3.2, SmolLM2, TinyLlama),
// MistralForCausalLM (a sliding window) and Qwen2ForCausalLM (q, k and v
// biases). nn.Linear weights as [out, in] under "model.", a head of its own
// or tied to the embedding, the book's Llama program. config.json says which
// model it is and gives what the tensors do not.
#include <string>

#include "engine/models/families/hf_config.h"
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

// Each with transformers' defaults (LlamaConfig, MistralConfig, ...): the
// context, rms_norm_eps, head_dim, hidden_act, q/k/v biases, window.
constexpr DecoderVariant kLlama = {"llama", "LlamaForCausalLM", 2048};
constexpr DecoderVariant kMistral = {"mistral",
                                     "MistralForCausalLM",
                                     4096 * 32,
                                     1e-6,
                                     0,
                                     "silu",
                                     /*qkv_bias=*/false,
                                     /*default_window=*/4096};
constexpr DecoderVariant kQwen2 = {"qwen2", "Qwen2ForCausalLM", 32768, 1e-6, 0,
                                   "silu",  /*qkv_bias=*/true};

Result<SideConfig> ReadLlamaConfig(const std::string& path) {
  return ReadDecoderConfig(path, kLlama);
}
Result<SideConfig> ReadMistralConfig(const std::string& path) {
  return ReadDecoderConfig(path, kMistral);
}
Result<SideConfig> ReadQwen2Config(const std::string& path) {
  return ReadDecoderConfig(path, kQwen2);
}

}  // namespace

// The names every variant shares.
NameMap HfLlamaNames() {
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

namespace {

Family LlamaLike(const char* name, const char* what,
                 const DecoderVariant& variant,
                 Result<SideConfig> (*read)(const std::string&)) {
  return {name,
          what,
          LmArchitecture::kLlama,
          HfLlamaNames(),
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
