/* attn/graph.hpp: the graph runner. Runs a block described in JSON (ops such
 * as linear, mha, layernorm, gelu, add, dropout; see README "Graphs") with
 * weights from a safetensors file. Validation, primitives, packed weights
 * and memory planning happen once per input shape; runs allocate no buffers. */
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

// How to load a graph. Zeros mean "not set here".
struct GraphOptions {
  int64_t num_heads = 0;       // mha nodes: else their num_heads attribute,
                               // else the weights' metadata "num_heads"
  int64_t context_length = 0;  // mha nodes: else attribute, metadata
                               // "context_length", then the mask buffer
  // Runs the graph this many times in sequence, the i-th time with every
  // weight name prefixed by "trf_blocks.{i}." (the book's GPTModel). 0: once,
  // with the names as written (else metadata "n_layers" when present).
  int64_t layers = 0;
  int num_threads = 0;  // else ATTN_NUM_THREADS, else the cores we may use
  // kBF16: linear and mha matmuls in bf16 with fp32 accumulation; LayerNorm,
  // GELU, softmax and residual adds stay fp32. Needs AVX512_BF16.
  DType dtype = DType::kF32;
  // Most memory the weights, or one compiled shape's buffers, may ask for;
  // 0: DefaultMaxMemoryBytes(). Checked before allocating, as for MhaModel.
  uint64_t max_memory_bytes = 0;
};

// Memory the compiled plan uses for one input shape, in bytes.
struct GraphMemory {
  size_t planned_peak = 0;         // the shared activation arena
  size_t intermediates_total = 0;  // what one buffer per tensor would take
  size_t workspace = 0;            // packed weights and per-op scratch
};

// A loaded graph and its compiled plan for the last input shape. Not
// thread-safe: one Graph per thread (Fork gives each thread its own).
class ATTN_API Graph {
 public:
  // Parses and validates `graph_path`, binds the weights it names in
  // `weights_path` (their shapes decide every width) and loads them.
  static Result<std::unique_ptr<Graph>> Load(const std::string& graph_path,
                                             const std::string& weights_path,
                                             const GraphOptions& options = {});
  // As Load, with the JSON given as text; `source` names it in messages.
  static Result<std::unique_ptr<Graph>> FromJson(
      const std::string& json, const std::string& weights_path,
      const GraphOptions& options = {}, const std::string& source = "graph");

  // A new Graph sharing this one's loaded definition and weights (read-only;
  // the files are never read again) with a compiled plan of its own: one per
  // thread. Safe while other threads run this Graph or its other forks.
  std::unique_ptr<Graph> Fork() const;

  ~Graph();
  int64_t input_width() const;   // e of the input [b, T, e]
  int64_t output_width() const;  // of the output [b, T, output_width]
  int64_t layers() const;        // times the graph runs per Run
  int num_threads() const;

  // Creates every primitive, packs every weight and plans the buffers for
  // input [batch, seq_len, input_width]. Run calls it when the shape changes.
  Status Compile(int64_t batch, int64_t seq_len);
  // input: [batch, seq_len, input_width] fp32, output: [batch, seq_len,
  // output_width] fp32, dense, not overlapping. Allocates no buffers when the
  // shape is the compiled one.
  Status Run(const float* input, int64_t batch, int64_t seq_len, float* output);
  // The compiled shape's memory (zeros before Compile).
  GraphMemory memory() const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit Graph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn

#endif  // ATTN_GRAPH_HPP_
