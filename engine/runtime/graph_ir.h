// The graph runner's IR: the JSON format parsed and validated into a GraphDef
// (nodes in topological order), its repeat nodes expanded into their blocks
// once the weights file is known, then lowered into a Program of Steps with
// the cheap fusions applied. Shapes and weights are bound in graph_model.cc.
#ifndef ATTN_ENGINE_RUNTIME_GRAPH_IR_H_
#define ATTN_ENGINE_RUNTIME_GRAPH_IR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/status.hpp"

namespace attn::graph {

enum class Op {
  kLinear,
  kMha,
  kLayerNorm,
  kRmsNorm,
  kGelu,
  kSilu,
  kAdd,
  kMul,
  kSwiGlu,  // [R, 2n] -> [R, n]: silu(first half) * second half (Phi-3)
  kDropout,
  kEmbedding,          // token ids [b, T] -> rows of `weight` [vocab, e]
  kPositionEmbedding,  // + row p of `weight` [context, e] at position p
  kRepeat              // a block graph, once per layer; expanded at load
};
const char* OpName(Op op);

struct GraphDef;

struct Node {
  std::string name;  // from the file, else "<op>_<index>"
  Op op = Op::kAdd;
  std::vector<std::string> inputs, outputs;
  // Role (the op's own state_dict name, e.g. "weight") -> names in the file:
  // the first that the file holds is used (a tied head: ["out_head.weight",
  // "tok_emb.weight"]).
  std::vector<std::pair<std::string, std::vector<std::string>>> weights;
  int64_t num_heads = 0, context_length = 0;     // mha; 0 = not given
  int64_t num_kv_heads = 0, sliding_window = 0;  // mha; 0 = not given
  RopeConfig rope;                               // mha; theta 0 = not given
  float eps = 1e-5f;                             // layernorm, rmsnorm
  float scale = 1.0f;  // embedding: rows multiplied by it (Gemma's)
  // repeat: the block, its path as written, the weight-name prefix of layer
  // i ("{i}" stands for i) and the layer count (0 = from the file).
  std::shared_ptr<const GraphDef> block;
  std::string block_path, layer_prefix;
  int64_t count = 0;

  // The file's candidate names for `role`, or null when the node names none.
  const std::vector<std::string>* Weight(const std::string& role) const;
  // "node 'ff_out' (linear)", for messages.
  std::string Describe() const;
};

struct GraphDef {
  std::string input, output;
  std::vector<Node> nodes;  // topological order
};

// A graph file's text, refused unless a regular file of at most 64 MiB: a
// FIFO is not waited on, /dev/zero not read until memory runs out.
Result<std::string> ReadGraphFile(const std::string& path);

// Parses and validates a graph: known fields, ops, attributes and weight
// roles; every tensor defined exactly once; no cycle; every node output
// used; at least one node. Nesting depth and duplicate keys are checked
// before any DOM is built. `source` prefixes every message, and a repeat
// node's relative block path is taken from `source`'s directory. An
// embedding reads the graph input, and nothing else does.
Result<GraphDef> ParseGraph(const std::string& json, const std::string& source);

// Whether `def` has a repeat node.
bool HasRepeat(const GraphDef& def);

// `layer_prefix` with "{i}" replaced by `layer`.
std::string LayerPrefix(const Node& repeat, int64_t layer);

// Replaces each repeat node by `count(node)` copies of its block: layer i's
// nodes and tensors are named, and its weight names prefixed, by
// LayerPrefix(node, i); layer 0 reads the node's input, the last layer
// writes its output. Checks the result as ParseGraph does.
using RepeatCount = std::function<Result<int64_t>(const Node& repeat)>;
Result<GraphDef> ExpandRepeats(const GraphDef& def, const RepeatCount& count);

// One kernel call of the lowered graph. Tensors are ids into
// Program::tensors.
struct Step {
  Op op = Op::kAdd;  // never kDropout: dropouts become aliases
  size_t node = 0;   // GraphDef::nodes index: weights and attributes
  int src = -1;
  int src2 = -1;  // add: the second operand; linear: a fused residual
  int dst = -1;
  bool gelu = false;  // linear: GELU fused after the bias
};

struct Program {
  std::vector<std::string> tensors;
  int input = -1, output = -1;
  std::vector<Step> steps;  // in execution order
};

// Lowers `def`: dropouts alias their input; a GELU whose input is a linear's
// only use becomes that linear's post-op; so does a residual add of a
// linear's only use (the add's other operand is read where it lives).
Program Lower(const GraphDef& def);

}  // namespace attn::graph

#endif  // ATTN_ENGINE_RUNTIME_GRAPH_IR_H_
