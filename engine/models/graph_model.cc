// GraphModel (attn/graph.hpp): parses and lowers a graph (graph_ir.h), infers
// every tensor's width from the weights it names (by the book's names, which
// a Hugging Face GPT-2 file's are mapped to by lm_layouts.cc), copies those
// weights out of the file once, as fp32, and packs the linears' for oneDNN.
// Sessions (graph_session.cc) share the result.
#include "engine/models/graph_model.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "attn/safetensors.hpp"
#include "engine/io/json_limits.h"
#include "engine/io/model_config.h"
#include "engine/models/lm_model.h"
#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/threads.h"

namespace attn {
namespace {

using graph::Node;
using graph::Op;

// Roles of each block (lm::Role orders them kNorm1Scale to kDownBias), not
// of the whole model.
bool PerLayer(lm::Role role) {
  return role >= lm::Role::kNorm1Scale && role <= lm::Role::kDownBias;
}

// Sets what `options` leave unset from `dims`.
void FillUnset(ModelOptions& options, const AttentionDims& dims) {
  if (!options.num_heads) options.num_heads = dims.num_heads;
  if (!options.context_length) options.context_length = dims.context_length;
  if (!options.num_kv_heads) options.num_kv_heads = dims.num_kv_heads;
  if (!options.sliding_window) options.sliding_window = dims.sliding_window;
  if (!options.rope.theta) options.rope = dims.rope;
}

// The attention dims the graph's first mha node gives, a repeat's block
// searched too; none without one.
AttentionDims GraphDims(const graph::GraphDef& def) {
  for (const Node& node : def.nodes) {
    if (node.op == Op::kMha) {
      return {node.num_heads, node.context_length, node.num_kv_heads, node.rope,
              node.sliding_window};
    }
    if (node.block) {
      const AttentionDims dims = GraphDims(*node.block);
      if (dims.num_heads || dims.context_length || dims.rope.theta) return dims;
    }
  }
  return {};
}

// The tensors a graph names, under the book's names: a book file's own, or,
// for another whole-model layout (Hugging Face GPT-2), the file's tensors
// read through lm_layouts.cc's tables in the book's form, so that one name
// table per layout serves both the graphs and the LM library.
class GraphWeights {
 public:
  // `graph_dims`: what the graph's nodes give, used where the options give
  // nothing (as the graph itself will).
  static Result<GraphWeights> Open(const std::string& path,
                                   const GraphOptions& options,
                                   const AttentionDims& graph_dims) {
    GraphWeights weights;
    ATTN_ASSIGN_OR_RETURN(
        SafetensorsFile file,
        SafetensorsFile::Open(path, options.max_memory_bytes));
    weights.file_ = std::make_shared<const SafetensorsFile>(std::move(file));
    // A whole model is checked as the library loads it, so that a file it
    // refuses (a stray tensor, a block missing a bias, a gap in the
    // blocks) does not run as some other model here. The book's layouts
    // ("book-gpt", "book-llama") use the graphs' names; another one's are
    // read through its table.
    const std::string layout = lm::DetectLayout(WeightFiles::Of(weights.file_));
    if (!layout.empty()) {
      LmOptions lm_options;
      static_cast<ModelOptions&>(lm_options) = options;
      FillUnset(lm_options, graph_dims);
      ATTN_ASSIGN_OR_RETURN(weights.model_,
                            lm::OpenModelFile(path, lm_options));
      // Their norms, embeddings and feed-forward are not the book's blocks'
      // (1 + w, a scale, GeGLU; fused halves): a graph would run another
      // model on their weights.
      const std::string& family = weights.model_->config.layout;
      if (family == "hf-gemma" || family == "hf-phi3") {
        return InvalidArgument(Quoted(path) + " is a " + family +
                               " model, which no graph runs: load it without "
                               "--graph");
      }
      // Graphs read fp32 tensors; a quantized folder's linears are blocks.
      if (const auto quant = weights.model_->weights.quant) {
        return InvalidArgument(Quoted(path) + " holds " +
                               kernels::QuantName(*quant) +
                               " weights, which no graph runs: load it "
                               "without --graph");
      }
      weights.translate_ = layout.rfind("book-", 0) != 0;
    }
    return weights;
  }

  const SafetensorsFile& file() const { return *file_; }
  const std::string& path() const { return file_->path(); }

  // The tensor named `name` (its shape in the book's form), or null.
  const TensorInfo* Find(const std::string& name) const {
    if (!translate_) return file_->Find(name);
    if (const auto it = translated_.find(name); it != translated_.end()) {
      return &it->second;
    }
    const auto role = lm::BookRole(model_->config.architecture, name);
    if (!role) return nullptr;
    std::vector<int64_t> shape =
        model_->weights.shape(role->first, role->second);
    if (shape.empty()) return nullptr;
    TensorInfo info;
    info.name = name;
    info.dtype = "F32";
    info.num_elements = static_cast<size_t>(std::accumulate(
        shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>()));
    info.shape = std::move(shape);
    return &translated_.emplace(name, std::move(info)).first->second;
  }

