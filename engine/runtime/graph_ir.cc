// Parsing, validation and lowering of the graph JSON (see graph_ir.h and the
// "Graphs" section of engine/README.md for the format).
#include "engine/runtime/graph_ir.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "engine/io/json_limits.h"
#include "nlohmann/json.hpp"

namespace attn::graph {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxGraphFileBytes = uint64_t{64} << 20;
// A graph is five levels deep (graph, nodes, node, weights, value); this
// leaves room and bounds a hostile file.
constexpr size_t kMaxGraphDepth = 32;
// Nodes of a graph, repeats expanded: a model of 80 Llama blocks has about
// a thousand. Planning a run's memory compares each buffer with the ones
// placed before it, so this also bounds that (240,000 nodes took 30 s).
constexpr size_t kMaxGraphNodes = 65536;

struct OpSpec {
  Op op;
  const char* name;
  size_t num_inputs;
  std::vector<std::string> required_roles, optional_roles, attributes;
};

const std::vector<OpSpec>& Specs() {
  static const std::vector<OpSpec> specs = {
      {Op::kLinear, "linear", 1, {"weight"}, {"bias"}, {}},
      {Op::kMha,
       "mha",
       1,
       {"W_query.weight", "W_key.weight", "W_value.weight", "out_proj.weight"},
       {"W_query.bias", "W_key.bias", "W_value.bias", "out_proj.bias", "mask"},
       {"num_heads", "context_length", "dropout", "num_kv_heads",
        "sliding_window", "rope_theta", "rope_factor", "rope_low_freq_factor",
        "rope_high_freq_factor", "rope_original_context_length"}},
      {Op::kLayerNorm, "layernorm", 1, {"scale", "shift"}, {}, {"eps"}},
      {Op::kRmsNorm, "rmsnorm", 1, {"weight"}, {}, {"eps"}},
      {Op::kGelu, "gelu", 1, {}, {}, {"approximate"}},
      {Op::kSilu, "silu", 1, {}, {}, {}},
      {Op::kAdd, "add", 2, {}, {}, {}},
      {Op::kMul, "mul", 2, {}, {}, {}},
      {Op::kSwiGlu, "swiglu", 1, {}, {}, {}},
      {Op::kDropout, "dropout", 1, {}, {}, {"p"}},
      {Op::kEmbedding, "embedding", 1, {"weight"}, {}, {}},
      {Op::kPositionEmbedding, "position_embedding", 1, {"weight"}, {}, {}},
      {Op::kRepeat, "repeat", 1, {}, {}, {"graph", "prefix", "count"}},
  };
  return specs;
}

std::string Join(const std::vector<std::string>& items) {
  if (items.empty()) return "none";
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The JSON value's text, for "got ..." in messages, cut to suit one line.
std::string Got(const json& value) {
  constexpr size_t kMax = 60;
  const std::string text = value.dump();
  return text.size() <= kMax ? text : text.substr(0, kMax) + "...";
}

// Reads a list of tensor names (a non-empty array of non-empty strings).
Status ReadNames(const json& value, const std::string& what,
                 std::vector<std::string>& names) {
  if (!value.is_array()) {
    return InvalidArgument(what + " is " + Got(value) +
                           ", want an array of tensor names");
  }
  for (const json& item : value) {
    if (!item.is_string() || item.get<std::string>().empty()) {
      return InvalidArgument(what + " holds " + Got(item) +
                             ", want non-empty tensor names");
    }
    names.push_back(item.get<std::string>());
  }
  return {};
}

Result<int64_t> PositiveInt(const json& value, const std::string& what) {
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    return InvalidArgument(what + " is " + Got(value) +
                           ", want a positive integer");
  }
  return value.get<int64_t>();
}

Status Probability(const json& value, const std::string& what) {
  if (!value.is_number() || !(value.get<double>() >= 0.0) ||
      !(value.get<double>() < 1.0)) {
    return InvalidArgument(what + " is " + Got(value) +
                           ", want a probability in [0, 1)");
  }
  return {};
}

Status ParseAttribute(Node& node, const std::string& key, const json& value) {
  const std::string what = node.Describe() + ": attribute " + Quoted(key);
  const std::map<std::string, int64_t*> counts = {
      {"num_heads", &node.num_heads},
      {"context_length", &node.context_length},
      {"num_kv_heads", &node.num_kv_heads},
      {"sliding_window", &node.sliding_window},
      {"rope_original_context_length", &node.rope.original_context_length},
      {"count", &node.count}};
  const std::map<std::string, std::string*> texts = {
      {"graph", &node.block_path}, {"prefix", &node.layer_prefix}};
  const std::map<std::string, double*> numbers = {
      {"rope_theta", &node.rope.theta},
      {"rope_factor", &node.rope.factor},
      {"rope_low_freq_factor", &node.rope.low_freq_factor},
      {"rope_high_freq_factor", &node.rope.high_freq_factor}};
  if (counts.count(key)) {
    ATTN_ASSIGN_OR_RETURN(*counts.at(key), PositiveInt(value, what));
  } else if (texts.count(key)) {
    if (!value.is_string() || value.get<std::string>().empty()) {
      return InvalidArgument(what + " is " + Got(value) +
                             ", want a non-empty string");
    }
    *texts.at(key) = value.get<std::string>();
  } else if (numbers.count(key)) {
    if (!value.is_number() || !(value.get<double>() > 0.0)) {
      return InvalidArgument(what + " is " + Got(value) +
                             ", want a positive number");
    }
    *numbers.at(key) = value.get<double>();
  } else if (key == "eps") {
    // As a float: 1e300 would become inf, 1e-50 zero.
    const float eps = value.is_number() ? value.get<float>() : 0.0f;
    if (!(eps > 0.0f) || !std::isfinite(eps)) {
      return InvalidArgument(what + " is " + Got(value) +
                             ", want a positive number within float's range");
    }
    node.eps = eps;
  } else if (key == "approximate") {
    if (value != "tanh") {
      return InvalidArgument(what + " is " + Got(value) +
                             ", want \"tanh\" (the book's GELU)");
    }
  } else {  // "dropout" of mha, "p" of dropout: identity at inference
    return Probability(value, what);
  }
  return {};
}

// The op of node `where`, after checking it has only known fields.
Result<const OpSpec*> ReadOp(const json& j, const std::string& where) {
  if (!j.is_object()) {
    return InvalidArgument(where + " is " + Got(j) + ", want an object");
  }
  for (const auto& [key, value] : j.items()) {
    static const std::set<std::string> kKeys = {
        "op", "name", "inputs", "outputs", "weights", "attributes"};
    if (!kKeys.count(key)) {
      return InvalidArgument(where + ": unknown field " + Quoted(key) +
                             ", want op, name, inputs, outputs, weights, "
                             "attributes");
    }
  }
  if (!j.contains("op") || !j["op"].is_string()) {
    return InvalidArgument(where + ": field 'op' is missing or not a string");
  }
  const std::string op = j["op"];
  const auto spec = std::find_if(Specs().begin(), Specs().end(),
                                 [&](const OpSpec& s) { return op == s.name; });
  if (spec == Specs().end()) {
    std::vector<std::string> known;
    for (const OpSpec& s : Specs()) known.push_back(s.name);
    return InvalidArgument(where + ": unknown op " + Quoted(op) +
                           ", want one of " + Join(known));
  }
  return &*spec;
}

// The node's name (default "<op>_<index>"), inputs and outputs.
Status ReadTensors(const json& j, const OpSpec& spec, size_t index,
                   const std::string& where, Node& node) {
  node.name = std::string(spec.name) + "_" + std::to_string(index);
  if (j.contains("name")) {
    if (!j["name"].is_string() || j["name"].get<std::string>().empty()) {
      return InvalidArgument(where + ": name is " + Got(j["name"]) +
                             ", want a non-empty string");
    }
    node.name = j["name"];
  }
  for (const char* field : {"inputs", "outputs"}) {
    if (!j.contains(field)) {
      return InvalidArgument(node.Describe() + ": field " + Quoted(field) +
                             " is missing");
    }
    auto& names = field[0] == 'i' ? node.inputs : node.outputs;
    ATTN_RETURN_IF_ERROR(
        ReadNames(j[field], node.Describe() + ": " + field, names));
  }
  if (node.inputs.size() != spec.num_inputs) {
    return InvalidArgument(node.Describe() + ": has " +
                           std::to_string(node.inputs.size()) +
                           " inputs, want " + std::to_string(spec.num_inputs));
  }
  if (node.outputs.size() != 1) {
    return InvalidArgument(node.Describe() + ": has " +
                           std::to_string(node.outputs.size()) +
                           " outputs, want 1");
  }
  return {};
}

// The node's weights (role: tensor name), every required role named.
Status ReadWeights(const json& j, const OpSpec& spec, Node& node) {
  const json weights = j.value("weights", json::object());
  if (!weights.is_object()) {
    return InvalidArgument(node.Describe() + ": weights is " + Got(weights) +
                           ", want an object of role: tensor name");
  }
  for (const auto& [role, name] : weights.items()) {
    const bool known = std::count(spec.required_roles.begin(),
                                  spec.required_roles.end(), role) ||
                       std::count(spec.optional_roles.begin(),
                                  spec.optional_roles.end(), role);
    if (!known) {
      std::vector<std::string> roles = spec.required_roles;
      roles.insert(roles.end(), spec.optional_roles.begin(),
                   spec.optional_roles.end());
      return InvalidArgument(node.Describe() + ": unknown weight " +
                             Quoted(role) + ", want " + Join(roles));
    }
    std::vector<std::string> names;
    const std::string what = node.Describe() + ": weight " + Quoted(role);
    if (name.is_string() && !name.get<std::string>().empty()) {
      names.push_back(name.get<std::string>());
    } else if (!name.is_array() || name.empty() ||
               !ReadNames(name, what, names).ok()) {
      return InvalidArgument(what + " is " + Got(name) +
                             ", want a tensor name or a non-empty array of "
                             "them (the first in the file is used)");
    }
    node.weights.emplace_back(role, std::move(names));
  }
  for (const std::string& role : spec.required_roles) {
    if (!node.Weight(role)) {
      return InvalidArgument(node.Describe() + ": weight " + Quoted(role) +
                             " is not named, want it in 'weights'");
    }
  }
  return {};
}

Status ReadAttributes(const json& j, const OpSpec& spec, Node& node) {
  const json attributes = j.value("attributes", json::object());
  if (!attributes.is_object()) {
    return InvalidArgument(node.Describe() + ": attributes is " +
                           Got(attributes) + ", want an object");
  }
  for (const auto& [key, value] : attributes.items()) {
    if (!std::count(spec.attributes.begin(), spec.attributes.end(), key)) {
      return InvalidArgument(node.Describe() + ": unknown attribute " +
                             Quoted(key) + ", want " + Join(spec.attributes));
    }
    ATTN_RETURN_IF_ERROR(ParseAttribute(node, key, value));
  }
  return {};
}

Result<GraphDef> ParseGraphIn(const std::string& text,
                              const std::string& source, bool in_block);

// A repeat node's block: its graph file (relative to `source`'s directory)
// parsed, and its layer prefix checked.
Status ReadBlock(const std::string& source, Node& node) {
  const std::pair<const char*, const std::string*> required[] = {
      {"graph", &node.block_path}, {"prefix", &node.layer_prefix}};
  for (const auto& [key, value] : required) {
    if (value->empty()) {
      return InvalidArgument(node.Describe() + ": attribute " + Quoted(key) +
                             " is missing, want the block's graph file and "
                             "its weights' prefix, e.g. \"trf_blocks.{i}.\"");
    }
  }
  if (node.layer_prefix.find("{i}") == std::string::npos) {
    return InvalidArgument(node.Describe() + ": attribute 'prefix' is \"" +
                           node.layer_prefix +
                           "\", want it to hold {i}, the layer's index");
  }
  namespace fs = std::filesystem;
  const fs::path path =
      fs::path(source).parent_path() / fs::path(node.block_path);
  ATTN_ASSIGN_OR_RETURN(const std::string text, ReadGraphFile(path.string()));
  ATTN_ASSIGN_OR_RETURN(GraphDef block,
                        ParseGraphIn(text, path.string(), /*in_block=*/true));
  if (block.input == block.output) {
    return InvalidArgument(node.Describe() + ": block " +
                           Quoted(path.string()) +
                           " has its input as its output, want a new tensor");
  }
  node.block = std::make_shared<const GraphDef>(std::move(block));
  return {};
}

// `in_block`: the node is a repeat's block's, which may not repeat again
// (refused before its file is read: a file including itself would recurse
// until the stack ran out).
Result<Node> ParseNode(const json& j, size_t index, const std::string& source,
                       bool in_block) {
  const std::string where = "node " + std::to_string(index);
  ATTN_ASSIGN_OR_RETURN(const OpSpec* spec, ReadOp(j, where));
  Node node;
  node.op = spec->op;
  ATTN_RETURN_IF_ERROR(ReadTensors(j, *spec, index, where, node));
  ATTN_RETURN_IF_ERROR(ReadWeights(j, *spec, node));
  ATTN_RETURN_IF_ERROR(ReadAttributes(j, *spec, node));
  if (node.op == Op::kRepeat) {
    if (in_block) {
      return InvalidArgument(node.Describe() + ": the block " + Quoted(source) +
                             " has a repeat node, want a block without one");
    }
    ATTN_RETURN_IF_ERROR(ReadBlock(source, node));
  }
  return node;
}

// Token ids exist only as the graph input: an embedding reads it, and only
// embeddings do when one does.
Status CheckTokenInput(const std::string& input,
                       const std::vector<Node>& nodes) {
  const auto embedding = std::find_if(nodes.begin(), nodes.end(), [](auto& n) {
    return n.op == Op::kEmbedding;
  });
  if (embedding == nodes.end()) return {};
  for (const Node& node : nodes) {
    const bool reads_input =
        node.inputs[0] == input ||
        (node.inputs.size() == 2 && node.inputs[1] == input);
    if (node.op == Op::kEmbedding && node.inputs[0] != input) {
      return InvalidArgument(node.Describe() + ": input " +
                             Quoted(node.inputs[0]) +
                             " is not the graph input " + Quoted(input) +
                             ", want the token ids there");
    }
    if (node.op != Op::kEmbedding && reads_input) {
      return InvalidArgument(node.Describe() + ": reads the graph input " +
                             Quoted(input) + ", which holds token ids for " +
                             embedding->Describe() +
                             ", want an embedding's output");
    }
  }
  return {};
}

// Kahn's algorithm, stable in file order: of the nodes whose inputs are all
// ready, the first in the file runs next. `producer` maps each node output
// to its node; every input is the graph input or in it.
Status SortByInputs(const std::string& input,
                    const std::map<std::string, size_t>& producer,
                    std::vector<Node>& nodes) {
  std::vector<size_t> waiting(nodes.size(), 0);
  std::vector<std::vector<size_t>> readers(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& t : nodes[i].inputs) {
      if (t == input) continue;
      ++waiting[i];
      readers[producer.at(t)].push_back(i);
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (waiting[i] == 0) ready.push(i);
  }
  std::vector<Node> ordered;
  while (!ready.empty()) {
    const size_t next = ready.top();
    ready.pop();
    for (const size_t reader : readers[next]) {
      if (--waiting[reader] == 0) ready.push(reader);
    }
    ordered.push_back(std::move(nodes[next]));
  }
  if (ordered.size() < nodes.size()) {
    std::vector<std::string> stuck;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (waiting[i] > 0) stuck.push_back("'" + nodes[i].name + "'");
    }
    return InvalidArgument("the graph has a cycle through nodes " +
                           Join(stuck) + ", want a DAG");
  }
  nodes = std::move(ordered);
  return {};
}

