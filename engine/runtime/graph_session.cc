// GraphSession (attn/graph.hpp): a GraphModel's program on the Runner, one
// input shape at a time; its mha steps run the attention operator without a
// cache, as MhaSession does (PlanMhaRun), on buffers in the runner's arena.
#include <algorithm>
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
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/runner.h"
#include "engine/runtime/threads.h"

namespace attn {
namespace {

using graph::Node;
using graph::Op;

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

}  // namespace

// The prepared shape: the runner with its plans and arena, and per layer
// and mha step its attention operator (its packed weights differ by
// layer), whose buffers the runner's arena holds.
struct GraphSession::Plan {
  explicit Plan(const graph::LoadedGraph& model)
      : m(model), runner(model.bound, RunnerPolicy{}, model.num_threads) {}

  const graph::LoadedGraph& m;  // the session's model, which outlives this
  Runner runner;
  int64_t batch = 0, seq_len = 0;
  std::vector<std::vector<std::unique_ptr<AttentionOp>>> attention;
  GraphMemory memory;

  Status Prepare(int64_t batch, int64_t seq_len);
  Status PrepareShape(int64_t batch, int64_t seq_len);
  Status PrepareMha(size_t k, int64_t batch, int64_t seq_len,
                    std::vector<size_t>& buffer_bytes);
  Status CheckContext(size_t k, int64_t seq_len) const;
  Status RunLayer(size_t l, const int64_t* token_ids, const float* in,
                  float* out, int threads);
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

// A shape that fails to prepare leaves no operator and no figures behind.
Status GraphSession::Plan::Prepare(int64_t new_batch, int64_t new_seq_len) {
  ATTN_RETURN_IF_ERROR(CheckShape(new_batch, new_seq_len));
  if (new_batch == batch && new_seq_len == seq_len) return {};
  batch = seq_len = 0;
  memory = {};
  const Status prepared = PrepareShape(new_batch, new_seq_len);
  if (!prepared.ok()) {
    attention.clear();
    memory = {};
    return prepared;
  }
  batch = new_batch;
  seq_len = new_seq_len;
  return {};
}

Status GraphSession::Plan::PrepareShape(int64_t new_batch,
                                        int64_t new_seq_len) {
  const ThreadScope threads(m.num_threads);
  const size_t L = m.layer.size(), S = m.program.steps.size();
  attention.clear();  // move-only: cleared and resized
  attention.resize(L);
  for (auto& layer : attention) layer.resize(S);
  std::vector<std::vector<size_t>> attention_bytes(S);
  for (size_t k = 0; k < S; ++k) {
    const Op op = m.program.steps[k].op;
    if (op == Op::kMha) {
      ATTN_RETURN_IF_ERROR(
          PrepareMha(k, new_batch, new_seq_len, attention_bytes[k]));
    } else if (op == Op::kPositionEmbedding) {
      ATTN_RETURN_IF_ERROR(CheckContext(k, new_seq_len));
    }
  }
  const int64_t R = new_batch * new_seq_len;
  // Layers pass their activations through two buffers in turn.
  const auto hop =
      static_cast<size_t>(R * m.widths[m.program.output]) * sizeof(float);
  const std::vector<size_t> hops = {L > 1 ? hop : 0, L > 2 ? hop : 0};
  // memory.workspace holds the attention operators' packed weights.
  ATTN_RETURN_IF_ERROR(
      runner.Prepare(RunShape{R, std::nullopt, 0}, attention_bytes, hops,
                     memory.workspace, m.max_memory_bytes,
                     "a run of batch " + std::to_string(new_batch) +
                         " x seq_len " + std::to_string(new_seq_len)));
  memory.workspace += runner.own_packed_bytes();
  memory.planned_peak = runner.planned_peak();
  memory.intermediates_total = runner.intermediates_total();
  return {};
}

// One attention operator per layer (its packed weights allocated here);
// its buffers (the most any layer takes) go to the runner's arena, one set
// for all layers, which run in turn.
Status GraphSession::Plan::PrepareMha(size_t k, int64_t new_batch,
                                      int64_t new_seq_len,
                                      std::vector<size_t>& buffer_bytes) {
  const graph::Step& step = m.program.steps[k];
  const std::string what = "a run of batch " + std::to_string(new_batch) +
                           " x seq_len " + std::to_string(new_seq_len);
  buffer_bytes.assign(AttentionOp::kNumBuffers, 0);
  for (size_t l = 0; l < m.layer.size(); ++l) {
    Result<std::unique_ptr<AttentionOp>> op =
        PlanMhaRun(ModelAccess::Of(*m.layer[l][step.node].mha), new_batch,
                   new_seq_len, AddSat(memory.workspace, runner.bytes()), what);
    if (!op.ok()) {
      return Status(op.status().code(), m.def.nodes[step.node].Describe() +
                                            ": " + op.status().message());
    }
    memory.workspace += (*op)->bytes();
    for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
      buffer_bytes[i] = std::max(buffer_bytes[i], (*op)->buffer_bytes()[i]);
    }
    attention[l][k] = std::move(op).value();
  }
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

Status GraphSession::Plan::RunLayer(size_t l, const int64_t* token_ids,
                                    const float* in, float* out, int threads) {
  const auto mha = [this](size_t layer, size_t k, const float* src, float* dst,
                          void* const* buffers) {
    AttentionOp::Buffers b;
    std::copy(buffers, buffers + AttentionOp::kNumBuffers, b.begin());
    attention[layer][k]->Forward(src, nullptr, dst, b);
    return Status();
  };
  return runner.Run(l, RunRows{seq_len, token_ids, nullptr, nullptr}, in, out,
                    mha, threads);
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
    const float* in = l == 0 ? input : p.runner.hop((l - 1) % 2);
    float* out = l + 1 == L ? output : p.runner.hop(l % 2);
    ATTN_RETURN_IF_ERROR(
        p.RunLayer(l, nullptr, in, out, threads.num_threads()));
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
  return p.RunLayer(0, token_ids, nullptr, output, threads.num_threads());
}

}  // namespace attn