  // Tensor `name`, which Find found, as float.
  Result<StreamedVector<float>> ReadF32(const std::string& name) const {
    read_.insert(name);
    if (!translate_) return ReadStreamed(*file_, name);
    const std::vector<int64_t>& shape = Find(name)->shape;
    const auto role = lm::BookRole(model_->config.architecture, name);
    return model_->weights.fetch(role->first, role->second, shape[0],
                                 shape.size() == 2 ? shape[1] : 0);
  }

  // The layers of a whole model (counted by lm_layouts.cc); nothing for
  // another file, whose layers are counted by their names.
  std::optional<int64_t> layout_layers() const {
    if (!model_) return std::nullopt;
    return model_->config.num_layers;
  }

  // After loading, a whole model's graph must have read all of the model:
  // every tensor of each block it read from, and every one outside the
  // blocks if it read one there, so that it cannot run as another model (a
  // Llama block graph without the file's biases).
  Status CheckReadTheModel() const {
    if (!model_) return {};
    const LmConfig& c = model_->config;
    std::set<std::pair<lm::Role, int64_t>> read;
    for (const std::string& name : read_) {
      if (const auto role = lm::BookRole(c.architecture, name)) {
        read.insert(*role);
      }
    }
    for (const auto& [read_role, layer] : read) {
      for (int r = 0; r <= static_cast<int>(lm::Role::kHead); ++r) {
        const auto role = static_cast<lm::Role>(r);
        if (PerLayer(role) != PerLayer(read_role) ||
            !model_->weights.has(role, layer) || read.count({role, layer})) {
          continue;
        }
        return InvalidArgument(
            Quoted(path()) + " holds '" +
            lm::BookName(c.architecture, role, layer) +
            "', which the graph does not read: it would run another model");
      }
    }
    return {};
  }

  // A whole model's norms run at its eps (metadata or config.json).
  Status CheckNormEps(const graph::GraphDef& def) const {
    if (!model_) return {};
    const double eps = model_->config.norm_eps;
    for (const Node& node : def.nodes) {
      const bool norm = node.op == Op::kLayerNorm || node.op == Op::kRmsNorm;
      if (norm && node.eps != static_cast<float>(eps)) {
        char text[64];
        std::snprintf(text, sizeof(text), "%g and the model's %g", node.eps,
                      eps);
        return InvalidArgument(node.Describe() + ": eps differs between " +
                               "the graph's " + text + " (" + Quoted(path()) +
                               ")");
      }
    }
    return {};
  }

  // Whether names are read through the layout's table (not the book's).
  bool translates() const { return translate_; }

  // Sets the heads and context of `dims` that it leaves unset from the
  // layout's configuration (a Hugging Face file's config.json), as the file's
  // metadata, which has neither, would.
  void FillLayoutDims(AttentionDims& dims) const {
    if (!translate_) return;
    if (!dims.num_heads) dims.num_heads = model_->config.num_heads;
    if (!dims.context_length) {
      dims.context_length = model_->config.context_length;
    }
  }

 private:
  std::shared_ptr<const SafetensorsFile> file_;
  std::optional<lm::FileModel> model_;  // a whole model's file
  bool translate_ = false;  // names through model_: not the book's layout
  mutable std::set<std::string> read_;  // the names ReadF32 read
  // Find's answers for a translated file, which its pointers point into.
  mutable std::map<std::string, TensorInfo> translated_;
};

// Infers tensor widths from the weights and loads one layer's weights, the
// i-th layer's names carrying `prefix`.
class Binder {
 public:
  Binder(const GraphWeights& weights, const GraphOptions& options,
         int num_threads, std::map<std::string, StreamedVector<float>>& tensors)
      : weights_(weights),
        options_(options),
        num_threads_(num_threads),
        tensors_(tensors) {}

  // Widths by tensor name, filled by the first Bind and checked by later
  // ones.
  std::map<std::string, int64_t>& widths() { return widths_; }

  Status Bind(const graph::GraphDef& def, const std::string& prefix,
              std::vector<graph::NodeWeights>& weights) {
    prefix_ = prefix;
    ATTN_RETURN_IF_ERROR(InferWidths(def.nodes));
    for (const Node& node : def.nodes) {
      for (const std::string& t : {node.inputs[0], node.outputs[0]}) {
        if (Width(t) < 0) {
          return InvalidArgument("cannot infer the width of tensor " +
                                 Quoted(t) +
                                 ": no weight fixes it, want a linear, "
                                 "layernorm or mha to read it");
        }
      }
    }
    weights.clear();
    weights.resize(def.nodes.size());
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
                             ", but tensor " + Quoted(t) + " has width " +
                             std::to_string(have));
    }
    return {};
  }

