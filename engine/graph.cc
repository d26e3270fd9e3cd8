// Graph (attn/graph.hpp): binds a parsed, lowered graph (graph_ir.h) to its
// weights, compiles it per input shape (primitives, packed weights, a planned
// arena; graph_plan.h) and runs its steps in order. mha steps run an
// MhaSession, the same implementation as the standalone MHA.
#include "attn/graph.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "engine/buffer.h"
#include "engine/graph_ir.h"
#include "engine/graph_plan.h"
#include "engine/limits.h"
#include "engine/model_config.h"
#include "engine/threads.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace attn {
namespace {

using graph::Node;
using graph::Op;

// One node's weights in one layer.
struct NodeWeights {
  std::vector<float> weight, bias;  // linear: [out, in], [out]
                                    // layernorm: scale, shift
  std::shared_ptr<const MhaModel> mha;
};

// Infers tensor widths from the weights and loads one layer's weights, the
// i-th layer's names carrying `prefix`.
class Binder {
 public:
  Binder(const SafetensorsFile& file, const GraphOptions& options,
         int num_threads)
      : file_(file), options_(options), num_threads_(num_threads) {}

  // Widths by tensor name, filled by the first Bind and checked by later
  // ones.
  std::map<std::string, int64_t>& widths() { return widths_; }

  Status Bind(const graph::GraphDef& def, const std::string& prefix,
              std::vector<NodeWeights>& weights) {
    prefix_ = prefix;
    ATTN_RETURN_IF_ERROR(InferWidths(def.nodes));
    for (const Node& node : def.nodes) {
      for (const std::string& t : {node.inputs[0], node.outputs[0]}) {
        if (Width(t) < 0) {
          return InvalidArgument("cannot infer the width of tensor '" + t +
                                 "': no weight fixes it, want a linear, "
                                 "layernorm or mha to read it");
        }
      }
    }
    weights.assign(def.nodes.size(), {});
    for (size_t i = 0; i < def.nodes.size(); ++i) {
      ATTN_RETURN_IF_ERROR(Load(def.nodes[i], weights[i]));
    }
    return {};
  }

 private:
  // Widths flow both ways through add, gelu and dropout. Each node is
  // inferred in file order, then again whenever one of its tensors gets a
  // width; a tensor gets one once, so the work is linear in the nodes.
  Status InferWidths(const std::vector<Node>& nodes) {
    std::map<std::string, std::vector<size_t>> touching;  // tensor -> nodes
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (const std::string& t : nodes[i].inputs) touching[t].push_back(i);
      touching[nodes[i].outputs[0]].push_back(i);
    }
    std::deque<size_t> queue(nodes.size());
    std::iota(queue.begin(), queue.end(), size_t{0});
    std::vector<bool> queued(nodes.size(), true);
    while (!queue.empty()) {
      const size_t i = queue.front();
      queue.pop_front();
      queued[i] = false;
      ATTN_RETURN_IF_ERROR(Infer(nodes[i]));
      for (const std::string& t : newly_known_) {
        for (const size_t j : touching[t]) {
          if (!queued[j]) queue.push_back(j);
          queued[j] = true;
        }
      }
      newly_known_.clear();
    }
    return {};
  }

  int64_t Width(const std::string& t) {
    const auto it = widths_.find(t);
    return it == widths_.end() ? -1 : it->second;
  }

  // Sets tensor t's width, or checks it; `why` explains a mismatch.
  Status Unify(const std::string& t, int64_t width, const std::string& why) {
    const int64_t have = Width(t);
    if (have < 0) {
      widths_[t] = width;
      newly_known_.push_back(t);
    } else if (have != width) {
      return InvalidArgument(why + " width " + std::to_string(width) +
                             ", but tensor '" + t + "' has width " +
                             std::to_string(have));
    }
    return {};
  }

