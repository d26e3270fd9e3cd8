// Runner: the one loop that executes a graph::Program. Every front end
// runs through it: a JSON graph (GraphSession: rows [b, T], attention
// without a cache) and a whole language model, whose family builds the
// program (Batch: packed rows of many sequences, attention on a
// KvCache). The owner binds each node to its weights and runs the mha
// steps; the runner plans, per row count, the linears and one arena by
// liveness (graph_plan.h), and runs every other step itself.
#ifndef ATTN_ENGINE_RUNTIME_RUNNER_H_
#define ATTN_ENGINE_RUNTIME_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/status.hpp"
#include "engine/ops/linear.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/graph_ir.h"
#include "kernels/matmul.h"

namespace attn {

// What one node reads besides its tensors, in one layer.
struct NodeBinding {
  const ops::Linear* linear = nullptr;  // linear
  const float* weight = nullptr;        // a norm's scale; an embedding's table
  const float* bias = nullptr;          // a layernorm's shift
  int64_t rows = 0;                     // an embedding table's rows
  // An embedding's table held in bf16 (weight then null), widened as read.
  const hwy::bfloat16_t* bf16_table = nullptr;
};

// A program, its tensors' widths and types, and its nodes' weights: per
// layer (a graph stacked N times; one for a whole model) and node.
struct BoundProgram {
  const graph::GraphDef* def = nullptr;  // for the nodes' attributes
  const graph::Program* program = nullptr;
  std::vector<int64_t> widths;           // per program tensor
  std::vector<kernels::DataType> types;  // per program tensor
  std::vector<std::vector<NodeBinding>> layers;
};

// How the linears run. A graph fuses GELU and a residual add into the
// matmul as oneDNN post-ops and packs a copy where a plan cannot read the
// model's; a language model keeps them out of the matmul so that steps of
// a few rows run RowsLinear on its panels, and reads the plain weights
// where the packed copy does not fit (and it kept them: ops::Linear).
struct RunnerPolicy {
  bool post_ops = true;
  ops::LinearFallback fallback = ops::LinearFallback::kOwnPacked;
  // Keep an arena that holds the new plan rather than make one of its size
  // (a batch, whose steps change size all the time).
  bool grow_only = false;
};

// The shape a run is prepared for. Steps after `keep_step` (the last mha,
// which keeps num_kept of its rows) run on those rows alone; every tensor
// they read from before it is gathered to them (llama.cpp's output ids).
struct RunShape {
  int64_t rows = 0;
  std::optional<size_t> keep_step;
  int64_t num_kept = 0;
  bool operator==(const RunShape& other) const {
    return rows == other.rows && keep_step == other.keep_step &&
           num_kept == other.num_kept;
  }
};

// The rows of one run of the prepared shape: token ids (a token-input
// program's), each row's position (null: row r is position r % seq_len of
// a [rows / seq_len, seq_len] batch), and the rows kept (ascending).
struct RunRows {
  int64_t seq_len = 0;
  const int64_t* tokens = nullptr;
  const int64_t* positions = nullptr;
  const int64_t* kept = nullptr;
};

// A callable borrowed for one call, never stored and never copied: no
// allocation, as a std::function holding a lambda's captures may make.
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  FunctionRef(const F& f)  // NOLINT(google-explicit-constructor): a view
      : object_(&f), call_([](const void* object, Args... args) -> R {
          return (*static_cast<const F*>(object))(args...);
        }) {}
  R operator()(Args... args) const { return call_(object_, args...); }

 private:
  const void* object_;
  R (*call_)(const void*, Args...);
};

class Runner {
 public:
  // An mha step: step `k` of layer `layer` from src to dst, with the
  // buffers it asked for at Prepare.
  using Attention = FunctionRef<Status(size_t layer, size_t k, const float* src,
                                       float* dst, void* const* buffers)>;

  Runner(BoundProgram bound, RunnerPolicy policy, int num_threads);