// Checks every tensor's origin and use, then orders `nodes` so that each
// comes after the producers of its inputs.
Status Order(const std::string& input, const std::string& output,
             std::vector<Node>& nodes) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string& t = nodes[i].outputs[0];
    if (t == input) {
      return InvalidArgument(nodes[i].Describe() + ": writes the graph input " +
                             Quoted(t) + ", want a new tensor name");
    }
    if (const auto [it, fresh] = producer.emplace(t, i); !fresh) {
      return InvalidArgument("tensor " + Quoted(t) + " is written by " +
                             nodes[it->second].Describe() + " and " +
                             nodes[i].Describe() + ", want one producer");
    }
  }
  std::map<std::string, size_t> uses;
  for (const Node& node : nodes) {
    for (const std::string& t : node.inputs) {
      if (t != input && !producer.count(t)) {
        return InvalidArgument(node.Describe() + ": input " + Quoted(t) +
                               " is undefined, want the graph input or "
                               "another node's output");
      }
      ++uses[t];
    }
  }
  if (output != input && !producer.count(output)) {
    return InvalidArgument("graph output " + Quoted(output) +
                           " is undefined, want a node's output");
  }
  if (!uses.count(input) && output != input) {
    return InvalidArgument("graph input " + Quoted(input) + " is never used");
  }
  for (const Node& node : nodes) {
    if (!uses.count(node.outputs[0]) && node.outputs[0] != output) {
      return InvalidArgument(node.Describe() + ": output " +
                             Quoted(node.outputs[0]) +
                             " is never used, want it read by a node or "
                             "made the graph output");
    }
  }
  ATTN_RETURN_IF_ERROR(CheckTokenInput(input, nodes));
  return SortByInputs(input, producer, nodes);
}

