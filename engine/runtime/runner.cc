// Runner (runner.h): plans a program's linears and arena for a shape and
// runs its steps in order.
#include "engine/runtime/runner.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/graph_plan.h"
#include "engine/runtime/limits.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"

namespace attn {
namespace {

using graph::Op;

// dst row r = row ids[r] of `table` [vocab, width].
void GatherRows(const int64_t* ids, const float* table, size_t rows,
                size_t width, float* dst) {
  for (size_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * width, table + static_cast<size_t>(ids[r]) * width,
                width * sizeof(float));
  }
}
void GatherRows(const int64_t* ids, const hwy::bfloat16_t* table, size_t rows,
                size_t width, float* dst) {
  for (size_t r = 0; r < rows; ++r) {
    const hwy::bfloat16_t* row = table + static_cast<size_t>(ids[r]) * width;
    for (size_t i = 0; i < width; ++i) {
      dst[r * width + i] = hwy::F32FromBF16(row[i]);
    }
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

}  // namespace

Runner::Runner(BoundProgram bound, RunnerPolicy policy, int num_threads)
    : bound_(std::move(bound)), policy_(policy), num_threads_(num_threads) {
  const graph::Program& p = *bound_.program;
  writer_.assign(p.tensors.size(), -1);
  last_reader_.assign(p.tensors.size(), -1);
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const graph::Step& step = p.steps[k];
    writer_[step.dst] = static_cast<int>(k);
    for (int src : {step.src, step.src2}) {
      if (src >= 0) last_reader_[src] = static_cast<int>(k);
    }
  }
}

int64_t Runner::StepRows(size_t k) const {
  return shape_.keep_step && k > *shape_.keep_step ? shape_.num_kept
                                                   : shape_.rows;
}

int64_t Runner::TensorRows(int t) const {
  const int writer = writer_[t];
  return writer >= 0 && shape_.keep_step &&
                 static_cast<size_t>(writer) >= *shape_.keep_step
             ? shape_.num_kept
             : shape_.rows;
}

uint64_t Runner::own_packed_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [key, linear] : linears_) {
    for (const AlignedBuffer& packed : linear.own_packed) {
      bytes = AddSat(bytes, packed.size());
    }
  }
  return bytes;
}

uint64_t Runner::bytes() const {
  return AddSat(arena_.size(), own_packed_bytes());
}

// The plan of linear step k at its rows, with its own packed weights (per
// layer) where it cannot read the model's.
Status Runner::PlanLinear(size_t k, const std::string& what, uint64_t held,
                          uint64_t cap) {
  const auto key = std::make_pair(k, StepRows(k));
  if (linears_.count(key)) return {};
  const graph::Step& step = bound_.program->steps[k];
  ops::LinearEpilogue epilogue;
  if (policy_.post_ops) {
    epilogue.post.gelu_tanh = step.gelu;
    epilogue.post.add_residual = step.src2 >= 0;
  } else {
    epilogue.gelu = step.gelu;  // the residual: an add after the linear
  }
  epilogue.src = bound_.types[step.src];
  epilogue.dst = bound_.types[step.dst];
  const graph::Node& node = bound_.def->nodes[step.node];
  Result<ops::LinearPlan> plan =
      ops::LinearPlan::Create(*bound_.layers[0][step.node].linear, key.second,
                              epilogue, policy_.fallback, num_threads_);
  if (!plan.ok()) {
    return Status(plan.status().code(),
                  node.Describe() + ": " + plan.status().message());
  }
  PlannedLinear planned{std::move(plan).value(), {}};
  if (const size_t own = planned.plan.own_packed_bytes()) {
    Workspace workspace;
    planned.own_packed.resize(bound_.layers.size());
    for (AlignedBuffer& packed : planned.own_packed)
      workspace.Add(&packed, own);
    ATTN_RETURN_IF_ERROR(workspace.Allocate(what, AddSat(held, bytes()), cap));
    for (size_t l = 0; l < bound_.layers.size(); ++l) {
      ATTN_RETURN_IF_ERROR(planned.plan.PackOwn(
          *bound_.layers[l][step.node].linear, planned.own_packed[l].data()));
    }
  }
  linears_.emplace(key, std::move(planned));
  return {};
}