  // The named weight of `node`, checked to exist with rank `rank` (its dtype
  // is ReadF32's to check).
  Result<const TensorInfo*> Find(const Node& node, const std::string& role,
                                 size_t rank) {
    const std::string name = prefix_ + *node.Weight(role);
    const TensorInfo* t = file_.Find(name);
    if (!t) {
      return InvalidArgument(node.Describe() + ": weight '" + name +
                             "' is missing from '" + file_.path() + "'");
    }
    if (t->shape.size() != rank ||
        std::count(t->shape.begin(), t->shape.end(), 0)) {
      return InvalidArgument(node.Describe() + ": weight '" + name +
                             "' has shape " + ShapeString(t->shape) +
                             ", want rank " + std::to_string(rank) +
                             " with positive sizes");
    }
    return t;
  }

  Status Infer(const Node& node) {
    const std::string& in = node.inputs[0];
    const std::string& out = node.outputs[0];
    const std::string who = node.Describe() + ": ";
    switch (node.op) {
      case Op::kLinear:
      case Op::kMha: {
        Result<const TensorInfo*> w =
            Find(node, node.op == Op::kMha ? "W_query.weight" : "weight", 2);
        if (!w.ok()) return w.status();
        const std::vector<int64_t>& shape = (*w)->shape;
        ATTN_RETURN_IF_ERROR(Unify(in, shape[1],
                                   who + "weight '" + (*w)->name +
                                       "' of shape " + ShapeString(shape) +
                                       " wants input '" + in + "' of"));
        return Unify(out, shape[0], who + "output '" + out + "' gets");
      }
      case Op::kLayerNorm: {
        Result<const TensorInfo*> scale = Find(node, "scale", 1);
        if (!scale.ok()) return scale.status();
        ATTN_RETURN_IF_ERROR(Unify(
            in, (*scale)->shape[0],
            who + "weight '" + (*scale)->name + "' of shape " +
                ShapeString((*scale)->shape) + " wants input '" + in + "' of"));
        break;
      }
      case Op::kAdd:
        if (Width(node.inputs[1]) >= 0) {
          ATTN_RETURN_IF_ERROR(
              Unify(in, Width(node.inputs[1]),
                    who + "input '" + node.inputs[1] + "' has"));
        }
        if (Width(in) >= 0) {
          ATTN_RETURN_IF_ERROR(
              Unify(node.inputs[1], Width(in), who + "input '" + in + "' has"));
        }
        break;
      case Op::kGelu:
      case Op::kDropout:
        break;
    }
    // Element-wise: the output is as wide as the input, either way round.
    if (Width(in) >= 0) {
      return Unify(out, Width(in), who + "input '" + in + "' has");
    }
    if (Width(out) >= 0) {
      return Unify(in, Width(out), who + "output '" + out + "' has");
    }
    return {};
  }

  // Copies weight `role` of `node` out as float, checking it has shape `want`.
  Status Read(const Node& node, const std::string& role,
              const std::vector<int64_t>& want, std::vector<float>& out) {
    Result<const TensorInfo*> t = Find(node, role, want.size());
    if (!t.ok()) return t.status();
    if ((*t)->shape != want) {
      return InvalidArgument(node.Describe() + ": weight '" + (*t)->name +
                             "' has shape " + ShapeString((*t)->shape) +
                             ", want " + ShapeString(want));
    }
    Result<std::vector<float>> values = file_.ReadF32((*t)->name);
    if (!values.ok()) return values.status();
    out = std::move(values).value();
    return {};
  }

  Status Load(const Node& node, NodeWeights& w) {
    const int64_t in = Width(node.inputs[0]), out = Width(node.outputs[0]);
    switch (node.op) {
      case Op::kLinear:
        ATTN_RETURN_IF_ERROR(Read(node, "weight", {out, in}, w.weight));
        if (node.Weight("bias")) {
          ATTN_RETURN_IF_ERROR(Read(node, "bias", {out}, w.bias));
        }
        return {};
      case Op::kLayerNorm:
        ATTN_RETURN_IF_ERROR(Read(node, "scale", {in}, w.weight));
        return Read(node, "shift", {in}, w.bias);
      case Op::kMha:
        return LoadMha(node, in, out, w);
      default:
        return {};
    }
  }