// A GELU whose input is a linear's only use becomes that linear's post-op;
// so does a residual add of a linear's only use.
void FuseIntoLinears(Program& program) {
  // Uses of each tensor; the graph output counts as one.
  std::vector<int> uses(program.tensors.size(), 0);
  for (const Step& s : program.steps) {
    ++uses[s.src];
    if (s.src2 >= 0) ++uses[s.src2];
  }
  ++uses[program.output];
  // The step writing each tensor (-1: the graph input). Each tensor has one
  // writer, and a fusion keeps it: the fused step takes the consumer's place.
  std::vector<int> writer(program.tensors.size(), -1);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    writer[program.steps[i].dst] = static_cast<int>(i);
  }
  std::vector<bool> gone(program.steps.size(), false);
  auto linear_producing = [&](int tensor) -> Step* {
    const int i = writer[tensor];
    if (i < 0 || gone[i]) return nullptr;
    Step& s = program.steps[i];
    const bool fusable = s.op == Op::kLinear && s.src2 < 0 && uses[tensor] == 1;
    return fusable ? &s : nullptr;
  };
  // Fuse into the consumer's place: its other operand may be defined after
  // the linear, and nothing else reads the linear's output.
  for (size_t i = 0; i < program.steps.size(); ++i) {
    Step& s = program.steps[i];
    Step* linear = nullptr;
    int residual = -1;
    if (s.op == Op::kGelu) {
      linear = linear_producing(s.src);
      if (linear && linear->gelu) linear = nullptr;
    } else if (s.op == Op::kAdd) {
      if ((linear = linear_producing(s.src2))) {
        residual = s.src;
      } else if ((linear = linear_producing(s.src))) {
        residual = s.src2;
      }
    }
    if (!linear) continue;
    linear->gelu = linear->gelu || s.op == Op::kGelu;
    linear->src2 = residual;
    linear->dst = s.dst;
    gone[static_cast<size_t>(linear - program.steps.data())] = true;
    s = *linear;
  }
  std::vector<Step> fused;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    if (!gone[i]) fused.push_back(program.steps[i]);
  }
  program.steps = std::move(fused);
}

}  // namespace

