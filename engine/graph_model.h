// GraphModel's internals, shared by its loader (graph_model.cc) and its
// sessions (graph_session.cc); never installed.
#ifndef ATTN_ENGINE_GRAPH_MODEL_H_
#define ATTN_ENGINE_GRAPH_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/graph.hpp"
#include "engine/buffer.h"
#include "engine/graph_ir.h"
#include "kernels/matmul.h"

namespace attn {
namespace graph {

// One node's weights in one layer, fp32, as the file holds them (linear:
// [out, in]), in LoadedGraph::tensors; LoadedGraph::packed holds the
// linears' packed copies.
struct NodeWeights {
  const float* weight = nullptr;  // linear [out, in], layernorm's scale,
                                  // (position_)embedding [rows, e]
  const float* bias = nullptr;    // linear [out] (null: none), layernorm shift
  int64_t rows = 0;               // embedding: vocab; position: context
  std::shared_ptr<const MhaModel> mha;
};

// Everything loading produced; nothing writes it afterwards.
struct LoadedGraph {
  GraphDef def;  // repeat nodes expanded
  Program program;
  bool token_input = false;  // an embedding reads the input
  // The weights the nodes point into, fp32, by name in the file: each read
  // once however many nodes name it (a tied head and its embedding).
  std::map<std::string, std::vector<float>> tensors;
  std::vector<int64_t> widths;                  // per program tensor
  std::vector<std::vector<NodeWeights>> layer;  // [layer][node]
  int num_threads = 1;
  DType dtype = DType::kF32;
  uint64_t max_memory_bytes = 0;         // resolved: never 0
  std::vector<kernels::DataType> types;  // per program tensor (TensorTypes)
  // The linears' weights, packed once at load in the layout of a run of
  // kernels::kMatMulPackedRows rows, which every long enough run shares and
  // shorter ones read in place: per step the matmul that chose it (linear
  // steps only), per layer and step the packed weights. A session whose
  // matmul cannot read them (MatMul::ReadPackedWeightsOf) packs its own.
  std::vector<std::optional<kernels::MatMul>> packed_layout;
  std::vector<std::vector<AlignedBuffer>> packed;  // [layer][step]
};

// Per program tensor, how it is stored. With bf16, a tensor that a linear
// writes and only linears read (as their src) is bf16; every other tensor
// (the output among them) is fp32.
std::vector<kernels::DataType> TensorTypes(const Program& program, DType dtype);

// The matmul of linear step `k` for `rows` rows: y [rows, out] =
// x [rows, in] W^T (+ b) (then GELU, then + residual), with src and weights
// in the model's dtype. Errors name the step's node.
Result<kernels::MatMul> LinearMatMul(const LoadedGraph& m, size_t k,
                                     int64_t rows);

}  // namespace graph

struct GraphModel::Impl : graph::LoadedGraph {};

}  // namespace attn

#endif  // ATTN_ENGINE_GRAPH_MODEL_H_
