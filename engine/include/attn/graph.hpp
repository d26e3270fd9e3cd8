/* attn/graph.hpp: the graph runner. Runs a block or a whole model described
 * in JSON (ops such as embedding, linear, mha, layernorm, gelu, add, repeat;
 * see engine/README.md, "Graphs") with weights from a safetensors file. A
 * GraphModel is loaded and validated once and shared; each thread's
 * GraphSession creates primitives, packs weights and plans memory once per
 * input shape, and its runs allocate no buffers. */
#ifndef ATTN_GRAPH_HPP_
#define ATTN_GRAPH_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "attn/attn.hpp"
#include "attn/export.h"
#include "attn/status.hpp"

namespace attn {

// How to load a graph: the fields every model takes (ModelOptions), and the
// layer count. num_heads and context_length apply to mha nodes, after their
// own attributes. dtype kBF16 runs linear and mha matmuls in bf16 with fp32
// accumulation (LayerNorm, GELU, softmax and residual adds stay fp32; needs
// AVX512_BF16). max_memory_bytes caps the weights, and one session's buffers
// for one shape.
struct GraphOptions : ModelOptions {
  // Runs the graph this many times in sequence, the i-th time with every
  // weight name prefixed by "trf_blocks.{i}." (the book's GPTModel). 0: once,
  // with the names as written (else metadata "n_layers" when present).
  // For a graph with a repeat node: that node's layer count instead (0: its
  // `count` attribute, else the layers the weights file holds).
  int64_t layers = 0;
};

// Memory a session's compiled plan uses for one input shape, in bytes.
struct GraphMemory {
  // The arena: activations and every step's buffers (matmul and attention
  // scratch among them).
  size_t planned_peak = 0;
  size_t intermediates_total = 0;  // what one buffer for each would take
  size_t workspace = 0;            // packed weights
};

// A loaded, validated graph and its weights (converted to fp32 once, here).
// Immutable: the files are never read again, and any number of threads may
// share one model, each running its own GraphSession.
class ATTN_API GraphModel {
 public:
  // Parses and validates `graph_path`, binds the weights it names in
  // `weights_path` (their shapes decide every width) and loads them.
  static Result<std::shared_ptr<const GraphModel>> Load(
      const std::string& graph_path, const std::string& weights_path,
      const GraphOptions& options = {});
  // As Load, with the JSON given as text; `source` names it in messages.
  static Result<std::shared_ptr<const GraphModel>> FromJson(
      const std::string& json, const std::string& weights_path,
      const GraphOptions& options = {}, const std::string& source = "graph");

  ~GraphModel();
  int64_t input_width() const;   // e of the input [b, T, e]; 1 for token ids
  int64_t output_width() const;  // of the output [b, T, output_width]
  int64_t layers() const;  // times the graph runs per Run (1 with a repeat)
  // Whether the input is token ids [b, T] (an embedding reads it): run it
  // with the int64_t overload of GraphSession::Run.
  bool token_input() const;
  DType dtype() const;
  int num_threads() const;  // the resolved team size
  // Bytes the model holds: its weights (fp32) and their packed copies.
  uint64_t memory_bytes() const;
  // FLOPs of one Run of `batch` sequences of `seq_len` tokens, as `attn
  // bench` counts them: 2 x rows x in x out for each linear, and each mha
  // node's attn::bench::BlockFlops (its projections, and its core at the
  // causal half); norms, activations, adds and embeddings not counted.
  double flops(int64_t batch, int64_t seq_len) const;

 private:
  friend struct ModelAccess;  // the engine's sessions read the model
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit GraphModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Per-thread execution state: the primitives, packed weights and planned
// buffers for the last input shape. Not thread-safe: one session per thread.
// Results are bitwise identical between sessions of one model.
class ATTN_API GraphSession {
 public:
  // A null `model` (or a moved-from session) refuses to run.
  explicit GraphSession(std::shared_ptr<const GraphModel> model);
  GraphSession(GraphSession&&) noexcept;
  GraphSession& operator=(GraphSession&&) noexcept;
  ~GraphSession();

  // input: [batch, seq_len, input_width] fp32, output: [batch, seq_len,
  // output_width] fp32, dense, not overlapping. A new (batch, seq_len)
  // prepares once; repeated calls with that shape allocate no buffers.
  Status Run(const float* input, int64_t batch, int64_t seq_len, float* output);
  // For a model whose token_input() is true: token_ids [batch, seq_len],
  // each in [0, vocab) of every embedding reading them, and seq_len within
  // every position_embedding's rows; otherwise as above.
  Status Run(const int64_t* token_ids, int64_t batch, int64_t seq_len,
             float* output);
  // Creates every primitive, packs every weight and plans the buffers for
  // input [batch, seq_len, input_width] without running (Run calls it when
  // the shape changes).
  Status Prepare(int64_t batch, int64_t seq_len);
  // The prepared shape's memory (zeros before Prepare).
  GraphMemory memory() const;
  // The session's model; only for a session made with one.
  const GraphModel& model() const { return *model_; }

 private:
  struct ATTN_NO_EXPORT Plan;
  std::shared_ptr<const GraphModel> model_;
  std::unique_ptr<Plan> plan_;
};

}  // namespace attn

#endif  // ATTN_GRAPH_HPP_