const char* OpName(Op op) {
  for (const OpSpec& s : Specs()) {
    if (s.op == op) return s.name;
  }
  return "?";
}

const std::vector<std::string>* Node::Weight(const std::string& role) const {
  for (const auto& [r, name] : weights) {
    if (r == role) return &name;
  }
  return nullptr;
}

std::string Node::Describe() const {
  return "node " + Quoted(name) + " (" + OpName(op) + ")";
}

Result<std::string> ReadGraphFile(const std::string& path) {
  return ReadRegularFile(path, kMaxGraphFileBytes,
                         "graph file " + Quoted(path));
}

namespace {

Result<GraphDef> ParseGraphIn(const std::string& text,
                              const std::string& source, bool in_block) {
  auto fail = [&](const Status& s) -> Status {
    return InvalidArgument(source + ": " + s.message());
  };
  Result<json> parsed = ParseCheckedJson(text, kMaxGraphDepth, "the graph");
  if (!parsed.ok()) {
    return Status(parsed.status().code(),
                  source + ": " + parsed.status().message());
  }
  json& j = *parsed;
  if (!j.is_object()) {
    return fail(InvalidArgument("top level is " + Got(j) + ", want an object"));
  }
  for (const auto& [key, value] : j.items()) {
    static const std::set<std::string> kKeys = {"name", "description", "inputs",
                                                "outputs", "nodes"};
    if (!kKeys.count(key)) {
      return fail(InvalidArgument("unknown field " + Quoted(key) +
                                  ", want name, description, inputs, "
                                  "outputs, nodes"));
    }
  }
  GraphDef def;
  for (const char* field : {"inputs", "outputs"}) {
    std::vector<std::string> names;
    if (!j.contains(field)) {
      return fail(
          InvalidArgument(std::string("field '") + field + "' is missing"));
    }
    if (Status s = ReadNames(j[field], field, names); !s.ok()) return fail(s);
    if (names.size() != 1) {
      return fail(InvalidArgument(std::string(field) + " has " +
                                  std::to_string(names.size()) +
                                  " tensors, want exactly 1"));
    }
    (field[0] == 'i' ? def.input : def.output) = names[0];
  }
  if (!j.contains("nodes") || !j["nodes"].is_array()) {
    return fail(InvalidArgument("field 'nodes' is missing or not an array"));
  }
  if (j["nodes"].empty()) {
    // Nothing would fix the width of the input.
    return fail(
        InvalidArgument("field 'nodes' is empty, want at least one node"));
  }
  if (j["nodes"].size() > kMaxGraphNodes) {
    return fail(InvalidArgument(
        "field 'nodes' has " + std::to_string(j["nodes"].size()) +
        " nodes, want at most " + std::to_string(kMaxGraphNodes)));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < j["nodes"].size(); ++i) {
    Result<Node> node = ParseNode(j["nodes"][i], i, source, in_block);
    if (!node.ok()) return fail(node.status());
    if (!names.insert(node->name).second) {
      return fail(InvalidArgument("node name " + Quoted(node->name) +
                                  " is used twice, want unique names"));
    }
    def.nodes.push_back(std::move(node).value());
  }
  if (Status s = Order(def.input, def.output, def.nodes); !s.ok()) {
    return fail(s);
  }
  return def;
}

}  // namespace

