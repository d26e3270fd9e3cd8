// LanguageModel's internals, shared by its loader (lm_model.cc), the file
// layouts (lm_layouts.cc) and Batch (lm_batch.cc); never installed.
#ifndef ATTN_ENGINE_MODELS_LM_MODEL_H_
#define ATTN_ENGINE_MODELS_LM_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "attn/safetensors.hpp"
#include "attn/status.hpp"
#include "engine/io/weight_files.h"
#include "engine/ops/linear.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/runner.h"

namespace attn {
namespace lm {

struct Norm {
  StreamedVector<float> scale, shift;  // shift: LayerNorm only
};

struct Layer {
  Norm norm1, norm2;
  std::shared_ptr<const MhaModel> attention;
  // GPT-2: up, GELU, down. Llama: down(silu(up(x)) * gate(x)). Phi-3: up
  // is its fused gate_up, [silu'd rows; rows], and there is no gate. Each
  // has its packed copy and panels (the model decodes).
  ops::Linear up, gate, down;
};

// What each tensor of a model is, whatever a file calls it: per layer from
// kNorm1Scale to kDownBias, once per model otherwise.
enum class Role {
  kTokEmb,
  kPosEmb,
  kNorm1Scale,
  kNorm1Shift,
  kQuery,
  kKey,
  kValue,
  kQueryBias,
  kKeyBias,
  kValueBias,
  kQkv,  // q, k and v stacked in one [out, in] (Phi-3's qkv_proj)
  kOut,
  kOutBias,
  kNorm2Scale,
  kNorm2Shift,
  kUp,
  kUpBias,
  kGate,
  kGateBias,
  kGateUp,  // gate and up stacked in one [2 hidden, in] (Phi-3's)
  kDown,
  kDownBias,
  kFinalScale,
  kFinalShift,
  kHead,
};

// A model's weights by role: `fetch(role, layer, rows, cols)` gives the
// tensor as [rows, cols] (nn.Linear's [out, in] for weights; cols 0 for a
// vector of rows), or an error naming the file's tensor; `has` tells whether
// an optional one is there, `shape` its shape in that form (empty: absent;
// a file's only, for the graph runner: seeded random weights leave it null).
struct WeightSource {
  std::function<Result<StreamedVector<float>>(Role, int64_t, int64_t, int64_t)>
      fetch;
  std::function<bool(Role, int64_t)> has;
  // Where the source stores `role`'s values in `layer` as bf16, laid out as
  // the role wants them (a BF16 checkpoint's), `fetch_bf16` gives them as
  // stored, with no fp32 copy; either may be unset (none is).
  std::function<bool(Role, int64_t)> stores_bf16;
  std::function<Result<StreamedVector<hwy::bfloat16_t>>(Role, int64_t, int64_t,
                                                        int64_t)>
      fetch_bf16;
  std::function<std::vector<int64_t>(Role, int64_t)> shape;
  // A quantized file's (attn quantize): every linear's weight is `quant`'s
  // blocks, which `fetch_blocks` gives in llama.cpp's row layout, [rows,
  // cols / 32] blocks, as stored; `fetch` then serves the rest.
  std::optional<kernels::QuantType> quant;
  std::function<Result<AlignedBuffer>(Role, int64_t, int64_t, int64_t)>
      fetch_blocks;
  // A file's name of `role` in `layer` (empty when its layout has none);
  // unset for weights of no file.
  std::function<std::string(Role, int64_t)> name;
};

// Whether `role` is a linear's weight: what a quantized model quantizes.
bool IsLinearWeight(Role role);
// The [out, in] of linear weight `role` in a model of `c` (sizes checked).
std::pair<int64_t, int64_t> LinearShape(const LmConfig& c, Role role);

// A file's configuration (its layout, hyper-parameters and sizes, with
// `options` applied) and its weights under the book's names.
struct FileModel {
  LmConfig config;
  WeightSource weights;  // reads the file, which it keeps open
  std::shared_ptr<const WeightFiles> files;
};

// Tells the file's layout by its tensor names and reads its configuration
// (lm_layouts.cc). Errors name what was found and what was wanted.
Result<FileModel> OpenModelFile(const std::string& path,
                                const LmOptions& options);
// The layout's name, or an empty string when the names fit none.
std::string DetectLayout(const WeightFiles& file);
// The role and layer of the book's name `name` in `architecture`'s book
// layout ("trf_blocks.3.att.W_query.weight": kQuery, 3; 0 for a tensor of
// the whole model); nothing for a name without a role (att.mask).
std::optional<std::pair<Role, int64_t>> BookRole(LmArchitecture architecture,
                                                 const std::string& name);
// The book's name of `role` in `layer` (BookRole's inverse); empty for a
// role the architecture's book layout has none for.
std::string BookName(LmArchitecture architecture, Role role, int64_t layer);

// What a LanguageModel holds; the engine reaches it through ModelAccess.
struct ModelData {
  LmConfig config;
  // kBF16: every matrix is held in bf16 (a tied head's embeddings rounded
  // alike), the rest in fp32; see LmOptions.
  DType dtype = DType::kF32;
  int num_threads = 1;
  uint64_t max_memory_bytes = 0;  // resolved: never 0
  // [V, e]: bf16 where that holds the numbers the model computes with (a
  // bf16 model's tied ones, a BF16 checkpoint's unless an fp32 head borrows
  // them), else fp32 (EmbeddingsInBf16 in lm_model.cc).
  ops::Weight tok_emb;
  StreamedVector<float> pos_emb;  // [context, e] (GPT-2)
  std::vector<Layer> layers;
  Norm final_norm;
  ops::Linear head;  // tied: made from tok_emb (fp32, bf16: borrowed)
  // The program its family builds (lm_family.h), lowered, its nodes bound
  // to the weights above; per node, the layer whose attention an mha node
  // runs.
  graph::GraphDef def;
  graph::Program program;
  BoundProgram bound;
  std::vector<int64_t> mha_layer;
};

// The sizes a model may have: each within the engine's limits, the heads
// dividing the width; errors name the field.
Status CheckSizes(const LmConfig& c);
// Quantized dtypes take linears whose inputs are whole blocks.
Status CheckQuantizable(const LmConfig& c, DType dtype);

// Builds m's program from its family and binds it to m's weights, which
// must be in place (lm_program.cc).
Status BuildProgram(ModelData& m);

}  // namespace lm

struct LanguageModel::Impl : lm::ModelData {};

}  // namespace attn

#endif  // ATTN_ENGINE_MODELS_LM_MODEL_H_
