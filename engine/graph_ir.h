// The graph runner's IR: the JSON format parsed and validated into a GraphDef
// (nodes in topological order), then lowered into a Program of Steps with the
// cheap fusions applied. Shapes and weights are bound later, in graph.cc.
#ifndef ATTN_ENGINE_GRAPH_IR_H_
#define ATTN_ENGINE_GRAPH_IR_H_

#include <cstddef>
#include <cstdint>
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
  kDropout
};
const char* OpName(Op op);

struct Node {
  std::string name;  // from the file, else "<op>_<index>"
  Op op = Op::kAdd;
  std::vector<std::string> inputs, outputs;
  // Role (the op's own state_dict name, e.g. "weight") -> name in the file.
  std::vector<std::pair<std::string, std::string>> weights;
  int64_t num_heads = 0, context_length = 0;     // mha; 0 = not given
  int64_t num_kv_heads = 0, sliding_window = 0;  // mha; 0 = not given
  RopeConfig rope;                               // mha; theta 0 = not given
  float eps = 1e-5f;                             // layernorm, rmsnorm

  // The file's name for `role`, or null when the node does not name one.
  const std::string* Weight(const std::string& role) const;
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
// before any DOM is built. `source` prefixes every message.
Result<GraphDef> ParseGraph(const std::string& json, const std::string& source);

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

#endif  // ATTN_ENGINE_GRAPH_IR_H_
