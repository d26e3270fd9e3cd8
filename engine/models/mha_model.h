// MhaModel's internals, shared by the engine's sources (never installed).
#ifndef ATTN_ENGINE_MODELS_MHA_MODEL_H_
#define ATTN_ENGINE_MODELS_MHA_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "engine/ops/linear.h"
#include "engine/runtime/huge_pages.h"
#include "hwy/base.h"

namespace attn {

class AttentionOp;

// What an MhaModel holds; the engine reaches it through ModelAccess (the
// attention operator takes it).
struct MhaModelData {
  MhaConfig config;
  DType dtype = DType::kF32;
  int num_threads = 1;
  uint64_t max_memory_bytes = 0;  // resolved: never 0
  // W_query [d_out, d_in], W_key and W_value [KvDim, d_in] stacked; their
  // biases likewise (empty without qkv_bias). out_proj as in PyTorch.
  // w_qkv and w_out are empty where a model for decoders alone
  // (ModelAccess::CreateMha) dropped them.
  StreamedVector<float> w_qkv, b_qkv, w_out, b_out;
  // MhaOptions::step_weights: with kBF16, w_qkv and w_out are rounded to
  // bf16 at load, and the decode panels are bf16.
  DType step_weights = DType::kF32;
  // The projections, made at load over the weights above: [W_query;
  // W_key; W_value] and out_proj, with MhaOptions::sessions packed for
  // forwards without a cache (the fused projection into head planes) in the
  // model's dtype, and with MhaOptions::decode (`decode`) packed in it too
  // for decoders' prompts and long steps, with panels in step_weights' type
  // for steps of up to 8 rows.
  ops::Linear qkv, out;
  bool decode = false;
};

// K/V heads of `c` (num_heads while not set) and their width (d_out
// without grouping, so that a d_out not divisible by num_heads is reported
// as such).
inline int64_t KvHeads(const MhaConfig& c) {
  return c.num_kv_heads ? c.num_kv_heads : c.num_heads;
}
inline int64_t KvDim(const MhaConfig& c) {
  return KvHeads(c) == c.num_heads ? c.d_out
                                   : KvHeads(c) * (c.d_out / c.num_heads);
}

// The width of the attention's output: out_proj's rows.
inline int64_t OutDim(const MhaConfig& c) {
  return c.out_dim ? c.out_dim : c.d_out;
}

// Bytes of the fp32 weights a model of config `c` holds (saturating).
uint64_t WeightBytes(const MhaConfig& c);

// Makes `m.qkv` and `m.out` with the layouts sessions (with `sessions`) and
// decoders (with `decode`) read, with the model's weights already held;
// `decoders_only` then drops w_qkv and w_out where no decoder's run reads
// them (a session could not run then).
Status MakeMhaLinears(MhaModelData& m, bool sessions, bool decode,
                      bool decoders_only = false);
// An attention's projections already quantized (a quantized file's), in
// llama.cpp's row layout of blocks: [W_query; W_key; W_value] and out_proj,
// with their fp32 biases as MhaWeights takes them.
struct QuantizedMhaWeights {
  kernels::QuantType quant = kernels::QuantType::kQ8_0;
  const void* qkv = nullptr;
  const void* out = nullptr;
  const float* b_query = nullptr;
  const float* b_key = nullptr;
  const float* b_value = nullptr;
  const float* b_out = nullptr;
};
// ModelAccess::CreateQuantizedMha makes a model of them.
// Bytes the model holds: its weights and their packed copies.
uint64_t MhaModelBytes(const MhaModelData& m);

struct MhaModel::Impl : MhaModelData {};

// The attention operator of one MHA run of [batch, seq_len], as MhaSession
// and a graph's mha steps run it: the shape checked, then the memory cap
// against an estimate and the operator's packed weights, with `held` bytes
// already held; a failure names `what`.
Result<std::unique_ptr<AttentionOp>> PlanMhaRun(const MhaModelData& m,
                                                int64_t batch, int64_t seq_len,
                                                uint64_t held,
                                                const std::string& what);

}  // namespace attn

#endif  // ATTN_ENGINE_MODELS_MHA_MODEL_H_