Status Runner::Prepare(const RunShape& shape,
                       const std::vector<std::vector<size_t>>& attention_bytes,
                       const std::vector<size_t>& hop_bytes, uint64_t held,
                       uint64_t cap, const std::string& what) {
  const graph::Program& p = *bound_.program;
  prepared_ = RunShape();
  shape_ = shape;
  for (auto it = linears_.begin(); it != linears_.end();) {
    const int64_t rows = it->first.second;
    it = rows == shape.rows || (shape.keep_step && rows == shape.num_kept)
             ? std::next(it)
             : linears_.erase(it);
  }
  std::vector<std::vector<size_t>> step_bytes(p.steps.size());
  Status status;
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (p.steps[k].op == Op::kMha) step_bytes[k] = attention_bytes[k];
    if (p.steps[k].op != Op::kLinear) continue;
    status = PlanLinear(k, what, held, cap);
    if (!status.ok()) break;
    const ops::LinearPlan& plan = linears_.at({k, StepRows(k)}).plan;
    step_bytes[k].resize(kNumLinearBuffers);
    step_bytes[k][kLoweredInput] = plan.lowered_input_bytes();
    step_bytes[k][kMatMulScratch] = plan.scratch_bytes();
  }
  if (status.ok()) {
    PlanArena(step_bytes, hop_bytes);
    const bool keep = policy_.grow_only ? planned_peak_ <= arena_.size()
                                        : planned_peak_ == arena_.size();
    if (!keep) {
      arena_ = AlignedBuffer();
      Workspace workspace;
      workspace.Add(&arena_, planned_peak_);
      status = workspace.Allocate(what, AddSat(held, bytes()), cap);
    }
  }
  if (!status.ok()) {
    linears_.clear();
    shape_ = RunShape();
    return status;
  }
  prepared_ = shape;
  return {};
}

// Offsets by liveness: the intermediates' (the output is the caller's),
// the steps' buffers', the hops', the kept rows' copies.
void Runner::PlanArena(const std::vector<std::vector<size_t>>& step_bytes,
                       const std::vector<size_t>& hop_bytes) {
  const graph::Program& p = *bound_.program;
  const size_t keep = shape_.keep_step.value_or(p.steps.size());
  gathered_.clear();
  std::vector<graph::BufferRequest> requests(p.tensors.size());
  std::vector<graph::BufferRequest> copies;
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    const int w = writer_[t], last = last_reader_[t];
    if (w < 0 || static_cast<int>(t) == p.output) continue;
    const auto bytes = static_cast<size_t>(TensorRows(static_cast<int>(t)) *
                                           bound_.widths[t]) *
                       kernels::SizeOf(bound_.types[t]);
    const size_t end = std::max(w, last);
    requests[t] = {bytes, size_t(w), end};
    if (size_t(w) < keep && last >= 0 && size_t(last) > keep) {
      requests[t].last = keep;  // the copy is read after the keep step
      gathered_.push_back(static_cast<int>(t));
      copies.push_back(
          {static_cast<size_t>(shape_.num_kept * bound_.widths[t]) *
               sizeof(float),
           keep, size_t(last)});
    }
  }
  for (size_t k = 0; k < step_bytes.size(); ++k) {
    for (const size_t bytes : step_bytes[k]) requests.push_back({bytes, k, k});
  }
  for (const size_t bytes : hop_bytes) {
    requests.push_back({bytes, 0, p.steps.size() - 1});
  }
  requests.insert(requests.end(), copies.begin(), copies.end());
  intermediates_total_ = 0;
  for (const graph::BufferRequest& r : requests) {
    intermediates_total_ += (r.bytes + 63) / 64 * 64;
  }
  const graph::BufferPlan plan = graph::PlanBuffers(requests);
  planned_peak_ = plan.peak_bytes;
  auto next = plan.offsets.begin();
  const auto take = [&next](size_t n) {
    std::vector<size_t> taken(next, next + static_cast<ptrdiff_t>(n));
    next += static_cast<ptrdiff_t>(n);
    return taken;
  };
  offset_ = take(p.tensors.size());
  step_offset_.resize(step_bytes.size());
  for (size_t k = 0; k < step_bytes.size(); ++k) {
    step_offset_[k] = take(step_bytes[k].size());
  }
  hop_offset_ = take(hop_bytes.size());
  gathered_offset_ = take(copies.size());
}

