/* attn/model.hpp: the one vocabulary for everything attn runs. A Model is
 * loaded once (the chapter-3 attention's weights, a whole language model's,
 * or a JSON graph over a file's weights), immutable and shared by threads; a
 * Session is one thread's forward over [batch, seq_len]; a Batch is one
 * thread's sequences that come and go (continuous batching) on a language
 * model. The kinds' own classes (attn.hpp's MhaModel, graph.hpp's
 * GraphModel, lm.hpp's LanguageModel) hold what only that kind has. */
#ifndef ATTN_MODEL_HPP_
#define ATTN_MODEL_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "attn/attn.hpp"
#include "attn/export.h"
#include "attn/graph.hpp"
#include "attn/lm.hpp"
#include "attn/status.hpp"

namespace attn {

enum class ModelKind {
  kAttention,      // the chapter-3 MultiHeadAttention (MhaModel)
  kGraph,          // a JSON graph over a file's weights (GraphModel)
  kLanguageModel,  // a whole language model (LanguageModel)
};

// What Model::Load reads: a safetensors file, and a JSON graph to run on
// its weights (empty: the file is a model by itself).
struct ModelFiles {
  std::string weights;
  std::string graph;
};

// How to load any model: what every kind takes (ModelOptions), and what one
// kind reads (ignored by the others). The attention in dtype kBF16 also
// decodes its steps on bf16 weights (MhaOptions::step_weights), as a
// language model does.
struct LoadOptions : ModelOptions {
  int64_t layers = 0;     // graphs: GraphOptions::layers
  double norm_eps = 0.0;  // language models: LmOptions::norm_eps
  bool decode = true;     // the attention: MhaOptions::decode
  bool sessions = true;   // the attention: MhaOptions::sessions
};

class ATTN_API Model {
 public:
  // A graph when files.graph is set; else a language model when the file's
  // tensor names are a model family's (LanguageModel::IsLanguageModelFile);
  // else the chapter-3 attention. Errors are the kind's loader's.
  static Result<std::shared_ptr<const Model>> Load(
      const ModelFiles& files, const LoadOptions& options = {});
  // A model made by its kind's own class (MhaModel::Create,
  // LanguageModel::Random, ...).
  static std::shared_ptr<const Model> Of(std::shared_ptr<const MhaModel> model);
  static std::shared_ptr<const Model> Of(
      std::shared_ptr<const GraphModel> model);
  static std::shared_ptr<const Model> Of(
      std::shared_ptr<const LanguageModel> model);
  ~Model();

  ModelKind kind() const;
  // Whether a Session's input is token ids (a language model, or a graph
  // whose input an embedding reads) rather than floats.
  bool token_input() const;
  // Floats per row of a Session's input (0 for token input) and output (a
  // language model's: the vocabulary's logits).
  int64_t input_width() const;
  int64_t output_width() const;
  int num_threads() const;  // the resolved team size
  uint64_t memory_bytes() const;
  // The kind's own model; null unless it is that kind.
  const std::shared_ptr<const MhaModel>& attention() const;
  const std::shared_ptr<const GraphModel>& graph() const;
  const std::shared_ptr<const LanguageModel>& language_model() const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit Model(std::unique_ptr<Impl> impl);
  ATTN_NO_EXPORT static std::shared_ptr<const Model> Make(Impl impl);
  std::unique_ptr<Impl> impl_;
};

// One thread's forward passes over [batch, seq_len]: plans and buffers are
// made once per shape, and a run of a shape already seen allocates no
// buffers.
// Not thread-safe: one session per thread. Results are bitwise identical
// between sessions of one model and at every thread count.
class ATTN_API Session {
 public:
  // A null `model` refuses to run.
  explicit Session(std::shared_ptr<const Model> model);
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  // input [batch, seq_len, input_width()], output [batch, seq_len,
  // output_width()], fp32, dense, not overlapping; for a model without
  // token input.
  Status Run(const float* input, int64_t batch, int64_t seq_len, float* output);
  // token ids [batch, seq_len] to [batch, seq_len, output_width()], for a
  // model with token input; a language model's output is every position's
  // logits, each row as its sequence alone would give them.
  Status Run(const int64_t* tokens, int64_t batch, int64_t seq_len,
             float* output);
  // The session's model; null for a session made with none.
  const std::shared_ptr<const Model>& model() const { return model_; }

 private:
  struct ATTN_NO_EXPORT Impl;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn

#endif  // ATTN_MODEL_HPP_
