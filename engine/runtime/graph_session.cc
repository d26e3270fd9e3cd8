// GraphSession (attn/graph.hpp): prepares a GraphModel's program for one
// input shape (primitives, packed weights, a planned arena; graph_plan.h) and
// runs its steps in order. mha steps run the attention operator as
// MhaSession does (PlanMhaRun). Every activation and scratch buffer is a
// request in one liveness-planned arena.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "engine/io/json_limits.h"
#include "engine/models/graph_model.h"
#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/ops/attention_op.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/graph_plan.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/threads.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace attn {
namespace {

using graph::Node;
using graph::Op;
using kernels::DataType;

Status CheckShape(int64_t batch, int64_t seq_len) {
  constexpr int64_t kMaxRows = int64_t{1} << 31;
  if (batch <= 0 || seq_len <= 0 || batch > kMaxRows / seq_len) {
    return InvalidArgument("input shape [" + std::to_string(batch) + ", " +
                           std::to_string(seq_len) +
                           ", e] is invalid, want positive batch and seq_len "
                           "with batch x seq_len < 2^31");
  }
  return {};
}

// Each token id inside the vocabulary of every embedding reading it.
Status CheckTokenIds(const graph::LoadedGraph& m, const int64_t* ids,
                     int64_t batch, int64_t seq_len) {
  for (const graph::Step& step : m.program.steps) {
    if (step.op != Op::kEmbedding) continue;
    const int64_t vocab = m.layer[0][step.node].rows;
    const int64_t* bad =
        std::find_if(ids, ids + batch * seq_len,
                     [&](int64_t id) { return id < 0 || id >= vocab; });
    if (bad != ids + batch * seq_len) {
      const int64_t at = bad - ids;
      return InvalidArgument(
          m.def.input + "[" + std::to_string(at / seq_len) + ", " +
          std::to_string(at % seq_len) + "] is " + std::to_string(*bad) +
          ", want a token id from 0 to " + std::to_string(vocab - 1));
    }
  }
  return {};
}

// dst row r = row ids[r] of `table` [vocab, width].
void GatherRows(const int64_t* ids, const float* table, size_t rows,
                size_t width, float* dst) {
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * width, table + static_cast<size_t>(ids[r]) * width,
                width * sizeof(float));
  }
}

// dst = x [batch, seq_len, width] + rows [0, seq_len) of `table`, in each
// sequence.
void AddPositions(const float* x, const float* table, float* dst, int64_t batch,
                  int64_t seq_len, size_t width, int threads) {
  const size_t n = static_cast<size_t>(seq_len) * width;
  for (size_t b = 0; b < static_cast<size_t>(batch); ++b) {
    kernels::Add(x + b * n, table, dst + b * n, n, threads);
  }
}

// A linear step's buffers, live during that step alone.
enum LinearBuffer { kMatMulScratch, kLoweredInput, kNumLinearBuffers };

// Live ranges of the buffers the arena holds: every written intermediate
// (fusion leaves some tensors unwritten; the output is the caller's), then
// per step the buffers it needs while it runs (`step_bytes`), then the
// `hop_bytes` buffers that pass activations between layers, live
// throughout.
std::vector<graph::BufferRequest> ArenaRequests(
    const graph::LoadedGraph& m, int64_t rows,
    const std::vector<std::vector<size_t>>& step_bytes,
    const std::array<size_t, 2>& hop_bytes) {
  const graph::Program& p = m.program;
  std::vector<graph::BufferRequest> requests(p.tensors.size());
  std::vector<bool> written(p.tensors.size(), false);
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const graph::Step& step = p.steps[k];
    requests[step.dst].first = requests[step.dst].last = k;
    written[step.dst] = true;
    for (int src : {step.src, step.src2}) {
      if (src >= 0) requests[src].last = k;
    }
  }
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    const bool planned = written[t] && static_cast<int>(t) != p.output;
    requests[t].bytes = planned ? static_cast<size_t>(rows * m.widths[t]) *
                                      kernels::SizeOf(m.types[t])
                                : 0;
  }
  for (size_t k = 0; k < p.steps.size(); ++k) {
    for (const size_t bytes : step_bytes[k]) requests.push_back({bytes, k, k});
  }
  for (const size_t bytes : hop_bytes) {
    requests.push_back({bytes, 0, p.steps.size() - 1});
  }
  return requests;
}

}  // namespace

