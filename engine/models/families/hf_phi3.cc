// Hugging Face's Phi3ForCausalLM: Llama's block with q, k and v in one
// qkv_proj (rows q, k, v) and gate and up in one gate_up_proj (rows gate,
// up), each read as it is and run as one matmul; Mistral's sliding window.
#include <string>

#include "engine/models/families/hf_config.h"
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

// Phi3Config's defaults: rms_norm_eps 1e-5, no window unless given.
constexpr DecoderVariant kPhi3 = {"phi3",
                                  "Phi3ForCausalLM",
                                  4096,
                                  1e-5,
                                  0,
                                  "silu",
                                  /*qkv_bias=*/false,
                                  /*default_window=*/0};

Result<SideConfig> ReadPhi3Config(const std::string& path) {
  return ReadDecoderConfig(path, kPhi3);
}

}  // namespace

Result<graph::GraphDef> Phi3Program(const LmConfig& c) {
  return GatedProgram(c, graph::Op::kSwiGlu);
}

const Family& HfPhi3() {
  static const Family family = {
      "hf-phi3",
      "Hugging Face Phi-3",
      LmArchitecture::kLlama,
      ByRole({
          {Role::kTokEmb, {"embed_tokens.weight"}},
          {Role::kNorm1Scale, {"layers.{i}.input_layernorm.weight"}},
          {Role::kQkv, {"layers.{i}.self_attn.qkv_proj.weight"}},
          {Role::kOut, {"layers.{i}.self_attn.o_proj.weight"}},
          {Role::kNorm2Scale, {"layers.{i}.post_attention_layernorm.weight"}},
          {Role::kGateUp, {"layers.{i}.mlp.gate_up_proj.weight"}},
          {Role::kDown, {"layers.{i}.mlp.down_proj.weight"}},
          {Role::kFinalScale, {"norm.weight"}},
          {Role::kHead, {"lm_head.weight"}},
      }),
      {"layers.{i}.self_attn.rotary_emb.inv_freq"},
      {"model."},
      nullptr,
      ReadPhi3Config,
      " or 'num_attention_heads' in the config.json beside it",
      Phi3Program,
      kPhi3.model_type};
  return family;
}

}  // namespace attn::lm