void Runner::RunLinear(size_t layer, size_t k, const void* src, void* dst,
                       const float* residual) const {
  const graph::Step& step = bound_.program->steps[k];
  const PlannedLinear& planned = linears_.at({k, StepRows(k)});
  const ops::LinearPlan::Buffers buffers{
      At(step_offset_[k][kLoweredInput]), At(step_offset_[k][kMatMulScratch]),
      planned.own_packed.empty() ? nullptr : planned.own_packed[layer].data()};
  const ops::Linear& linear = *bound_.layers[layer][step.node].linear;
  if (policy_.post_ops || !residual) {
    planned.plan.Run(linear, src, dst, buffers, run_threads_, residual);
    return;
  }
  planned.plan.Run(linear, src, dst, buffers, run_threads_);
  auto* y = static_cast<float*>(dst);
  kernels::Add(y, residual, y,
               static_cast<size_t>(StepRows(k) * bound_.widths[step.dst]),
               run_threads_);
}

void Runner::RunEmbedding(size_t layer, size_t k, const RunRows& rows,
                          const float* src, float* dst) const {
  const graph::Step& step = bound_.program->steps[k];
  const NodeBinding& w = bound_.layers[layer][step.node];
  const auto width = static_cast<size_t>(bound_.widths[step.dst]);
  const auto n = static_cast<size_t>(shape_.rows);
  if (step.op == Op::kEmbedding) {
    if (w.bf16_table) {
      GatherRows(rows.tokens, w.bf16_table, n, width, dst);
    } else {
      GatherRows(rows.tokens, w.weight, n, width, dst);
    }
    const float scale = bound_.def->nodes[step.node].scale;
    if (scale != 1.0f) {
      for (size_t i = 0; i < n * width; ++i) dst[i] *= scale;
    }
  } else if (!rows.positions) {
    AddPositions(src, w.weight, dst, shape_.rows / rows.seq_len, rows.seq_len,
                 width, run_threads_);
  } else {
    for (size_t r = 0; r < n; ++r) {
      kernels::Add(src + r * width,
                   w.weight + static_cast<size_t>(rows.positions[r]) * width,
                   dst + r * width, width, 1);
    }
  }
}

// Each row's silu(gate) * up, gate and up the halves of its [2 width] row:
// Phi-3's fused gate_up_proj read as it is.
void Runner::RunSwiGlu(const float* src, float* dst, size_t rows,
                       size_t width) const {
  for (size_t r = 0; r < rows; ++r) {
    const float* gate = src + r * 2 * width;
    float* y = dst + r * width;
    kernels::Silu(gate, y, width, 1);
    kernels::Mul(y, gate + width, y, width, 1);
  }
}