  // Plans `shape`: its linears (each kept while its row count is the
  // shape's rows or kept rows), and an arena of every intermediate, each
  // step's buffers (`attention_bytes[k]` for mha step k) and `hop_bytes`
  // (buffers live throughout), made anew at the plan's size unless
  // RunnerPolicy::grow_only keeps a large enough one. The check against
  // `cap` counts `held`, bytes the owner holds besides bytes().
  Status Prepare(const RunShape& shape,
                 const std::vector<std::vector<size_t>>& attention_bytes,
                 const std::vector<size_t>& hop_bytes, uint64_t held,
                 uint64_t cap, const std::string& what);

  // Runs layer `layer` of the prepared shape on a team of `threads` (the
  // ThreadScope's): `input` the program's input when it is floats, `output`
  // its output.
  Status Run(size_t layer, const RunRows& rows, const float* input,
             float* output, const Attention& attention, int threads);

  // The prepared shape (rows 0: none, as after a Prepare that failed or
  // threw).
  const RunShape& shape() const { return prepared_; }
  // Hop buffer i of the prepared arena.
  float* hop(size_t i) { return static_cast<float*>(At(hop_offset_[i])); }

  // Bytes held: the arena, matmul plans' own packed weights.
  uint64_t bytes() const;
  // The prepared arena's plan: its peak, and what one buffer per request
  // would take.
  size_t planned_peak() const { return planned_peak_; }
  size_t intermediates_total() const { return intermediates_total_; }
  // Bytes of the packed weights the prepared plans hold for themselves.
  uint64_t own_packed_bytes() const;

 private:
  struct PlannedLinear {
    ops::LinearPlan plan;
    std::vector<AlignedBuffer> own_packed;  // per layer, kOwnPacked only
  };
  enum LinearBuffer { kMatMulScratch, kLoweredInput, kNumLinearBuffers };

  int64_t StepRows(size_t k) const;
  int64_t TensorRows(int t) const;
  Status PlanLinear(size_t k, const std::string& what, uint64_t held,
                    uint64_t cap);
  void PlanArena(const std::vector<std::vector<size_t>>& step_bytes,
                 const std::vector<size_t>& hop_bytes);
  void* At(size_t offset) const {
    return static_cast<char*>(arena_.data()) + offset;
  }
  void RunLinear(size_t layer, size_t k, const void* src, void* dst,
                 const float* residual) const;
  void RunEmbedding(size_t layer, size_t k, const RunRows& rows,
                    const float* src, float* dst) const;
  void RunSwiGlu(const float* src, float* dst, size_t rows, size_t width) const;
  void GatherKept(const int64_t* kept, std::vector<float*>& tensors) const;

  BoundProgram bound_;
  RunnerPolicy policy_;
  int num_threads_ = 1;  // the plans'
  int run_threads_ = 1;  // the run's
  RunShape shape_;       // the shape being planned or run
  RunShape prepared_;    // set once a Prepare succeeded
  // Per program tensor: the step writing it (-1: none) and reading it last.
  std::vector<int> writer_, last_reader_;
  // Plans by (step, rows).
  std::map<std::pair<size_t, int64_t>, PlannedLinear> linears_;
  // Tensors that steps after keep_step read from before it, each with its
  // kept rows' copy.
  std::vector<int> gathered_;
  std::vector<size_t> gathered_offset_;
  std::vector<size_t> offset_;  // per program tensor
  std::vector<std::vector<size_t>> step_offset_;
  std::vector<size_t> hop_offset_;
  AlignedBuffer arena_;
  // A run's tensor and mha-buffer addresses.
  std::vector<float*> tensors_;
  std::vector<void*> attention_buffers_;
  size_t planned_peak_ = 0, intermediates_total_ = 0;
};

// The program of one mha node from rows d_in wide to rows d_out wide: the
// chapter-3 MultiHeadAttention, as MhaSession and MhaDecoder run it. It
// holds what its BoundProgram points to, so it stays where it is made.
class AttentionProgram {
 public:
  AttentionProgram(int64_t d_in, int64_t d_out);
  AttentionProgram(const AttentionProgram&) = delete;
  AttentionProgram& operator=(const AttentionProgram&) = delete;
  const BoundProgram& bound() const { return bound_; }

 private:
  graph::GraphDef def_;
  graph::Program program_;
  BoundProgram bound_;
};

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_RUNNER_H_
