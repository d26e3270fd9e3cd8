// Hugging Face's GemmaForCausalLM (Gemma 1): Llama's names and block, but
// RMSNorm scaling by 1 + w, a GeGLU feed-forward (tanh GELU), token
// embeddings multiplied by sqrt(hidden_size) in the checkpoint's dtype, and
// the head tied to the embedding.
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/io/json_limits.h"
#include "engine/models/families/hf_config.h"
#include "engine/models/lm_family.h"

namespace attn::lm {
namespace {

// GemmaConfig's defaults: context 8192, head_dim 256, tied.
constexpr DecoderVariant kGemma = {"gemma",
                                   "GemmaForCausalLM",
                                   8192,
                                   1e-6,
                                   256,
                                   /*activation=*/nullptr,  // below
                                   /*qkv_bias=*/false,
                                   /*default_window=*/-1,
                                   /*tied_by_default=*/true};

// `x` (a normal number, as sqrt(hidden_size) is in every dtype here) rounded
// to the nearest of `bits` significant bits, ties to even.
double RoundToBits(double x, int bits) {
  int exponent = 0;
  const double mantissa = std::frexp(x, &exponent);  // in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(mantissa, bits)),
                    exponent - bits);
}

// `x` in the checkpoint's dtype (config.json's dtype or torch_dtype), as
// torch.tensor(x, dtype) stores it: float32, float16 (11 significant bits)
// or bfloat16 (8), rounded to nearest even.
Result<float> InDType(double x, const HfConfig& hf) {
  // Newer transformers write "dtype" where older ones wrote "torch_dtype".
  const char* key = hf.Has("dtype") ? "dtype" : "torch_dtype";
  ATTN_ASSIGN_OR_RETURN(const std::string dtype, hf.String(key, "float32"));
  if (dtype == "float32") return static_cast<float>(x);
  if (dtype == "float16") return static_cast<float>(RoundToBits(x, 11));
  if (dtype == "bfloat16") return static_cast<float>(RoundToBits(x, 8));
  return hf.Refuse(key, "want \"float32\", \"bfloat16\" or \"float16\"");
}

// Hugging Face's Gemma takes hidden_activation (null: the tanh GELU, and
// hidden_act is then ignored) and refuses Gemma 2's soft-capping keys here.
Status CheckComputesGemma(const HfConfig& hf) {
  ATTN_RETURN_IF_ERROR(hf.Expect("hidden_activation", {"gelu_pytorch_tanh"},
                                 "the tanh GELU of Gemma's GeGLU"));
  if (!hf.Has("hidden_activation")) {
    ATTN_RETURN_IF_ERROR(hf.Expect("hidden_act", {"gelu", "gelu_pytorch_tanh"},
                                   "Gemma's GeGLU"));
  }
  for (const char* key :
       {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (hf.Has(key)) return hf.Refuse(key, "want null (Gemma 1 has none)");
  }
  return {};
}

Result<SideConfig> ReadGemmaConfig(const std::string& path) {
  ATTN_ASSIGN_OR_RETURN(SideConfig c, ReadDecoderConfig(path, kGemma));
  ATTN_ASSIGN_OR_RETURN(const HfConfig hf, ReadConfigBeside(path));
  ATTN_RETURN_IF_ERROR(CheckComputesGemma(hf));
  if (!c.emb_dim.value) {
    return InvalidArgument(Quoted(c.path) +
                           " has no 'hidden_size', want the "
                           "width Gemma scales its embeddings by");
  }
  ATTN_ASSIGN_OR_RETURN(
      c.embedding_scale,
      InDType(std::sqrt(static_cast<double>(c.emb_dim.value)), hf));
  return c;
}

// Llama's names, each norm read as 1 + w (Gemma scales by it: in fp32, as
// Hugging Face's GemmaRMSNorm); Gemma has no feed-forward biases.
NameMap GemmaNames() {
  NameMap names = HfLlamaNames();
  for (Role norm : {Role::kNorm1Scale, Role::kNorm2Scale, Role::kFinalScale}) {
    names[static_cast<size_t>(norm)].form = Form::kOnePlus;
  }
  for (Role bias : {Role::kUpBias, Role::kGateBias, Role::kDownBias}) {
    names[static_cast<size_t>(bias)] = {};
  }
  return names;
}

}  // namespace

Result<graph::GraphDef> GemmaProgram(const LmConfig& c) {
  return GatedProgram(c, graph::Op::kGelu);
}

const Family& HfGemma() {
  static const Family family = {
      "hf-gemma",
      "Hugging Face Gemma",
      LmArchitecture::kLlama,
      GemmaNames(),
      {"layers.{i}.self_attn.rotary_emb.inv_freq"},
      {"model."},
      nullptr,
      ReadGemmaConfig,
      " or 'num_attention_heads' in the config.json beside it",
      GemmaProgram,
      kGemma.model_type};
  return family;
}

}  // namespace attn::lm
