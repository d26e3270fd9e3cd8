// GraphModel's internals, shared by its loader (graph_model.cc) and its
// sessions (graph_session.cc); never installed.
#ifndef ATTN_ENGINE_MODELS_GRAPH_MODEL_H_
#define ATTN_ENGINE_MODELS_GRAPH_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "engine/ops/linear.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/graph_ir.h"
#include "engine/runtime/huge_pages.h"
#include "engine/runtime/runner.h"
#include "kernels/matmul.h"

namespace attn {
namespace graph {

// One node's weights in one layer, fp32, as the file holds them (linear:
// [out, in]), in LoadedGraph::tensors; a linear's `linear` reads them and
// holds their packed copy.
struct NodeWeights {
  const float* weight = nullptr;  // linear [out, in], layernorm's scale,
                                  // (position_)embedding [rows, e]
  const float* bias = nullptr;    // linear [out] (null: none), layernorm shift
  int64_t rows = 0;               // embedding: vocab; position: context
  std::shared_ptr<const MhaModel> mha;
  // Linear nodes: packed once at load in the layout of a run of
  // kernels::kMatMulPackedRows rows, which every long enough run shares and
  // shorter ones read in place where they can (else a session packs its
  // own: LinearFallback::kOwnPacked).
  ops::Linear linear;
};

// Everything loading produced; nothing writes it afterwards.
struct LoadedGraph {
  GraphDef def;  // repeat nodes expanded
  Program program;
  bool token_input = false;  // an embedding reads the input
  // The weights the nodes point into, fp32, by name in the file: each read
  // once however many nodes name it (a tied head and its embedding).
  std::map<std::string, StreamedVector<float>> tensors;
  std::vector<int64_t> widths;                  // per program tensor
  std::vector<std::vector<NodeWeights>> layer;  // [layer][node]
  int num_threads = 1;
  DType dtype = DType::kF32;
  uint64_t max_memory_bytes = 0;         // resolved: never 0
  std::vector<kernels::DataType> types;  // per program tensor (TensorTypes)
  BoundProgram bound;                    // the above, as the Runner reads it
};

// Per program tensor, how it is stored. With bf16, a tensor that a linear
// writes and only linears read (as their src) is bf16; every other tensor
// (the output among them) is fp32.
std::vector<kernels::DataType> TensorTypes(const Program& program, DType dtype);

// The runner's view of `m`: each layer's nodes bound to their weights.
BoundProgram Bind(const LoadedGraph& m);

}  // namespace graph

struct GraphModel::Impl : graph::LoadedGraph {};

}  // namespace attn

#endif  // ATTN_ENGINE_MODELS_GRAPH_MODEL_H_