Result<GraphDef> ParseGraph(const std::string& text,
                            const std::string& source) {
  return ParseGraphIn(text, source, /*in_block=*/false);
}

bool HasRepeat(const GraphDef& def) {
  return std::any_of(def.nodes.begin(), def.nodes.end(),
                     [](const Node& n) { return n.op == Op::kRepeat; });
}

std::string LayerPrefix(const Node& repeat, int64_t layer) {
  std::string prefix = repeat.layer_prefix;
  const size_t at = prefix.find("{i}");
  return prefix.replace(at, 3, std::to_string(layer));
}

// Layer `layer` of `count` of repeat node `node`, appended to `nodes`.
void AppendLayer(const Node& repeat, int64_t layer, int64_t count,
                 std::vector<Node>& nodes) {
  const GraphDef& block = *repeat.block;
  const std::string prefix = LayerPrefix(repeat, layer);
  auto rename = [&](const std::string& t) {
    if (t == block.input) {
      return layer == 0 ? repeat.inputs[0]
                        : LayerPrefix(repeat, layer - 1) + block.output;
    }
    if (t == block.output && layer + 1 == count) return repeat.outputs[0];
    return prefix + t;
  };
  for (Node node : block.nodes) {
    node.name = prefix + node.name;
    for (std::string& t : node.inputs) t = rename(t);
    node.outputs[0] = rename(node.outputs[0]);
    for (auto& [role, names] : node.weights) {
      for (std::string& name : names) name = prefix + name;
    }
    nodes.push_back(std::move(node));
  }
}