  Status LoadMha(const Node& node, int64_t d_in, int64_t d_out,
                 NodeWeights& w) {
    MhaConfig config;
    config.d_in = d_in;
    config.d_out = d_out;
    // q/k/v biases: all three in the file or none (qkv_bias, as the book).
    std::vector<std::string> present, absent;
    for (const char* role : {"W_query.bias", "W_key.bias", "W_value.bias"}) {
      if (!node.Weight(role)) continue;
      const std::string name = prefix_ + *node.Weight(role);
      (file_.Find(name) ? present : absent).push_back("'" + name + "'");
    }
    if (!present.empty() && !absent.empty()) {
      return InvalidArgument(node.Describe() + ": weight " + absent[0] +
                             " is missing from '" + file_.path() + "' while " +
                             present[0] +
                             " is there, want all q/k/v biases or none");
    }
    config.qkv_bias = !present.empty();

    const std::string* mask = node.Weight("mask");
    ATTN_ASSIGN_OR_RETURN(
        const AttentionDims dims,
        ResolveAttentionDims(
            file_, {options_.num_heads, options_.context_length},
            {node.num_heads, node.context_length},
            mask ? prefix_ + *mask : std::string(), node.Describe() + ": "));
    config.num_heads = dims.num_heads;
    config.context_length = dims.context_length;

    std::vector<float> wq, wk, wv, bq, bk, bv, wo, bo;
    const std::vector<int64_t> proj = {d_out, d_in};
    ATTN_RETURN_IF_ERROR(Read(node, "W_query.weight", proj, wq));
    ATTN_RETURN_IF_ERROR(Read(node, "W_key.weight", proj, wk));
    ATTN_RETURN_IF_ERROR(Read(node, "W_value.weight", proj, wv));
    ATTN_RETURN_IF_ERROR(Read(node, "out_proj.weight", {d_out, d_out}, wo));
    ATTN_RETURN_IF_ERROR(Read(node, "out_proj.bias", {d_out}, bo));
    MhaWeights weights;
    if (config.qkv_bias) {
      ATTN_RETURN_IF_ERROR(Read(node, "W_query.bias", {d_out}, bq));
      ATTN_RETURN_IF_ERROR(Read(node, "W_key.bias", {d_out}, bk));
      ATTN_RETURN_IF_ERROR(Read(node, "W_value.bias", {d_out}, bv));
      weights.b_query = bq.data();
      weights.b_key = bk.data();
      weights.b_value = bv.data();
    }
    weights.w_query = wq.data();
    weights.w_key = wk.data();
    weights.w_value = wv.data();
    weights.w_out = wo.data();
    weights.b_out = bo.data();
    MhaOptions mha_options;
    mha_options.num_threads = num_threads_;
    mha_options.dtype = options_.dtype;
    mha_options.max_memory_bytes = options_.max_memory_bytes;
    auto model = MhaModel::Create(config, weights, mha_options);
    if (!model.ok()) {
      return Status(model.status().code(),
                    node.Describe() + ": " + model.status().message());
    }
    w.mha = std::move(model).value();
    return {};
  }

  const SafetensorsFile& file_;
  const GraphOptions& options_;
  const int num_threads_;
  std::string prefix_;
  std::map<std::string, int64_t> widths_;
  std::vector<std::string> newly_known_;  // widths set by the last Infer
};

Result<AlignedBuffer> Allocate(size_t bytes) {
  return AlignedBuffer::Allocate(bytes);
}

// Whether any tensor of `file` is named under `prefix`.
bool HasTensorUnder(const SafetensorsFile& file, const std::string& prefix) {
  return std::any_of(
      file.tensors().begin(), file.tensors().end(),
      [&](const TensorInfo& t) { return t.name.rfind(prefix, 0) == 0; });
}

using LayerWeights = std::vector<std::vector<NodeWeights>>;

