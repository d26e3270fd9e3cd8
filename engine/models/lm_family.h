// A model family as its files store it: the name of the tensor playing each
// role (lm::Role), how it is laid out, the buffers a state dict keeps beside
// the weights, and what the family reads besides the tensors (Hugging Face's
// config.json). One family is one file in engine/models/families/; the
// registry there lists them, and lm_layouts.cc reads any of them.
#ifndef ATTN_ENGINE_MODELS_LM_FAMILY_H_
#define ATTN_ENGINE_MODELS_LM_FAMILY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "attn/lm.hpp"
#include "attn/safetensors.hpp"
#include "attn/status.hpp"
#include "engine/io/model_config.h"
#include "engine/io/weight_files.h"
#include "engine/models/lm_model.h"
#include "engine/runtime/graph_ir.h"

namespace attn::lm {

constexpr size_t kNumRoles = static_cast<size_t>(Role::kHead) + 1;

// How a file's tensor maps onto a role's [out, in] (or [n]).
enum class Form {
  kPlain,       // as the role wants it
  kTransposed,  // Conv1D: [in, out]
  kThird,       // one of q, k, v: columns (or elements) part*n..(part+1)*n
                // of a Conv1D [in, 3n] (or [3n]) tensor
  kOnePlus,     // Gemma's RMSNorm weight w, which scales by 1 + w (fp32)
};

struct TensorName {
  const char* name = nullptr;  // "{i}" stands for the layer; null: none
  Form form = Form::kPlain;
  int part = 0;  // kThird: 0 q, 1 k, 2 v
};

// A role's tensor, as a family's name map lists it.
struct RoleName {
  Role role;
  TensorName tensor;
};

using NameMap = std::array<TensorName, kNumRoles>;  // by Role

// The map indexed by role (roles left out have no tensor).
NameMap ByRole(std::initializer_list<RoleName> names);

// What a family reads beside the weights (a config.json): the attention
// dims it gives, the norm epsilon, whether the head is tied, and the sizes
// the tensors must agree with, each under the file's key (0 or -1: absent).
struct SideConfig {
  struct Size {
    const char* key = nullptr;
    int64_t value = 0;
  };
  // Whether the model has a kind of bias, and the key that says so.
  struct Flag {
    const char* key = nullptr;  // null: not said
    bool value = false;
  };
  std::string path;  // empty: none was read
  AttentionDims dims;
  const char* heads_key = "n_head";  // where dims.num_heads came from
  int64_t head_dim = 0;              // 0: emb_dim / num_heads
  float embedding_scale = 0.0f;      // LmConfig::embedding_scale
  double norm_eps = 0.0;
  int tie_word_embeddings = -1;  // 0 or 1 when given
  Size layers, emb_dim, vocab_size, hidden_dim;
  Flag qkv_bias, out_bias, mlp_bias;
};

struct Family {
  const char* name;  // "hf-gpt2": LmConfig::layout
  const char* what;  // "Hugging Face GPT-2", for messages
  LmArchitecture architecture;
  NameMap tensors;
  // Buffers a PyTorch state dict may hold beside the weights, unread.
  std::array<const char*, 5> buffers;
  // The prefixes a file may put before every name but the head's
  // ("transformer." for some Hugging Face GPT-2 files).
  std::array<const char*, 2> prefixes;
  // Whether a file whose token embedding lies under `prefix` is this
  // family; null: every such file (the registry tries families in order).
  bool (*recognises)(const WeightFiles& file, const std::string& prefix);
  // Reads and checks what the family keeps beside `weights_path`; null for
  // nothing. `heads_hint` says where else num_heads may come from.
  Result<SideConfig> (*read_side_config)(const std::string& weights_path);
  const char* heads_hint;
  // The program the family's models run, its weights under the book's
  // names (BookRole): what tools/graphs/ holds for the family, as nodes.
  Result<graph::GraphDef> (*program)(const LmConfig& config);
  // Hugging Face's name for it (config.json's model_type); null for the
  // book's. A file whose config.json names another type is not this family.
  const char* model_type = nullptr;
};

// Builders' pieces. A node reading `inputs` and writing `output`, with its
// weights by role (graph_ir.h's Node::weights).
graph::Node ProgramNode(
    const char* name, graph::Op op, std::vector<std::string> inputs,
    const char* output,
    std::vector<std::pair<std::string, std::vector<std::string>>> weights = {},
    float eps = 1e-5f);
// A graph of `nodes` from `input` to `output`.
graph::GraphDef ProgramGraph(const char* input, const char* output,
                             std::vector<graph::Node> nodes);
// `model` with its repeat node run as `block` once per layer of `config`,
// layer i's weights under "trf_blocks.{i}." (the book's ModuleList).
Result<graph::GraphDef> RepeatBlock(graph::GraphDef model,
                                    graph::GraphDef block,
                                    const LmConfig& config);

// The programs of the book's GPTModel (and GPT-2's) and of its Llama; a
// Llama block whose feed-forward gates with `activation` (kSilu: Llama's,
// kGelu: Gemma's GeGLU, kSwiGlu: Phi-3's fused gate_up), its embedding
// scaled by config.embedding_scale.
Result<graph::GraphDef> GptProgram(const LmConfig& config);
Result<graph::GraphDef> LlamaProgram(const LmConfig& config);
Result<graph::GraphDef> GatedProgram(const LmConfig& config,
                                     graph::Op activation);

// The family `config` was read as (LmConfig::layout); a seeded model's:
// the book's of its architecture.
const Family& FamilyOf(const LmConfig& config);

// The families a whole-model file may be, in the order they are tried.
const std::vector<const Family*>& Families();

const Family& BookGpt();
const Family& HfGpt2();
const Family& BookLlama();
// Hugging Face Llama's names (under "model.", but the head).
NameMap HfLlamaNames();

const Family& HfLlama();
const Family& HfMistral();
const Family& HfQwen2();
const Family& HfGemma();
const Family& HfPhi3();

}  // namespace attn::lm

#endif  // ATTN_ENGINE_MODELS_LM_FAMILY_H_
