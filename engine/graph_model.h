// GraphModel's internals, shared by its loader (graph_model.cc) and its
// sessions (graph_session.cc); never installed.
#ifndef ATTN_ENGINE_GRAPH_MODEL_H_
#define ATTN_ENGINE_GRAPH_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "engine/graph_ir.h"

namespace attn {
namespace graph {

// One node's weights in one layer, fp32, as the file holds them (linear:
// [out, in]); the matmuls' packed layouts are per shape, so per session.
struct NodeWeights {
  std::vector<float> weight, bias;  // linear: [out, in], [out]
                                    // layernorm: scale, shift
  std::shared_ptr<const MhaModel> mha;
};

// Everything loading produced; nothing writes it afterwards.
struct LoadedGraph {
  GraphDef def;
  Program program;
  std::vector<int64_t> widths;                  // per program tensor
  std::vector<std::vector<NodeWeights>> layer;  // [layer][node]
  int num_threads = 1;
  DType dtype = DType::kF32;
  uint64_t max_memory_bytes = 0;  // resolved: never 0
};

}  // namespace graph

struct GraphModel::Impl : graph::LoadedGraph {};

}  // namespace attn

#endif  // ATTN_ENGINE_GRAPH_MODEL_H_