// The prepared shape: per linear step its plan (shared by the layers, whose
// shapes agree), per layer and step its attention operator, and each
// layer's own packed weights for the linear steps whose plan cannot read
// the model's.
struct GraphSession::Plan {
  explicit Plan(const graph::LoadedGraph& model) : m(model) {}

  const graph::LoadedGraph& m;  // the session's model, which outlives this
  int64_t batch = 0, seq_len = 0;
  std::vector<std::optional<ops::LinearPlan>> linear;  // per step
  std::vector<std::vector<AlignedBuffer>> packed;  // [layer][step], own only
  // Per layer and mha step its operator (its packed weights, which differ
  // by layer).
  std::vector<std::vector<std::unique_ptr<AttentionOp>>> attention;
  // Per step the bytes of each buffer it needs while it runs (an mha step's
  // AttentionOp::Buffer, a linear's LinearBuffer; the most any layer
  // takes), and their offsets in the arena, which the layers share.
  std::vector<std::vector<size_t>> step_bytes, step_offset;
  std::vector<size_t> offset;  // per program tensor, in the arena
  // Layers pass their activations through two buffers in turn.
  std::array<size_t, 2> hop_bytes{}, hop_offset{};
  AlignedBuffer arena;
  GraphMemory memory;
  const int64_t* token_ids = nullptr;  // a token_input model's, during Run

  Status Prepare(int64_t batch, int64_t seq_len);
  void Reset();
  Status PrepareMha(size_t k, int64_t batch, int64_t seq_len);
  Status PrepareLinear(size_t k, int64_t rows, Workspace& workspace);
  Status CheckContext(size_t k, int64_t seq_len) const;
  void PlanArena(int64_t rows, Workspace& workspace);
  Status PackWeights();
  Status RunLayer(size_t l, const float* in, float* out, int threads);
  // Step k of layer l, one per op kind that needs more than a kernel call.
  void RunLinear(size_t l, size_t k, const void* src, void* dst,
                 const float* residual, int threads);
  void RunMha(size_t l, size_t k, const float* src, float* dst);
  void RunEmbedding(size_t l, const graph::Step& s, const float* src,
                    float* dst, int threads);
  void* At(size_t arena_offset) {
    return static_cast<char*>(arena.data()) + arena_offset;
  }
  float* Hop(size_t i) { return static_cast<float*>(At(hop_offset[i])); }
};

GraphSession::GraphSession(std::shared_ptr<const GraphModel> model)
    : model_(std::move(model)) {
  if (model_) plan_ = std::make_unique<Plan>(ModelAccess::Of(*model_));
}
GraphSession::GraphSession(GraphSession&&) noexcept = default;
GraphSession& GraphSession::operator=(GraphSession&&) noexcept = default;
GraphSession::~GraphSession() = default;

GraphMemory GraphSession::memory() const {
  return plan_ ? plan_->memory : GraphMemory{};
}

Status GraphSession::Prepare(int64_t batch, int64_t seq_len) {
  if (!plan_) return InvalidArgument("the session has no model");
  return plan_->Prepare(batch, seq_len);
}

// Move-only members: cleared and resized rather than assigned.
void GraphSession::Plan::Reset() {
  const size_t L = m.layer.size(), S = m.program.steps.size();
  memory = {};
  linear.clear();
  linear.resize(S);
  packed.clear();
  packed.resize(L);
  attention.clear();
  attention.resize(L);
  for (size_t l = 0; l < L; ++l) {
    packed[l].resize(S);
    attention[l].resize(S);
  }
  step_bytes.assign(S, {});
  step_offset.assign(S, {});
  hop_bytes = {};
}