// What loading produced. Forks copy it and share the weights, which nothing
// writes after loading.
struct Loaded {
  graph::GraphDef def;
  graph::Program program;
  std::vector<int64_t> widths;                // per program tensor
  std::shared_ptr<const LayerWeights> layer;  // [layer][node]
  int num_threads = 1;
  DType dtype = DType::kF32;
  uint64_t max_memory_bytes = 0;  // resolved cap
};

}  // namespace

struct Graph::Impl : Loaded {
  // The compiled shape: per step its matmul (shared by the layers, whose
  // shapes agree) and per layer and step its packed weights or session.
  int64_t batch = 0, seq_len = 0;
  std::vector<std::optional<kernels::MatMul>> matmul;
  // bf16 only: per linear step whose src is fp32, its conversion into
  // `lowered` (a linear's bf16 output feeding only linears needs none).
  std::vector<std::optional<kernels::Convert>> convert;
  AlignedBuffer lowered;
  std::vector<std::vector<AlignedBuffer>> packed;
  std::vector<std::vector<std::unique_ptr<MhaSession>>> session;
  std::vector<size_t> offset;  // per program tensor, in the arena
  AlignedBuffer arena, scratch, hops[2];
  GraphMemory memory;

  int64_t rows() const { return batch * seq_len; }
  Status Compile(int64_t batch, int64_t seq_len);
  Status RunLayer(size_t l, const float* in, float* out, int threads);
};

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::~Graph() = default;

Result<std::unique_ptr<Graph>> Graph::Load(const std::string& graph_path,
                                           const std::string& weights_path,
                                           const GraphOptions& options) {
  Result<std::string> text = graph::ReadGraphFile(graph_path);
  if (!text.ok()) return text.status();
  return FromJson(*text, weights_path, options, graph_path);
}

Result<std::unique_ptr<Graph>> Graph::FromJson(const std::string& json,
                                               const std::string& weights_path,
                                               const GraphOptions& options,
                                               const std::string& source) {
  auto impl = std::make_unique<Impl>();
  Result<graph::GraphDef> def = graph::ParseGraph(json, source);
  if (!def.ok()) return def.status();
  impl->def = std::move(def).value();
  impl->program = graph::Lower(impl->def);
  Result<int> threads = ResolveNumThreads(options.num_threads);
  if (!threads.ok()) return threads.status();
  impl->num_threads = *threads;
  impl->dtype = options.dtype;
  ATTN_RETURN_IF_ERROR(CheckDTypeSupported(options.dtype));

  Result<SafetensorsFile> file = SafetensorsFile::Open(weights_path);
  if (!file.ok()) return file.status();
  // Every weight is copied out of the file once, as float.
  impl->max_memory_bytes = ResolveMaxMemory(options.max_memory_bytes);
  uint64_t file_bytes = 0;
  for (const TensorInfo& t : file->tensors()) {
    file_bytes = AddSat(file_bytes, MulSat(t.num_elements, sizeof(float)));
  }
  ATTN_RETURN_IF_ERROR(CheckMemory("the weights of '" + weights_path + "'",
                                   file_bytes, impl->max_memory_bytes));
  if (options.layers < 0) {
    return InvalidArgument("layers is " + std::to_string(options.layers) +
                           ", want a positive count (or 0 for one pass "
                           "without a prefix)");
  }
  Result<int64_t> n_layers = MetadataCount(*file, "n_layers");
  if (!n_layers.ok()) return n_layers.status();
  const int64_t layers = options.layers ? options.layers : *n_layers;
  // One block saved on its own keeps the names as written.
  const bool prefixed =
      layers > 1 || (layers == 1 && HasTensorUnder(*file, "trf_blocks.0."));
  Binder binder(*file, options, impl->num_threads);
  // Grown layer by layer, so a count the file cannot back (n_layers of
  // 50,000,000) fails at its first missing weight, having allocated nothing.
  LayerWeights loaded;
  for (int64_t l = 0; l < std::max<int64_t>(layers, 1); ++l) {
    const std::string prefix =
        prefixed ? "trf_blocks." + std::to_string(l) + "." : "";
    const std::string where = layers > 1
                                  ? "layer " + std::to_string(l) + " of " +
                                        std::to_string(layers) + ": "
                                  : "";
    loaded.emplace_back();
    if (Status s = binder.Bind(impl->def, prefix, loaded.back()); !s.ok()) {
      return Status(s.code(), source + ": " + where + s.message());
    }
    const int64_t in = binder.widths()[impl->def.input];
    const int64_t out = binder.widths()[impl->def.output];
    if (l == 0 && layers > 1 && in != out) {
      return InvalidArgument(
          source + ": graph input '" + impl->def.input + "' has width " +
          std::to_string(in) + " but output '" + impl->def.output +
          "' has width " + std::to_string(out) +
          ", want equal widths to stack " + std::to_string(layers) + " layers");
    }
  }
  impl->layer = std::make_shared<const LayerWeights>(std::move(loaded));
  for (const std::string& t : impl->program.tensors) {
    impl->widths.push_back(binder.widths()[t]);
  }
  return std::unique_ptr<Graph>(new Graph(std::move(impl)));
}