  // The file's name of weight `role` of `node`: the first of its names
  // (with the layer's prefix) that the file holds, else the first.
  std::string Name(const Node& node, const std::string& role) const {
    const std::vector<std::string>& names = *node.Weight(role);
    for (const std::string& name : names) {
      if (weights_.Find(prefix_ + name)) return prefix_ + name;
    }
    return prefix_ + names.front();
  }

  // The named weight of `node`, checked to exist with rank `rank` (its dtype
  // is ReadF32's to check).
  Result<const TensorInfo*> Find(const Node& node, const std::string& role,
                                 size_t rank) {
    const TensorInfo* t = weights_.Find(Name(node, role));
    if (!t) {
      std::string names;
      for (const std::string& name : *node.Weight(role)) {
        names += (names.empty() ? "" : " or ") + Quoted(prefix_ + name);
      }
      return InvalidArgument(node.Describe() + ": weight " + names +
                             " is missing from " + Quoted(weights_.path()));
    }
    if (t->shape.size() != rank ||
        std::count(t->shape.begin(), t->shape.end(), 0)) {
      return InvalidArgument(node.Describe() + ": weight " + Quoted(t->name) +
                             " has shape " + ShapeString(t->shape) +
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
      case Op::kEmbedding: {
        // One token id per position: the ids are [b, T] = [b, T, 1].
        ATTN_ASSIGN_OR_RETURN(const TensorInfo* table, Find(node, "weight", 2));
        ATTN_RETURN_IF_ERROR(
            Unify(in, 1, who + "token ids " + Quoted(in) + " have"));
        return Unify(out, table->shape[1],
                     who + "weight " + Quoted(table->name) + " of shape " +
                         ShapeString(table->shape) + " gives output " +
                         Quoted(out));
      }
      case Op::kPositionEmbedding: {
        ATTN_ASSIGN_OR_RETURN(const TensorInfo* table, Find(node, "weight", 2));
        ATTN_RETURN_IF_ERROR(Unify(in, table->shape[1],
                                   who + "weight " + Quoted(table->name) +
                                       " of shape " +
                                       ShapeString(table->shape) +
                                       " wants input " + Quoted(in) + " of"));
        break;
      }
      case Op::kLinear:
      case Op::kMha: {
        Result<const TensorInfo*> w =
            Find(node, node.op == Op::kMha ? "W_query.weight" : "weight", 2);
        if (!w.ok()) return w.status();
        const std::vector<int64_t>& shape = (*w)->shape;
        ATTN_RETURN_IF_ERROR(Unify(in, shape[1],
                                   who + "weight " + Quoted((*w)->name) +
                                       " of shape " + ShapeString(shape) +
                                       " wants input " + Quoted(in) + " of"));
        return Unify(out, shape[0], who + "output " + Quoted(out) + " gets");
      }
      case Op::kLayerNorm:
      case Op::kRmsNorm: {
        Result<const TensorInfo*> scale =
            Find(node, node.op == Op::kLayerNorm ? "scale" : "weight", 1);
        if (!scale.ok()) return scale.status();
        ATTN_RETURN_IF_ERROR(Unify(in, (*scale)->shape[0],
                                   who + "weight " + Quoted((*scale)->name) +
                                       " of shape " +
                                       ShapeString((*scale)->shape) +
                                       " wants input " + Quoted(in) + " of"));
        break;
      }
      case Op::kSwiGlu:
        return InferHalf(in, out, who);
      case Op::kAdd:
      case Op::kMul:
        if (Width(node.inputs[1]) >= 0) {
          ATTN_RETURN_IF_ERROR(
              Unify(in, Width(node.inputs[1]),
                    who + "input " + Quoted(node.inputs[1]) + " has"));
        }
        if (Width(in) >= 0) {
          ATTN_RETURN_IF_ERROR(Unify(node.inputs[1], Width(in),
                                     who + "input " + Quoted(in) + " has"));
        }
        break;
      case Op::kGelu:
      case Op::kSilu:
      case Op::kDropout:
      case Op::kRepeat:  // expanded before binding
        break;
    }
    // Element-wise: the output is as wide as the input, either way round.
    if (Width(in) >= 0) {
      return Unify(out, Width(in), who + "input " + Quoted(in) + " has");
    }
    if (Width(out) >= 0) {
      return Unify(in, Width(out), who + "output " + Quoted(out) + " has");
    }
    return {};
  }

  // A SwiGLU's output is half as wide as its input, which must be even.
  Status InferHalf(const std::string& in, const std::string& out,
                   const std::string& who) {
    if (Width(in) >= 0 && Width(in) % 2 != 0) {
      return InvalidArgument(who + "input " + Quoted(in) + " has width " +
                             std::to_string(Width(in)) +
                             ", want an even width (gate and up halves)");
    }
    if (Width(in) >= 0) {
      return Unify(out, Width(in) / 2, who + "half of input " + Quoted(in));
    }
    if (Width(out) >= 0) {
      return Unify(in, 2 * Width(out), who + "twice output " + Quoted(out));
    }
    return {};
  }

  // Weight `role` of `node`, checked to have shape `want`.
  Result<const TensorInfo*> Check(const Node& node, const std::string& role,
                                  const std::vector<int64_t>& want) {
    ATTN_ASSIGN_OR_RETURN(const TensorInfo* t, Find(node, role, want.size()));
    if (t->shape != want) {
      return InvalidArgument(node.Describe() + ": weight " + Quoted(t->name) +
                             " has shape " + ShapeString(t->shape) + ", want " +
                             ShapeString(want));
    }
    return t;
  }

  // Copies weight `role` of `node` out as float, checking it has shape `want`.
  Status Read(const Node& node, const std::string& role,
              const std::vector<int64_t>& want, StreamedVector<float>& out) {
    ATTN_ASSIGN_OR_RETURN(const TensorInfo* t, Check(node, role, want));
    ATTN_ASSIGN_OR_RETURN(out, weights_.ReadF32(t->name));
    return {};
  }

  // As Read, into the model's tensors, where every node naming the tensor
  // shares one copy (a tied head reads its embedding's table).
  Status Share(const Node& node, const std::string& role,
               const std::vector<int64_t>& want, const float*& out) {
    ATTN_ASSIGN_OR_RETURN(const TensorInfo* t, Check(node, role, want));
    auto it = tensors_.find(t->name);
    if (it == tensors_.end()) {
      ATTN_ASSIGN_OR_RETURN(StreamedVector<float> values,
                            weights_.ReadF32(t->name));
      it = tensors_.emplace(t->name, std::move(values)).first;
    }
    out = it->second.data();
    return {};
  }

  Status Load(const Node& node, graph::NodeWeights& w) {
    const int64_t in = Width(node.inputs[0]), out = Width(node.outputs[0]);
    switch (node.op) {
      case Op::kLinear:
        ATTN_RETURN_IF_ERROR(Share(node, "weight", {out, in}, w.weight));
        if (node.Weight("bias")) {
          ATTN_RETURN_IF_ERROR(Share(node, "bias", {out}, w.bias));
        }
        return {};
      case Op::kLayerNorm:
        ATTN_RETURN_IF_ERROR(Share(node, "scale", {in}, w.weight));
        return Share(node, "shift", {in}, w.bias);
      case Op::kRmsNorm:
        return Share(node, "weight", {in}, w.weight);
      case Op::kEmbedding:
      case Op::kPositionEmbedding: {
        ATTN_ASSIGN_OR_RETURN(const TensorInfo* table, Find(node, "weight", 2));
        w.rows = table->shape[0];
        return Share(node, "weight", {w.rows, out}, w.weight);
      }
      case Op::kMha:
        return LoadMha(node, in, out, w);
      default:
        return {};
    }
  }

  Status LoadMha(const Node& node, int64_t d_in, int64_t d_out,
                 graph::NodeWeights& w) {
    MhaConfig config;
    config.d_in = d_in;
    config.d_out = d_out;
    // q/k/v biases: all three in the file or none (qkv_bias, as the book).
    std::vector<std::string> present, absent;
    for (const char* role : {"W_query.bias", "W_key.bias", "W_value.bias"}) {
      if (!node.Weight(role)) continue;
      const std::string name = Name(node, role);
      (weights_.Find(name) ? present : absent).push_back(Quoted(name));
    }
    if (!present.empty() && !absent.empty()) {
      return InvalidArgument(node.Describe() + ": weight " + absent[0] +
                             " is missing from " + Quoted(weights_.path()) +
                             " while " + present[0] +
                             " is there, want all q/k/v biases or none");
    }
    config.qkv_bias = !present.empty();

    const bool mask = node.Weight("mask") != nullptr;
    AttentionDims attribute = {node.num_heads, node.context_length,
                               node.num_kv_heads, node.rope,
                               node.sliding_window};
    weights_.FillLayoutDims(attribute);  // the options still come first
    ATTN_ASSIGN_OR_RETURN(
        const ResolvedDims dims,
        ResolveAttentionDims(weights_.file(), DimsOf(options_), attribute,
                             mask ? Name(node, "mask") : std::string(),
                             node.Describe() + ": "));
    const std::string key = Name(node, "W_key.weight");
    if (Status s = ApplyDims(dims, weights_.Find(key), key, "the node's width",
                             config);
        !s.ok()) {
      return Status(s.code(), node.Describe() + ": " + s.message());
    }

    StreamedVector<float> wq, wk, wv, bq, bk, bv, wo, bo;
    const std::vector<int64_t> proj = {d_out, d_in};
    const std::vector<int64_t> kv_proj = {KvDim(config), d_in};
    ATTN_RETURN_IF_ERROR(Read(node, "W_query.weight", proj, wq));
    ATTN_RETURN_IF_ERROR(Read(node, "W_key.weight", kv_proj, wk));
    ATTN_RETURN_IF_ERROR(Read(node, "W_value.weight", kv_proj, wv));
    ATTN_RETURN_IF_ERROR(Read(node, "out_proj.weight", {d_out, d_out}, wo));
    // Llama's out_proj has no bias; a named one must be in the file.
    if (node.Weight("out_proj.bias")) {
      ATTN_RETURN_IF_ERROR(Read(node, "out_proj.bias", {d_out}, bo));
    }
    MhaWeights weights;
    if (config.qkv_bias) {
      ATTN_RETURN_IF_ERROR(Read(node, "W_query.bias", {d_out}, bq));
      ATTN_RETURN_IF_ERROR(Read(node, "W_key.bias", {KvDim(config)}, bk));
      ATTN_RETURN_IF_ERROR(Read(node, "W_value.bias", {KvDim(config)}, bv));
      weights.b_query = bq.data();
      weights.b_key = bk.data();
      weights.b_value = bv.data();
    }
    weights.w_query = wq.data();
    weights.w_key = wk.data();
    weights.w_value = wv.data();
    weights.w_out = wo.data();
    weights.b_out = bo.empty() ? nullptr : bo.data();
    MhaOptions mha_options;
    mha_options.num_threads = num_threads_;
    mha_options.dtype = options_.dtype;
    mha_options.max_memory_bytes = options_.max_memory_bytes;
    mha_options.decode = false;  // a graph runs sessions only
    auto model = MhaModel::Create(config, weights, mha_options);
    if (!model.ok()) {
      return Status(model.status().code(),
                    node.Describe() + ": " + model.status().message());
    }
    w.mha = std::move(model).value();
    return {};
  }

  const GraphWeights& weights_;
  const GraphOptions& options_;
  const int num_threads_;
  std::string prefix_;
  std::map<std::string, StreamedVector<float>>& tensors_;  // the model's
  std::map<std::string, int64_t> widths_;
  std::vector<std::string> newly_known_;  // widths set by the last Infer
};

// Whether any tensor of `file` is named under `prefix`.
bool HasTensorUnder(const SafetensorsFile& file, const std::string& prefix) {
  return std::any_of(
      file.tensors().begin(), file.tensors().end(),
      [&](const TensorInfo& t) { return t.name.rfind(prefix, 0) == 0; });
}

// The options the weights do not decide: team size, dtype, memory cap.
Status ResolveRunOptions(const GraphOptions& options,
                         graph::LoadedGraph& loaded) {
  ATTN_ASSIGN_OR_RETURN(loaded.num_threads, ResolveNumThreads(options));
  loaded.dtype = options.dtype;
  ATTN_RETURN_IF_ERROR(CheckDenseDType(options.dtype, "a graph model"));
  ATTN_RETURN_IF_ERROR(CheckDTypeSupported(options.dtype));
  loaded.max_memory_bytes = ResolveMaxMemory(options.max_memory_bytes);
  return {};
}

// Every weight is copied out of the file once, as float, and packed once
// (at most as large in fp32): refused up front when the whole file twice
// would not fit under the cap. The bytes of one copy.
Result<uint64_t> CheckWeightsFit(const SafetensorsFile& file, uint64_t cap) {
  uint64_t file_bytes = 0;
  for (const TensorInfo& t : file.tensors()) {
    file_bytes = AddSat(file_bytes, MulSat(t.num_elements, sizeof(float)));
  }
  ATTN_RETURN_IF_ERROR(CheckMemory("the weights of " + Quoted(file.path()),
                                   MulSat(2, file_bytes), cap));
  return file_bytes;
}

// Bytes the mha nodes' packed weights take, in every layer.
uint64_t MhaPackedBytes(const graph::LoadedGraph& m) {
  uint64_t bytes = 0;
  for (const auto& layer : m.layer) {
    for (const graph::NodeWeights& w : layer) {
      if (w.mha) {
        bytes =
            AddSat(bytes, w.mha->memory_bytes() - WeightBytes(w.mha->config()));
      }
    }
  }
  return bytes;
}

// The layer count: the option, else metadata "n_layers", else 0 (once, with
// the names as written).
Result<int64_t> LayerCount(const SafetensorsFile& file,
                           const GraphOptions& options) {
  if (options.layers < 0) {
    return InvalidArgument("layers is " + std::to_string(options.layers) +
                           ", want a positive count (or 0 for one pass "
                           "without a prefix)");
  }
  ATTN_ASSIGN_OR_RETURN(const int64_t n_layers,
                        MetadataCount(file, "n_layers"));
  return options.layers ? options.layers : n_layers;
}

// A repeat node's layer count: GraphOptions::layers, else its `count`, else
// the layers of a whole model's file, else how many layers, from 0 on, have
// a tensor under their prefix in the file. The count is checked before the
// block is copied once per layer (50,000,000 layers took 15 GB to fail): no
// more than a whole model's blocks, and every layer's prefix in the file
// (whose names are the graph's: not a translated layout's).
graph::RepeatCount CountLayersIn(const GraphWeights& weights,
                                 const GraphOptions& options) {
  return [&weights, &options](const Node& node) -> Result<int64_t> {
    const int64_t asked = options.layers > 0 ? options.layers : node.count;
    const std::optional<int64_t> held = weights.layout_layers();
    if (asked > 0 && held && asked > *held) {
      return InvalidArgument(node.Describe() + ": " + std::to_string(asked) +
                             " layers asked for, but " +
                             Quoted(weights.path()) + " holds a model of " +
                             std::to_string(*held));
    }
    const int64_t layers = asked > 0 ? asked : held.value_or(0);
    if (weights.translates()) return layers;
    // Every layer from 0 on with a tensor under its prefix: the count, or
    // the first layer short of it (each present layer names a tensor, so
    // this stops within the file's tensors however large the count).
    std::vector<std::string> names;
    for (const TensorInfo& t : weights.file().tensors())
      names.push_back(t.name);
    std::sort(names.begin(), names.end());
    const auto present = [&](int64_t layer) {
      const std::string prefix = graph::LayerPrefix(node, layer);
      const auto it = std::lower_bound(names.begin(), names.end(), prefix);
      return it != names.end() && it->rfind(prefix, 0) == 0;
    };
    int64_t found = 0;
    while ((layers == 0 || found < layers) && present(found)) ++found;
    if (found == 0 || found < layers) {
      return InvalidArgument(node.Describe() + ": no tensor in " +
                             Quoted(weights.path()) + " is named under " +
                             Quoted(graph::LayerPrefix(node, found)) +
                             ", want " +
                             (layers ? "layer " + std::to_string(found) +
                                           " of " + std::to_string(layers)
                                     : std::string("at least one layer")));
    }
    return found;
  };
}

// How many times the whole graph runs (LayerCount), or 0 (once, names as
// written) for a graph with a repeat node, whose blocks are expanded into
// `def` instead.
Result<int64_t> StackLayers(const GraphWeights& weights,
                            const GraphOptions& options,
                            const std::string& source, graph::GraphDef& def) {
  ATTN_ASSIGN_OR_RETURN(const int64_t layers,
                        LayerCount(weights.file(), options));
  if (!graph::HasRepeat(def)) return layers;
  Result<graph::GraphDef> expanded =
      graph::ExpandRepeats(def, CountLayersIn(weights, options));
  if (!expanded.ok()) {
    return Status(expanded.status().code(),
                  source + ": " + expanded.status().message());
  }
  def = std::move(expanded).value();
  return 0;
}

// Refuses a table (embedding, position embedding) of the last bound layer
// whose rows differ from layer 0's: a session checks ids and positions
// against layer 0's alone.
Status SameTablesAsLayerZero(const graph::LoadedGraph& loaded,
                             const std::string& where) {
  for (size_t n = 0; n < loaded.def.nodes.size(); ++n) {
    const int64_t rows = loaded.layer.back()[n].rows;
    const int64_t first = loaded.layer.front()[n].rows;
    if (rows != first) {
      return InvalidArgument(where + loaded.def.nodes[n].Describe() +
                             ": its table has " + std::to_string(rows) +
                             " rows, layer 0's " + std::to_string(first) +
                             ", want the same in every layer");
    }
  }
  return {};
}

// Binds and loads every layer's weights into `loaded.layer` and the widths
// of the program's tensors into `loaded.widths`. Grown layer by layer, so a
// count the file cannot back (n_layers of 50,000,000) fails at its first
// missing weight, having allocated nothing more.
Status BindLayers(const GraphWeights& weights, const GraphOptions& options,
                  int64_t layers, const std::string& source,
                  graph::LoadedGraph& loaded) {
  // One block saved on its own keeps the names as written; a whole-model
  // layout's blocks always have the book's prefix.
  const bool prefixed =
      layers > 1 ||
      (layers == 1 && (weights.layout_layers() ||
                       HasTensorUnder(weights.file(), "trf_blocks.0.")));
  Binder binder(weights, options, loaded.num_threads, loaded.tensors);
  const graph::GraphDef& def = loaded.def;
  for (int64_t l = 0; l < std::max<int64_t>(layers, 1); ++l) {
    const std::string prefix =
        prefixed ? "trf_blocks." + std::to_string(l) + "." : "";
    const std::string where = layers > 1
                                  ? "layer " + std::to_string(l) + " of " +
                                        std::to_string(layers) + ": "
                                  : "";
    loaded.layer.emplace_back();
    if (Status s = binder.Bind(def, prefix, loaded.layer.back()); !s.ok()) {
      return Status(s.code(), source + ": " + where + s.message());
    }
    ATTN_RETURN_IF_ERROR(SameTablesAsLayerZero(loaded, source + ": " + where));
    const int64_t in = binder.widths()[def.input];
    const int64_t out = binder.widths()[def.output];
    if (l == 0 && layers > 1 && in != out) {
      return InvalidArgument(
          source + ": graph input " + Quoted(def.input) + " has width " +
          std::to_string(in) + " but output " + Quoted(def.output) +
          " has width " + std::to_string(out) +
          ", want equal widths to stack " + std::to_string(layers) + " layers");
    }
  }
  for (const std::string& t : loaded.program.tensors) {
    loaded.widths.push_back(binder.widths()[t]);
  }
  return {};
}

// Every layer's linears, their weights packed once for a run of
// kMatMulPackedRows rows, with `held` bytes (the weights as loaded) already
// held: all packed copies are checked against the cap before any is made.
Status PackLinearWeights(graph::LoadedGraph& m, uint64_t held,
                         const std::string& source) {
  const graph::Program& p = m.program;
  const kernels::DataType type = ops::ToDataType(m.dtype);
  uint64_t packed = 0;
  for (const graph::Step& step : p.steps) {
    if (step.op != Op::kLinear) continue;
    const graph::NodeWeights& w = m.layer[0][step.node];
    ATTN_ASSIGN_OR_RETURN(
        const uint64_t bytes,
        ops::Linear::PackedBytes(m.widths[step.dst], m.widths[step.src],
                                 w.bias != nullptr, {type, 0}));
    packed = AddSat(packed, MulSat(bytes, m.layer.size()));
  }
  ATTN_RETURN_IF_ERROR(CheckMemory("the packed weights of " + Quoted(source),
                                   AddSat(held, packed), m.max_memory_bytes));
  for (const graph::Step& step : p.steps) {
    if (step.op != Op::kLinear) continue;
    const int64_t in = m.widths[step.src], out = m.widths[step.dst];
    for (auto& layer : m.layer) {
      graph::NodeWeights& w = layer[step.node];
      ops::Weight bias;
      if (w.bias) bias = ops::Weight::Borrow(w.bias, out, 1);
      Result<ops::Linear> linear = ops::Linear::Create(
          ops::Weight::Borrow(w.weight, out, in), std::move(bias),
          ops::LinearLayouts{{{type, 0}}, std::nullopt}, m.num_threads);
      if (!linear.ok()) {
        return Status(linear.status().code(),
                      m.def.nodes[step.node].Describe() + ": " +
                          linear.status().message());
      }
      w.linear = std::move(linear).value();
    }
  }
  return {};
}

}  // namespace