Status GraphSession::Plan::Prepare(int64_t new_batch, int64_t new_seq_len) {
  ATTN_RETURN_IF_ERROR(CheckShape(new_batch, new_seq_len));
  if (new_batch == batch && new_seq_len == seq_len) return {};
  batch = seq_len = 0;
  const ThreadScope threads(m.num_threads);
  Reset();
  const int64_t R = new_batch * new_seq_len;
  Workspace workspace;  // everything but the attention operators' weights
  for (size_t k = 0; k < m.program.steps.size(); ++k) {
    const Op op = m.program.steps[k].op;
    if (op == Op::kMha) {
      ATTN_RETURN_IF_ERROR(PrepareMha(k, new_batch, new_seq_len));
    } else if (op == Op::kLinear) {
      ATTN_RETURN_IF_ERROR(PrepareLinear(k, R, workspace));
    } else if (op == Op::kPositionEmbedding) {
      ATTN_RETURN_IF_ERROR(CheckContext(k, new_seq_len));
    }
  }
  const size_t L = m.layer.size();
  const auto hop =
      static_cast<size_t>(R * m.widths[m.program.output]) * sizeof(float);
  hop_bytes = {L > 1 ? hop : 0, L > 2 ? hop : 0};
  PlanArena(R, workspace);
  // memory.workspace holds the attention operators' packed weights so far.
  ATTN_RETURN_IF_ERROR(
      workspace.Allocate("a run of batch " + std::to_string(new_batch) +
                             " x seq_len " + std::to_string(new_seq_len),
                         memory.workspace, m.max_memory_bytes));
  ATTN_RETURN_IF_ERROR(PackWeights());
  memory.workspace += workspace.bytes() - arena.size();
  batch = new_batch;
  seq_len = new_seq_len;
  return {};
}

// One attention operator per layer (its packed weights allocated here);
// its buffers go to `PlanArena`, one set for all layers, which run in turn.
Status GraphSession::Plan::PrepareMha(size_t k, int64_t new_batch,
                                      int64_t new_seq_len) {
  const graph::Step& step = m.program.steps[k];
  const std::string what = "a run of batch " + std::to_string(new_batch) +
                           " x seq_len " + std::to_string(new_seq_len);
  for (size_t l = 0; l < m.layer.size(); ++l) {
    Result<std::unique_ptr<AttentionOp>> op =
        PlanMhaRun(ModelAccess::Of(*m.layer[l][step.node].mha), new_batch,
                   new_seq_len, memory.workspace, what);
    if (!op.ok()) {
      return Status(op.status().code(), m.def.nodes[step.node].Describe() +
                                            ": " + op.status().message());
    }
    memory.workspace += (*op)->bytes();
    step_bytes[k].resize(AttentionOp::kNumBuffers);
    for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
      step_bytes[k][i] = std::max(step_bytes[k][i], (*op)->buffer_bytes()[i]);
    }
    attention[l][k] = std::move(op).value();
  }
  return {};
}

// y [R, out] = x [R, in] W^T (+ b) (then GELU, then + residual): the plan,
// whose lowered input and scratch go to the arena, and each layer's own
// packed weights where it cannot read the model's (listed in `workspace`,
// packed once allocated).
Status GraphSession::Plan::PrepareLinear(size_t k, int64_t R,
                                         Workspace& workspace) {
  const graph::Step& step = m.program.steps[k];
  Result<ops::LinearPlan> plan = ops::LinearPlan::Create(
      m.layer[0][step.node].linear, R, graph::EpilogueOf(m, k),
      ops::LinearFallback::kOwnPacked, m.num_threads);
  if (!plan.ok()) {
    return Status(plan.status().code(), m.def.nodes[step.node].Describe() +
                                            ": " + plan.status().message());
  }
  step_bytes[k].resize(kNumLinearBuffers);
  step_bytes[k][kLoweredInput] = plan->lowered_input_bytes();
  step_bytes[k][kMatMulScratch] = plan->scratch_bytes();
  if (const size_t own = plan->own_packed_bytes()) {
    for (size_t l = 0; l < m.layer.size(); ++l) {
      workspace.Add(&packed[l][k], own);
    }
  }
  linear[k].emplace(std::move(plan).value());
  return {};
}

