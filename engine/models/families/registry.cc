// The families a whole-model file may be. A file is the first family whose
// token embedding it holds (under one of the family's prefixes) and whose
// own test, if any, it passes; a new family is one file beside this one and
// a line here.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/models/lm_family.h"

namespace attn::lm {

NameMap ByRole(std::initializer_list<RoleName> names) {
  NameMap by_role{};
  for (const RoleName& n : names) {
    by_role[static_cast<size_t>(n.role)] = n.tensor;
  }
  return by_role;
}

graph::Node ProgramNode(
    const char* name, graph::Op op, std::vector<std::string> inputs,
    const char* output,
    std::vector<std::pair<std::string, std::vector<std::string>>> weights,
    float eps) {
  graph::Node node;
  node.name = name;
  node.op = op;
  node.inputs = std::move(inputs);
  node.outputs = {output};
  node.weights = std::move(weights);
  node.eps = eps;
  return node;
}

graph::GraphDef ProgramGraph(const char* input, const char* output,
                             std::vector<graph::Node> nodes) {
  graph::GraphDef def;
  def.input = input;
  def.output = output;
  def.nodes = std::move(nodes);
  return def;
}

Result<graph::GraphDef> RepeatBlock(graph::GraphDef model,
                                    graph::GraphDef block,
                                    const LmConfig& config) {
  const auto shared = std::make_shared<const graph::GraphDef>(std::move(block));
  for (graph::Node& node : model.nodes) {
    if (node.op != graph::Op::kRepeat) continue;
    node.block = shared;
    node.layer_prefix = "trf_blocks.{i}.";
  }
  return graph::ExpandRepeats(model,
                              [&config](const graph::Node&) -> Result<int64_t> {
                                return config.num_layers;
                              });
}

const std::vector<const Family*>& Families() {
  // The book's Llama after its GPTModel: both name the embedding tok_emb.
  static const std::vector<const Family*> families = {
      &BookGpt(),   &HfGpt2(),  &BookLlama(), &HfLlama(),
      &HfMistral(), &HfQwen2(), &HfGemma(),   &HfPhi3()};
  return families;
}

}  // namespace attn::lm