namespace graph {

std::vector<kernels::DataType> TensorTypes(const Program& program,
                                           DType dtype) {
  const bool low = dtype == DType::kBF16;
  std::vector<bool> bf16(program.tensors.size(), false);
  // A linear's output, unless it is a residual sum: that stays fp32, as
  // PyTorch's x + linear(h), and the matmul adds the residual in dst's type.
  for (const Step& step : program.steps) {
    bf16[step.dst] = low && step.op == Op::kLinear && step.src2 < 0;
  }
  for (const Step& step : program.steps) {
    if (step.op != Op::kLinear) bf16[step.src] = false;
    if (step.src2 >= 0) bf16[step.src2] = false;
  }
  bf16[program.output] = false;
  std::vector<kernels::DataType> types;
  for (const bool b : bf16) {
    types.push_back(b ? kernels::DataType::kBF16 : kernels::DataType::kF32);
  }
  return types;
}

BoundProgram Bind(const LoadedGraph& m) {
  BoundProgram bound{&m.def, &m.program, m.widths, m.types, {}};
  bound.layers.resize(m.layer.size());
  for (size_t l = 0; l < m.layer.size(); ++l) {
    for (size_t n = 0; n < m.def.nodes.size(); ++n) {
      const NodeWeights& w = m.layer[l][n];
      const bool linear = m.def.nodes[n].op == Op::kLinear;
      bound.layers[l].push_back(
          linear ? NodeBinding{&w.linear, nullptr, nullptr, 0}
                 : NodeBinding{nullptr, w.weight, w.bias, w.rows});
    }
  }
  return bound;
}

}  // namespace graph

