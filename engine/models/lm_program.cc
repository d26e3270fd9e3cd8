// A language model's program: built by its family (lm_family.h), lowered
// as a graph file is (graph_ir.h), its nodes bound by their weights' book
// names to the weights the model holds.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/models/lm_family.h"
#include "engine/models/lm_model.h"

namespace attn::lm {
namespace {

using graph::Op;

// The role under which each op names the weight that tells its place.
const char* KeyRole(Op op) {
  switch (op) {
    case Op::kLayerNorm:
      return "scale";
    case Op::kMha:
      return "W_query.weight";
    default:
      return "weight";
  }
}

NodeBinding NormBinding(const Norm& norm) {
  return {nullptr, norm.scale.data(),
          norm.shift.empty() ? nullptr : norm.shift.data(), 0};
}

// What `node` reads in `m`; an mha node's layer goes to `mha_layer`.
Result<NodeBinding> Bind(const ModelData& m, const graph::Node& node,
                         int64_t& mha_layer) {
  const std::vector<std::string>* names = node.Weight(KeyRole(node.op));
  const auto role =
      names ? BookRole(m.config.architecture, names->front()) : std::nullopt;
  const auto layers = static_cast<int64_t>(m.layers.size());
  if (!role || role->second >= layers) {
    return Internal(node.Describe() + " reads no weight of the model");
  }
  const Layer& layer = m.layers[size_t(role->second)];
  switch (role->first) {
    case Role::kTokEmb: {
      NodeBinding table{nullptr, nullptr, nullptr, m.config.vocab_size};
      if (m.tok_emb.type() == kernels::DataType::kBF16) {
        table.bf16_table =
            static_cast<const hwy::bfloat16_t*>(m.tok_emb.data());
      } else {
        table.weight = static_cast<const float*>(m.tok_emb.data());
      }
      return table;
    }
    case Role::kPosEmb:
      return NodeBinding{nullptr, m.pos_emb.data(), nullptr,
                         m.config.context_length};
    case Role::kNorm1Scale:
      return NormBinding(layer.norm1);
    case Role::kNorm2Scale:
      return NormBinding(layer.norm2);
    case Role::kFinalScale:
      return NormBinding(m.final_norm);
    case Role::kUp:
      return NodeBinding{&layer.up, nullptr, nullptr, 0};
    case Role::kGate:
      return NodeBinding{&layer.gate, nullptr, nullptr, 0};
    case Role::kDown:
      return NodeBinding{&layer.down, nullptr, nullptr, 0};
    case Role::kHead:
      return NodeBinding{&m.head, nullptr, nullptr, 0};
    case Role::kQuery:
      mha_layer = role->second;
      return NodeBinding{};
    default:
      return Internal(node.Describe() + " reads no weight of the model");
  }
}

// Each tensor's width: the embedding width but for a linear's output.
std::vector<int64_t> Widths(const ModelData& m) {
  std::vector<int64_t> widths(m.program.tensors.size(), m.config.emb_dim);
  for (const graph::Step& step : m.program.steps) {
    const NodeBinding& b = m.bound.layers[0][step.node];
    if (step.op == Op::kLinear) {
      widths[step.dst] = b.linear->out();
    } else if (step.op == Op::kSwiGlu) {
      widths[step.dst] = widths[step.src] / 2;
    } else if (step.src >= 0 && step.op != Op::kEmbedding &&
               step.op != Op::kPositionEmbedding) {
      widths[step.dst] = widths[step.src];
    }
  }
  return widths;
}

}  // namespace

Status BuildProgram(ModelData& m) {
  ATTN_ASSIGN_OR_RETURN(m.def, FamilyOf(m.config).program(m.config));
  m.program = graph::Lower(m.def);
  m.bound.def = &m.def;
  m.bound.program = &m.program;
  m.bound.layers.assign(1, {});
  m.mha_layer.assign(m.def.nodes.size(), -1);
  for (size_t n = 0; n < m.def.nodes.size(); ++n) {
    const graph::Node& node = m.def.nodes[n];
    if (node.weights.empty()) {  // an add, an activation, a dropout
      m.bound.layers[0].emplace_back();
      continue;
    }
    ATTN_ASSIGN_OR_RETURN(NodeBinding binding, Bind(m, node, m.mha_layer[n]));
    m.bound.layers[0].push_back(binding);
  }
  m.bound.widths = Widths(m);
  m.bound.types.assign(m.program.tensors.size(), kernels::DataType::kF32);
  return {};
}

}  // namespace attn::lm