// A position embedding has a row for each position up to its context.
Status GraphSession::Plan::CheckContext(size_t k, int64_t new_seq_len) const {
  const graph::Step& step = m.program.steps[k];
  const int64_t context = m.layer[0][step.node].rows;
  if (new_seq_len <= context) return {};
  return InvalidArgument(m.def.nodes[step.node].Describe() + ": a prompt of " +
                         std::to_string(new_seq_len) +
                         " tokens is longer than the context " +
                         std::to_string(context) + ", want at most " +
                         std::to_string(context) + " tokens");
}

// Offsets by liveness into one arena (listed in `workspace`): the
// intermediates', the steps' buffers', the hops'.
void GraphSession::Plan::PlanArena(int64_t R, Workspace& workspace) {
  const std::vector<graph::BufferRequest> requests =
      ArenaRequests(m, R, step_bytes, hop_bytes);
  for (const graph::BufferRequest& r : requests) {
    memory.intermediates_total += (r.bytes + 63) / 64 * 64;
  }
  const graph::BufferPlan plan = graph::PlanBuffers(requests);
  auto next = plan.offsets.begin();
  offset.assign(next, next + static_cast<ptrdiff_t>(m.program.tensors.size()));
  next += static_cast<ptrdiff_t>(offset.size());
  for (size_t k = 0; k < step_bytes.size(); ++k) {
    step_offset[k].assign(next,
                          next + static_cast<ptrdiff_t>(step_bytes[k].size()));
    next += static_cast<ptrdiff_t>(step_bytes[k].size());
  }
  std::copy(next, plan.offsets.end(), hop_offset.begin());
  memory.planned_peak = plan.peak_bytes;
  workspace.Add(&arena, plan.peak_bytes);
}

// Every layer's linear weights into the layout its plan chose, where it
// cannot read the model's.
Status GraphSession::Plan::PackWeights() {
  for (size_t k = 0; k < m.program.steps.size(); ++k) {
    if (!linear[k] || linear[k]->own_packed_bytes() == 0) continue;
    const graph::Step& step = m.program.steps[k];
    for (size_t l = 0; l < m.layer.size(); ++l) {
      ATTN_RETURN_IF_ERROR(linear[k]->PackOwn(m.layer[l][step.node].linear,
                                              packed[l][k].data()));
    }
  }
  return {};
}

Status GraphSession::Run(const float* input, int64_t batch, int64_t seq_len,
                         float* output) {
  if (!input || !output) {
    return InvalidArgument("input and output must not be null");
  }
  if (model_ && model_->token_input()) {
    return InvalidArgument("graph input " + Quoted(plan_->m.def.input) +
                           " is token ids, want Run with int64_t ids");
  }
  ATTN_RETURN_IF_ERROR(Prepare(batch, seq_len));
  Plan& p = *plan_;
  const ThreadScope threads(p.m.num_threads);
  const size_t L = p.m.layer.size();
  for (size_t l = 0; l < L; ++l) {
    const float* in = l == 0 ? input : p.Hop((l - 1) % 2);
    float* out = l + 1 == L ? output : p.Hop(l % 2);
    ATTN_RETURN_IF_ERROR(p.RunLayer(l, in, out, threads.num_threads()));
  }
  return {};
}

Status GraphSession::Run(const int64_t* token_ids, int64_t batch,
                         int64_t seq_len, float* output) {
  if (!token_ids || !output) {
    return InvalidArgument("token ids and output must not be null");
  }
  if (model_ && !model_->token_input()) {
    return InvalidArgument(
        "graph input " + Quoted(plan_->m.def.input) + " is floats [b, T, " +
        std::to_string(model_->input_width()) + "], want Run with float input");
  }
  ATTN_RETURN_IF_ERROR(Prepare(batch, seq_len));
  Plan& p = *plan_;
  ATTN_RETURN_IF_ERROR(CheckTokenIds(p.m, token_ids, batch, seq_len));
  const ThreadScope threads(p.m.num_threads);
  p.token_ids = token_ids;
  const Status status = p.RunLayer(0, nullptr, output, threads.num_threads());
  p.token_ids = nullptr;
  return status;
}