// The kept rows of each gathered tensor, in order, into its copy, which
// the later steps read.
void Runner::GatherKept(const int64_t* kept,
                        std::vector<float*>& tensors) const {
  for (size_t g = 0; g < gathered_.size(); ++g) {
    const int t = gathered_[g];
    const size_t row = static_cast<size_t>(bound_.widths[t]) *
                       kernels::SizeOf(bound_.types[t]);
    auto* copy = static_cast<char*>(At(gathered_offset_[g]));
    const auto* from = reinterpret_cast<const char*>(tensors[t]);
    for (int64_t i = 0; i < shape_.num_kept; ++i) {
      std::memcpy(copy + size_t(i) * row, from + size_t(kept[i]) * row, row);
    }
    tensors[t] = reinterpret_cast<float*>(copy);
  }
}

Status Runner::Run(size_t layer, const RunRows& rows, const float* input,
                   float* output, const Attention& attention, int threads) {
  const graph::Program& p = *bound_.program;
  run_threads_ = threads;
  if (p.output == p.input) {  // a graph of dropouts only
    std::memcpy(output, input,
                static_cast<size_t>(shape_.rows * bound_.widths[p.input]) *
                    sizeof(float));
    return {};
  }
  tensors_.resize(p.tensors.size());
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    tensors_[t] = static_cast<float*>(At(offset_[t]));
  }
  tensors_[p.input] = const_cast<float*>(input);  // only ever read
  tensors_[p.output] = output;
  const auto at = [this](int t) { return t >= 0 ? tensors_[t] : nullptr; };
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const graph::Step& s = p.steps[k];
    const NodeBinding& w = bound_.layers[layer][s.node];
    const auto width = static_cast<size_t>(bound_.widths[s.dst]);
    const auto R = static_cast<size_t>(StepRows(k));
    const size_t count = R * width;
    const float eps = bound_.def->nodes[s.node].eps;
    switch (s.op) {
      case Op::kLinear:
        RunLinear(layer, k, at(s.src), at(s.dst), at(s.src2));
        break;
      case Op::kMha:
        attention_buffers_.clear();
        for (const size_t offset : step_offset_[k]) {
          attention_buffers_.push_back(At(offset));
        }
        ATTN_RETURN_IF_ERROR(attention(layer, k, at(s.src), at(s.dst),
                                       attention_buffers_.data()));
        if (shape_.keep_step == k) GatherKept(rows.kept, tensors_);
        break;
      case Op::kLayerNorm:
        kernels::LayerNorm(at(s.src), w.weight, w.bias, at(s.dst), R, width,
                           eps, run_threads_);
        break;
      case Op::kRmsNorm:
        kernels::RmsNorm(at(s.src), w.weight, at(s.dst), R, width, eps,
                         run_threads_);
        break;
      case Op::kGelu:
        kernels::Gelu(at(s.src), at(s.dst), count, run_threads_);
        break;
      case Op::kSilu:
        kernels::Silu(at(s.src), at(s.dst), count, run_threads_);
        break;
      case Op::kAdd:
        kernels::Add(at(s.src), at(s.src2), at(s.dst), count, run_threads_);
        break;
      case Op::kMul:
        kernels::Mul(at(s.src), at(s.src2), at(s.dst), count, run_threads_);
        break;
      case Op::kSwiGlu:
        RunSwiGlu(at(s.src), at(s.dst), R, width);
        break;
      case Op::kEmbedding:
      case Op::kPositionEmbedding:
        RunEmbedding(layer, k, rows, at(s.src), at(s.dst));
        break;
      case Op::kDropout:
      case Op::kRepeat:
        break;  // lowered away, expanded away
    }
  }
  return {};
}

AttentionProgram::AttentionProgram(int64_t d_in, int64_t d_out) {
  graph::Node node;
  node.name = "att";
  node.op = Op::kMha;
  node.inputs = {"x"};
  node.outputs = {"context_vec"};
  def_.input = "x";
  def_.output = "context_vec";
  def_.nodes = {node};
  program_ = graph::Lower(def_);
  bound_ = {&def_,
            &program_,
            {d_in, d_out},
            {kernels::DataType::kF32, kernels::DataType::kF32},
            {{{}}}};
}

}  // namespace attn