std::unique_ptr<Graph> Graph::Fork() const {
  auto impl = std::make_unique<Impl>();
  static_cast<Loaded&>(*impl) = *impl_;
  return std::unique_ptr<Graph>(new Graph(std::move(impl)));
}

int64_t Graph::input_width() const {
  return impl_->widths[impl_->program.input];
}
int64_t Graph::output_width() const {
  return impl_->widths[impl_->program.output];
}
int64_t Graph::layers() const {
  return static_cast<int64_t>(impl_->layer->size());
}
int Graph::num_threads() const { return impl_->num_threads; }
GraphMemory Graph::memory() const { return impl_->memory; }

Status Graph::Compile(int64_t batch, int64_t seq_len) {
  return impl_->Compile(batch, seq_len);
}

Status Graph::Impl::Compile(int64_t new_batch, int64_t new_seq_len) {
  constexpr int64_t kMaxRows = int64_t{1} << 31;
  if (new_batch <= 0 || new_seq_len <= 0 ||
      new_batch > kMaxRows / new_seq_len) {
    return InvalidArgument("input shape [" + std::to_string(new_batch) + ", " +
                           std::to_string(new_seq_len) +
                           ", e] is invalid, want positive batch and seq_len "
                           "with batch x seq_len < 2^31");
  }
  if (new_batch == batch && new_seq_len == seq_len) return {};
  batch = seq_len = 0;
  memory = {};
  const ThreadScope threads(num_threads);
  const int64_t R = new_batch * new_seq_len;
  const size_t L = layer->size(), S = program.steps.size();
  // Move-only members: cleared and resized rather than assigned.
  matmul.clear();
  matmul.resize(S);
  convert.clear();
  convert.resize(S);
  packed.clear();
  packed.resize(L);
  session.clear();
  session.resize(L);
  for (size_t l = 0; l < L; ++l) {
    packed[l].resize(S);
    session[l].resize(S);
  }
  // With bf16, a tensor that a linear writes and only linears read (as
  // their src) is stored bf16; every other tensor is fp32.
  const size_t T = program.tensors.size();
  const bool low = dtype == DType::kBF16;
  std::vector<bool> bf16(T, false);
  for (const graph::Step& step : program.steps) {
    bf16[step.dst] = low && step.op == Op::kLinear;
  }
  for (const graph::Step& step : program.steps) {
    if (step.op != Op::kLinear) bf16[step.src] = false;
    if (step.src2 >= 0) bf16[step.src2] = false;
  }
  bf16[program.output] = false;
  auto type_of = [&](int t) {
    return bf16[t] ? kernels::DataType::kBF16 : kernels::DataType::kF32;
  };
  size_t scratch_bytes = 0, lowered_bytes = 0;
  for (size_t k = 0; k < S; ++k) {
    const graph::Step& step = program.steps[k];
    const Node& node = def.nodes[step.node];
    if (step.op == Op::kMha) {
      for (size_t l = 0; l < L; ++l) {
        auto s = std::make_unique<MhaSession>((*layer)[l][step.node].mha);
        if (Status st = s->Prepare(new_batch, new_seq_len); !st.ok()) {
          return Status(st.code(), node.Describe() + ": " + st.message());
        }
        memory.workspace += s->workspace_bytes();
        session[l][k] = std::move(s);
      }
    }
    if (step.op != Op::kLinear) continue;
    // y [R, out] = x [R, in] W^T (+ b) (then GELU, then + residual).
    const int64_t in = widths[step.src], out = widths[step.dst];
    const kernels::Operand bias{{1, out}, {}, kernels::DataType::kF32};
    kernels::PostOps post;
    post.gelu_tanh = step.gelu;
    post.add_residual = step.src2 >= 0;
    const kernels::DataType mm_type =
        low ? kernels::DataType::kBF16 : kernels::DataType::kF32;
    if (low && !bf16[step.src]) {
      Result<kernels::Convert> c = kernels::Convert::Create(
          R * in, kernels::DataType::kF32, kernels::DataType::kBF16);
      if (!c.ok()) return c.status();
      convert[k].emplace(std::move(c).value());
      lowered_bytes = std::max(lowered_bytes, static_cast<size_t>(R * in) * 2);
    }
    Result<kernels::MatMul> mm = kernels::MatMul::Create(
        {{R, in}, {}, mm_type}, {{in, out}, {}, mm_type},
        (*layer)[0][step.node].bias.empty() ? nullptr : &bias,
        {{R, out}, {}, type_of(step.dst)}, kernels::Threading::kTeam, post);
    if (!mm.ok()) {
      return Status(mm.status().code(),
                    node.Describe() + ": " + mm.status().message());
    }
    scratch_bytes = std::max(
        scratch_bytes, mm->scratch_bytes() * static_cast<size_t>(num_threads));
    for (size_t l = 0; l < L; ++l) {
      Result<AlignedBuffer> buffer = Allocate(mm->packed_weights_bytes());
      if (!buffer.ok()) return buffer.status();
      // W [out, in] row-major is W^T [in, out] with strides (1, in).
      ATTN_RETURN_IF_ERROR(mm->PackWeights(
          {{in, out}, {1, in}, kernels::DataType::kF32},
          (*layer)[l][step.node].weight.data(), buffer->data()));
      memory.workspace += buffer->size();
      packed[l][k] = std::move(buffer).value();
    }
    matmul[k].emplace(std::move(mm).value());
  }

  // Live ranges of the intermediates (neither the input nor the output).
  std::vector<graph::BufferRequest> requests(T);
  for (size_t k = 0; k < S; ++k) {
    const graph::Step& step = program.steps[k];
    requests[step.dst].first = requests[step.dst].last = k;
    for (int src : {step.src, step.src2}) {
      if (src >= 0) requests[src].last = k;
    }
  }
  std::vector<bool> written(T, false);
  for (const graph::Step& step : program.steps) written[step.dst] = true;
  for (size_t t = 0; t < T; ++t) {
    // Fusion leaves some tensors unwritten; the output is the caller's.
    const bool planned = written[t] && static_cast<int>(t) != program.output;
    requests[t].bytes = planned
                            ? static_cast<size_t>(R * widths[t]) *
                                  kernels::SizeOf(type_of(static_cast<int>(t)))
                            : 0;
    memory.intermediates_total += (requests[t].bytes + 63) / 64 * 64;
  }
  const graph::BufferPlan plan = graph::PlanBuffers(requests);
  offset = plan.offsets;
  memory.planned_peak = plan.peak_bytes;

  const size_t hop_bytes =
      static_cast<size_t>(R * widths[program.output]) * sizeof(float);
  const struct {
    AlignedBuffer* buffer;
    size_t bytes;
  } wants[] = {{&arena, plan.peak_bytes},
               {&scratch, scratch_bytes},
               {&lowered, lowered_bytes},
               {&hops[0], L > 1 ? hop_bytes : 0},
               {&hops[1], L > 2 ? hop_bytes : 0}};
  uint64_t need = memory.workspace;  // packed weights and sessions so far
  for (const auto& want : wants) need = AddSat(need, want.bytes);
  ATTN_RETURN_IF_ERROR(
      CheckMemory("a run of batch " + std::to_string(new_batch) +
                      " x seq_len " + std::to_string(new_seq_len),
                  need, max_memory_bytes));
  for (const auto& want : wants) {
    Result<AlignedBuffer> buffer = Allocate(want.bytes);
    if (!buffer.ok()) return buffer.status();
    *want.buffer = std::move(buffer).value();
  }
  memory.workspace +=
      scratch.size() + lowered.size() + hops[0].size() + hops[1].size();
  batch = new_batch;
  seq_len = new_seq_len;
  return {};
}