void GraphSession::Plan::RunLinear(size_t l, size_t k, const void* src,
                                   void* dst, const float* residual,
                                   int threads) {
  const ops::LinearPlan::Buffers buffers{At(step_offset[k][kLoweredInput]),
                                         At(step_offset[k][kMatMulScratch]),
                                         packed[l][k].data()};
  linear[k]->Run(m.layer[l][m.program.steps[k].node].linear, src, dst, buffers,
                 threads, residual);
}

void GraphSession::Plan::RunMha(size_t l, size_t k, const float* src,
                                float* dst) {
  AttentionOp::Buffers buffers;
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    buffers[i] = At(step_offset[k][i]);
  }
  attention[l][k]->Forward(src, nullptr, dst, buffers);
}

void GraphSession::Plan::RunEmbedding(size_t l, const graph::Step& s,
                                      const float* src, float* dst,
                                      int threads) {
  const graph::NodeWeights& w = m.layer[l][s.node];
  const auto width = static_cast<size_t>(m.widths[s.dst]);
  if (s.op == Op::kEmbedding) {
    GatherRows(token_ids, w.weight, static_cast<size_t>(batch * seq_len), width,
               dst);
  } else {
    AddPositions(src, w.weight, dst, batch, seq_len, width, threads);
  }
}

Status GraphSession::Plan::RunLayer(size_t l, const float* in, float* out,
                                    int threads) {
  const graph::Program& p = m.program;
  const auto R = static_cast<size_t>(batch * seq_len);
  if (p.output == p.input) {  // a graph of dropouts only
    std::memcpy(out, in,
                R * static_cast<size_t>(m.widths[p.input]) * sizeof(float));
    return {};
  }
  // bf16 tensors are only handed to matmuls, which take void*.
  auto at = [&](int t) {
    if (t == p.input) return const_cast<float*>(in);  // only ever read
    if (t == p.output) return out;
    return static_cast<float*>(At(offset[t]));
  };
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const graph::Step& s = p.steps[k];
    const graph::NodeWeights& w = m.layer[l][s.node];
    const auto count = R * static_cast<size_t>(m.widths[s.dst]);
    switch (s.op) {
      case Op::kLinear:
        RunLinear(l, k, at(s.src), at(s.dst),
                  s.src2 >= 0 ? at(s.src2) : nullptr, threads);
        break;
      case Op::kMha:
        RunMha(l, k, at(s.src), at(s.dst));
        break;
      case Op::kLayerNorm:
        kernels::LayerNorm(at(s.src), w.weight, w.bias, at(s.dst), R,
                           static_cast<size_t>(m.widths[s.dst]),
                           m.def.nodes[s.node].eps, threads);
        break;
      case Op::kRmsNorm:
        kernels::RmsNorm(at(s.src), w.weight, at(s.dst), R,
                         static_cast<size_t>(m.widths[s.dst]),
                         m.def.nodes[s.node].eps, threads);
        break;
      case Op::kGelu:
        kernels::Gelu(at(s.src), at(s.dst), count, threads);
        break;
      case Op::kSilu:
        kernels::Silu(at(s.src), at(s.dst), count, threads);
        break;
      case Op::kAdd:
        kernels::Add(at(s.src), at(s.src2), at(s.dst), count, threads);
        break;
      case Op::kMul:
        kernels::Mul(at(s.src), at(s.src2), at(s.dst), count, threads);
        break;
      case Op::kEmbedding:
      case Op::kPositionEmbedding:
        RunEmbedding(l, s, at(s.src), at(s.dst), threads);
        break;
      case Op::kDropout:
      case Op::kRepeat:
        break;  // lowered away, expanded away
    }
  }
  return {};
}

}  // namespace attn