GraphModel::GraphModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
const graph::LoadedGraph& ModelAccess::Of(const GraphModel& model) {
  return *model.impl_;
}
GraphModel::~GraphModel() = default;

Result<std::shared_ptr<const GraphModel>> GraphModel::Load(
    const std::string& graph_path, const std::string& weights_path,
    const GraphOptions& options) {
  ATTN_ASSIGN_OR_RETURN(const std::string text,
                        graph::ReadGraphFile(graph_path));
  return FromJson(text, weights_path, options, graph_path);
}

Result<std::shared_ptr<const GraphModel>> GraphModel::FromJson(
    const std::string& json, const std::string& weights_path,
    const GraphOptions& options, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  ATTN_ASSIGN_OR_RETURN(impl->def, graph::ParseGraph(json, source));
  ATTN_RETURN_IF_ERROR(ResolveRunOptions(options, *impl));
  ATTN_ASSIGN_OR_RETURN(
      const GraphWeights weights,
      GraphWeights::Open(weights_path, options, GraphDims(impl->def)));
  ATTN_ASSIGN_OR_RETURN(
      const uint64_t weight_bytes,
      CheckWeightsFit(weights.file(), impl->max_memory_bytes));
  ATTN_ASSIGN_OR_RETURN(const int64_t layers,
                        StackLayers(weights, options, source, impl->def));
  impl->program = graph::Lower(impl->def);
  impl->token_input =
      std::any_of(impl->def.nodes.begin(), impl->def.nodes.end(),
                  [](const Node& node) { return node.op == Op::kEmbedding; });
  if (impl->token_input && layers > 1) {
    return InvalidArgument(source + ": layers is " + std::to_string(layers) +
                           ", but the graph's input is token ids, want its "
                           "blocks in a repeat node");
  }
  ATTN_RETURN_IF_ERROR(BindLayers(weights, options, layers, source, *impl));
  for (const Status& s :
       {weights.CheckReadTheModel(), weights.CheckNormEps(impl->def)}) {
    if (!s.ok()) return Status(s.code(), source + ": " + s.message());
  }
  impl->types = graph::TensorTypes(impl->program, impl->dtype);
  impl->bound = Bind(*impl);
  {
    const ThreadScope threads(impl->num_threads);
    ATTN_RETURN_IF_ERROR(PackLinearWeights(
        *impl, AddSat(weight_bytes, MhaPackedBytes(*impl)), weights_path));
  }
  return std::shared_ptr<const GraphModel>(new GraphModel(std::move(impl)));
}