Status Graph::Run(const float* input, int64_t batch, int64_t seq_len,
                  float* output) {
  if (!input || !output) {
    return InvalidArgument("input and output must not be null");
  }
  ATTN_RETURN_IF_ERROR(impl_->Compile(batch, seq_len));
  const ThreadScope threads(impl_->num_threads);
  const size_t L = impl_->layer->size();
  for (size_t l = 0; l < L; ++l) {
    // Layers pass their activations through two buffers in turn.
    const float* in =
        l == 0 ? input
               : static_cast<const float*>(impl_->hops[(l - 1) % 2].data());
    float* out =
        l + 1 == L ? output : static_cast<float*>(impl_->hops[l % 2].data());
    ATTN_RETURN_IF_ERROR(impl_->RunLayer(l, in, out, threads.num_threads()));
  }
  return {};
}

Status Graph::Impl::RunLayer(size_t l, const float* in, float* out,
                             int threads) {
  const graph::Program& p = program;
  const auto R = static_cast<size_t>(rows());
  if (p.output == p.input) {  // a graph of dropouts only
    std::memcpy(out, in,
                R * static_cast<size_t>(widths[p.input]) * sizeof(float));
    return {};
  }
  // bf16 tensors are only handed to matmuls, which take void*.
  auto at = [&](int t) {
    if (t == p.input) return const_cast<float*>(in);  // only ever read
    if (t == p.output) return out;
    return reinterpret_cast<float*>(static_cast<char*>(arena.data()) +
                                    offset[t]);
  };
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const graph::Step& s = p.steps[k];
    const NodeWeights& w = (*layer)[l][s.node];
    const auto count = R * static_cast<size_t>(widths[s.dst]);
    switch (s.op) {
      case Op::kLinear: {
        const void* src = at(s.src);
        if (convert[k]) {
          convert[k]->Run(src, lowered.data());
          src = lowered.data();
        }
        matmul[k]->Run(src, packed[l][k].data(), w.bias.data(), at(s.dst),
                       scratch.data(), threads,
                       s.src2 >= 0 ? at(s.src2) : nullptr);
        break;
      }
      case Op::kMha:
        ATTN_RETURN_IF_ERROR(
            session[l][k]->Run(at(s.src), batch, seq_len, at(s.dst)));
        break;
      case Op::kLayerNorm:
        kernels::LayerNorm(at(s.src), w.weight.data(), w.bias.data(), at(s.dst),
                           R, static_cast<size_t>(widths[s.dst]),
                           def.nodes[s.node].eps, threads);
        break;
      case Op::kGelu:
        kernels::Gelu(at(s.src), at(s.dst), count, threads);
        break;
      case Op::kAdd:
        kernels::Add(at(s.src), at(s.src2), at(s.dst), count, threads);
        break;
      case Op::kDropout:
        break;  // lowered away
    }
  }
  return {};
}

}  // namespace attn