namespace {

// Every repeat node's layer count, checked with the plain nodes against
// kMaxGraphNodes before any block is copied.
Result<std::vector<int64_t>> CountRepeats(const GraphDef& def,
                                          const RepeatCount& count) {
  std::vector<int64_t> layers(def.nodes.size(), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < def.nodes.size(); ++i) {
    const Node& node = def.nodes[i];
    uint64_t nodes = 1;
    std::string what;
    if (node.op == Op::kRepeat) {
      ATTN_ASSIGN_OR_RETURN(layers[i], count(node));
      const uint64_t block = node.block->nodes.size();
      nodes = uint64_t(layers[i]) > kMaxGraphNodes / block
                  ? kMaxGraphNodes + 1
                  : uint64_t(layers[i]) * block;
      what = " (" + std::to_string(layers[i]) + " layers of " +
             std::to_string(block) + " nodes)";
    }
    total += nodes;
    if (total > kMaxGraphNodes) {
      return InvalidArgument(node.Describe() + what + ": the graph passes " +
                             std::to_string(kMaxGraphNodes) +
                             " nodes here with its repeat nodes expanded, "
                             "want at most that");
    }
  }
  return layers;
}

}  // namespace

Result<GraphDef> ExpandRepeats(const GraphDef& def, const RepeatCount& count) {
  ATTN_ASSIGN_OR_RETURN(const std::vector<int64_t> layers,
                        CountRepeats(def, count));
  GraphDef expanded;
  expanded.input = def.input;
  expanded.output = def.output;
  for (size_t i = 0; i < def.nodes.size(); ++i) {
    const Node& node = def.nodes[i];
    if (node.op != Op::kRepeat) {
      expanded.nodes.push_back(node);
      continue;
    }
    for (int64_t l = 0; l < layers[i]; ++l) {
      AppendLayer(node, l, layers[i], expanded.nodes);
    }
  }
  ATTN_RETURN_IF_ERROR(Order(expanded.input, expanded.output, expanded.nodes));
  return expanded;
}

Program Lower(const GraphDef& def) {
  // Dropout is the identity at inference: its output names its input.
  std::map<std::string, std::string> alias;
  auto resolve = [&](const std::string& t) {
    const auto it = alias.find(t);
    return it == alias.end() ? t : it->second;
  };
  Program program;
  std::map<std::string, int> ids;
  auto id = [&](const std::string& t) {
    const std::string name = resolve(t);
    const auto [it, fresh] = ids.emplace(name, ids.size());
    if (fresh) program.tensors.push_back(name);
    return it->second;
  };
  program.input = id(def.input);
  for (size_t i = 0; i < def.nodes.size(); ++i) {
    const Node& node = def.nodes[i];
    if (node.op == Op::kDropout) {
      alias[node.outputs[0]] = resolve(node.inputs[0]);
      continue;
    }
    Step step;
    step.op = node.op;
    step.node = i;
    step.src = id(node.inputs[0]);
    if (node.inputs.size() == 2) step.src2 = id(node.inputs[1]);
    step.dst = id(node.outputs[0]);
    program.steps.push_back(step);
  }
  program.output = id(def.output);

  FuseIntoLinears(program);
  return program;
}

}  // namespace attn::graph