int64_t GraphModel::input_width() const {
  return impl_->widths[impl_->program.input];
}
int64_t GraphModel::output_width() const {
  return impl_->widths[impl_->program.output];
}
int64_t GraphModel::layers() const {
  return static_cast<int64_t>(impl_->layer.size());
}
DType GraphModel::dtype() const { return impl_->dtype; }
bool GraphModel::token_input() const { return impl_->token_input; }
int GraphModel::num_threads() const { return impl_->num_threads; }

uint64_t GraphModel::memory_bytes() const {
  const graph::LoadedGraph& g = *impl_;
  uint64_t bytes = 0;
  for (const auto& [name, values] : g.tensors) {
    bytes = AddSat(bytes, uint64_t{values.size()} * sizeof(float));
  }
  for (const std::vector<graph::NodeWeights>& layer : g.layer) {
    for (const graph::NodeWeights& node : layer) {
      bytes = AddSat(bytes, node.linear.bytes());
      if (node.mha) bytes = AddSat(bytes, node.mha->memory_bytes());
    }
  }
  return bytes;
}

double GraphModel::flops(int64_t batch, int64_t seq_len) const {
  const graph::LoadedGraph& g = *impl_;
  const double rows = double(batch) * double(seq_len);
  double flops = 0;
  for (const std::vector<graph::NodeWeights>& layer : g.layer) {
    for (const graph::Step& step : g.program.steps) {
      if (step.op == graph::Op::kLinear) {
        flops += 2.0 * rows * double(g.widths[size_t(step.src)]) *
                 double(g.widths[size_t(step.dst)]);
      } else if (step.op == graph::Op::kMha) {
        flops += AttentionFlops(layer[step.node].mha->config(), batch, seq_len);
      }
    }
  }
  return flops;
}

}  // namespace attn
