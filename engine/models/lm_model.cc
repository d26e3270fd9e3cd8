// LanguageModel (attn/lm.hpp): a model built from weights by role
// (lm::WeightSource), whether they come from a file (lm_layouts.cc) or a
// seeded generator. Each block's attention is an MhaModel, so it runs the one
// attention operator; the other linears keep their [out, in] weights for
// steps of a few rows and a packed copy for longer ones.
#include "engine/models/lm_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/lm.hpp"
#include "engine/io/json_limits.h"
#include "engine/io/model_config.h"
#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/random.h"
#include "engine/runtime/threads.h"
#include "kernels/matmul.h"

namespace attn {
namespace lm {

bool IsLinearWeight(Role role) {
  switch (role) {
    case Role::kQuery:
    case Role::kKey:
    case Role::kValue:
    case Role::kQkv:
    case Role::kOut:
    case Role::kUp:
    case Role::kGate:
    case Role::kGateUp:
    case Role::kDown:
    case Role::kHead:
      return true;
    default:
      return false;
  }
}

std::pair<int64_t, int64_t> LinearShape(const LmConfig& c, Role role) {
  const int64_t e = c.emb_dim, h = c.hidden_dim;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  switch (role) {
    case Role::kQuery:
      return {q, e};
    case Role::kKey:
    case Role::kValue:
      return {kv, e};
    case Role::kQkv:
      return {q + 2 * kv, e};
    case Role::kOut:
      return {e, q};
    case Role::kGateUp:
      return {2 * h, e};
    case Role::kDown:
      return {e, h};
    case Role::kHead:
      return {c.vocab_size, e};
    default:  // kUp, kGate
      return {h, e};
  }
}

Status CheckSizes(const LmConfig& c) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", c.vocab_size}, {"emb_dim", c.emb_dim},
      {"hidden_dim", c.hidden_dim}, {"num_layers", c.num_layers},
      {"num_heads", c.num_heads},   {"context_length", c.context_length}};
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  for (const auto& [name, value] : sizes) {
    if (value <= 0 || value > kMaxSize) {
      return InvalidArgument(std::string("model ") + name + " is " +
                             std::to_string(value) + ", want 1.." +
                             std::to_string(kMaxSize));
    }
  }
  if (c.head_dim == 0 && c.emb_dim % c.num_heads != 0) {
    return InvalidArgument("model emb_dim " + std::to_string(c.emb_dim) +
                           " is not divisible by num_heads " +
                           std::to_string(c.num_heads) + " (give head_dim)");
  }
  if (c.head_dim < 0 || c.head_dim > kMaxSize ||
      c.head_dim * c.num_heads > kMaxSize) {
    return InvalidArgument("model head_dim is " + std::to_string(c.head_dim) +
                           ", want 1.." +
                           std::to_string(kMaxSize / c.num_heads) + " for " +
                           std::to_string(c.num_heads) + " heads");
  }
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(
        "model num_kv_heads is " + std::to_string(c.num_kv_heads) +
        ", want a divisor of num_heads " + std::to_string(c.num_heads));
  }
  // The norms take it as a float: 1e-50 or 1e39 would be 0 or inf there.
  if (!(c.norm_eps > 0.0 && c.norm_eps <= std::numeric_limits<float>::max() &&
        static_cast<float>(c.norm_eps) > 0.0f)) {
    char value[32];
    std::snprintf(value, sizeof(value), "%g", c.norm_eps);
    return InvalidArgument(std::string("model norm_eps is ") + value +
                           ", want a float above 0 (LmOptions::"
                           "norm_eps, else metadata rms_norm_eps or config."
                           "json's layer_norm_epsilon)");
  }
  return {};
}

// Quantized dtypes take linears whose inputs are whole blocks.
Status CheckQuantizable(const LmConfig& c, DType dtype) {
  if (!ops::QuantTypeOf(dtype)) return {};
  const auto block = static_cast<int64_t>(kernels::kQuantBlock);
  const std::pair<const char*, int64_t> inputs[] = {
      {"emb_dim", c.emb_dim},
      {"num_heads x head_dim",
       c.head_dim ? c.num_heads * c.head_dim : c.emb_dim},
      {"hidden_dim", c.hidden_dim}};
  for (const auto& [name, value] : inputs) {
    if (value % block != 0) {
      return InvalidArgument(
          std::string("model ") + name + " is " + std::to_string(value) +
          ", want a multiple of " + std::to_string(block) +
          " to quantize (blocks of " + std::to_string(block) +
          " along each linear's input)");
    }
  }
  return {};
}

namespace {

// Bytes the model holds, about (panels pad each matrix to whole panels).
// Every linear: its packed copy in the model's dtype, its panels unless
// they are that copy (bf16), and its plain weights (the attention's in
// fp32) where some run reads them; a tied head's are the embeddings (bf16
// in a bf16 model).
// Quantized: every linear's blocks (the head's too). Then the embeddings
// (fp32 at most) and norms, and while one linear is made, its fp32 values
// as read.
uint64_t ModelBytes(const LmConfig& c, DType dtype) {
  const uint64_t e = c.emb_dim, h = c.hidden_dim, v = c.vocab_size;
  const uint64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const uint64_t ff =
      (c.architecture == LmArchitecture::kLlama ? 3 : 2) * e * h;
  const uint64_t qkv = e * (q + 2 * kv), attention = qkv + q * e;
  const uint64_t embeddings =
      (dtype == DType::kBF16 && c.tied_head ? 2 : 4) * v * e +
      4 * (c.architecture == LmArchitecture::kGpt2 ? c.context_length : 0) * e;
  const uint64_t norms = 4 * (4 * e + 2 * h) * c.num_layers;
  const uint64_t transient = 4 * std::max({v * e, 2 * e * h, qkv});
  if (const auto quant = ops::QuantTypeOf(dtype)) {  // the head: its own
    const uint64_t block_bytes = kernels::QuantBlockBytes(*quant);
    const uint64_t blocks =
        AddSat(MulSat(c.num_layers, attention + ff), v * e) /
        kernels::kQuantBlock;
    // While one is quantized, its blocks twice (as made, as packed).
    const uint64_t largest = std::max({v * e, 2 * e * h, qkv});
    return AddSat(AddSat(MulSat(blocks, block_bytes), transient),
                  AddSat(largest / kernels::kQuantBlock * block_bytes,
                         AddSat(embeddings, norms)));
  }
  const kernels::DataType type = ops::ToDataType(dtype);
  const uint64_t size = kernels::SizeOf(type);
  const auto linear = [&](uint64_t out, uint64_t in, uint64_t plain_size) {
    const auto n = static_cast<int64_t>(out), k = static_cast<int64_t>(in);
    const bool dropped = ops::Linear::PackedServesEveryRun(n, k, type);
    const bool shared = size == 2 && ops::Linear::PanelsArePackedCopy(n, k);
    return MulSat(out * in,
                  (shared ? 1 : 2) * size + (dropped ? 0 : plain_size));
  };
  const uint64_t ups = c.architecture == LmArchitecture::kLlama ? 2 : 1;
  const uint64_t layer =
      AddSat(AddSat(linear(q + 2 * kv, e, 4), linear(e, q, 4)),
             AddSat(MulSat(ups, linear(h, e, size)), linear(e, h, size)));
  const uint64_t head = linear(v, e, c.tied_head ? 0 : size);
  return AddSat(AddSat(MulSat(layer, c.num_layers), head),
                AddSat(AddSat(embeddings, norms), transient));
}

Result<Norm> MakeNorm(const WeightSource& w, Role scale, Role shift,
                      int64_t layer, int64_t e) {
  Norm norm;
  ATTN_ASSIGN_OR_RETURN(norm.scale, w.fetch(scale, layer, e, 0));
  if (w.has(shift, layer)) {
    ATTN_ASSIGN_OR_RETURN(norm.shift, w.fetch(shift, layer, e, 0));
  }
  return norm;
}

// A linear's weights with the layouts a decoding model reads: a packed copy
// for runs of rows, panels for steps of a few rows, and the plain weights
// only where some run reads neither; quantized ones none.
Result<ops::Linear> HoldLinear(ops::Weight weight, ops::Weight bias,
                               int num_threads) {
  ops::LinearLayouts layouts;
  if (!weight.quant()) {
    layouts.packed = {{weight.type(), 0}};
    layouts.panels = weight.type();
    layouts.drop_plain = true;
  }
  return ops::Linear::Create(std::move(weight), std::move(bias), layouts,
                             num_threads);
}

// `values` [out, in] held as `dtype` says: fp32, rounded to bf16, or
// quantized. `what` names it in errors.
Result<ops::Weight> HoldWeight(StreamedVector<float> values, int64_t out,
                               int64_t in, DType dtype, int num_threads,
                               const std::string& what) {
  if (const auto quant = ops::QuantTypeOf(dtype)) {
    return ops::Weight::Quantize(values.data(), out, in, *quant, num_threads,
                                 what);
  }
  return ops::Weight::Hold(std::move(values), out, in, ops::ToDataType(dtype));
}

// What errors call `role`'s weight in `layer`: its tensor's quoted name.
std::string WeightName(const WeightSource& w, Role role, int64_t layer) {
  const std::string name = w.name ? w.name(role, layer) : "";
  return name.empty() ? "a linear" : Quoted(name);
}

// Whether the source stores `role`'s values in `layer` as bf16: read as they
// are, they need no fp32 copy (bf16 held or quantized from them alike).
bool StoresBf16(const WeightSource& w, Role role, int64_t layer) {
  return w.stores_bf16 && w.stores_bf16(role, layer);
}

// `role`'s weight [out, in] in `layer`, held as `dtype` says: a quantized
// source's blocks as they are, other values as HoldWeight holds them.
Result<ops::Weight> ReadWeight(const WeightSource& w, Role role, int64_t layer,
                               int64_t out, int64_t in, DType dtype,
                               int num_threads) {
  if (w.quant) {
    ATTN_ASSIGN_OR_RETURN(const AlignedBuffer blocks,
                          w.fetch_blocks(role, layer, out, in));
    return ops::Weight::FromBlocks(blocks.data(), out, in, *w.quant,
                                   num_threads, WeightName(w, role, layer));
  }
  const auto quant = ops::QuantTypeOf(dtype);
  if ((dtype == DType::kBF16 || quant) && StoresBf16(w, role, layer)) {
    ATTN_ASSIGN_OR_RETURN(StreamedVector<hwy::bfloat16_t> values,
                          w.fetch_bf16(role, layer, out, in));
    if (!quant) return ops::Weight::Hold(std::move(values), out, in);
    return ops::Weight::Quantize(values.data(), out, in, *quant, num_threads,
                                 WeightName(w, role, layer));
  }
  ATTN_ASSIGN_OR_RETURN(StreamedVector<float> values,
                        w.fetch(role, layer, out, in));
  return HoldWeight(std::move(values), out, in, dtype, num_threads,
                    WeightName(w, role, layer));
}

// Linear `weight` of a model of `c` (its shape LinearShape's); `bias`: the
// role of its bias, used when the source has it.
Result<ops::Linear> MakeLinear(const WeightSource& w, const LmConfig& c,
                               Role weight, std::optional<Role> bias,
                               int64_t layer, DType dtype, int num_threads) {
  const auto [out, in] = LinearShape(c, weight);
  ops::Weight b;
  if (bias && w.has(*bias, layer)) {
    ATTN_ASSIGN_OR_RETURN(StreamedVector<float> values,
                          w.fetch(*bias, layer, out, 0));
    ATTN_ASSIGN_OR_RETURN(b, ops::Weight::Hold(std::move(values), out, 1,
                                               kernels::DataType::kF32));
  }
  ATTN_ASSIGN_OR_RETURN(ops::Weight held, ReadWeight(w, weight, layer, out, in,
                                                     dtype, num_threads));
  return HoldLinear(std::move(held), std::move(b), num_threads);
}

// Whether every value is a bf16 (its low 16 bits zero).
bool AllBf16(const StreamedVector<float>& values) {
  return std::all_of(values.begin(), values.end(), [](float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return (bits & 0xFFFFu) == 0;
  });
}

// Whether the model holds its token embeddings [V, e] in bf16: where a
// bf16 model's tied head rounds them alike (so that both hold the same
// numbers) or they are bf16 already (`all_bf16`: a bf16 checkpoint's) and no
// fp32 head borrows them; else fp32.
bool EmbeddingsInBf16(const LmConfig& c, DType dtype, bool all_bf16) {
  return dtype == DType::kBF16
             ? c.tied_head || all_bf16
             : !(dtype == DType::kF32 && c.tied_head) && all_bf16;
}

// The token embeddings as read, held as EmbeddingsInBf16 says.
Result<ops::Weight> HoldEmbeddings(StreamedVector<float> table,
                                   const LmConfig& c, DType dtype) {
  const bool bf16 = EmbeddingsInBf16(c, dtype, AllBf16(table));
  return ops::Weight::Hold(
      std::move(table), c.vocab_size, c.emb_dim,
      bf16 ? kernels::DataType::kBF16 : kernels::DataType::kF32);
}

// The token embeddings as HoldEmbeddings holds them, read as stored where
// that is bf16 and they are held so.
Result<ops::Weight> ReadEmbeddings(const WeightSource& w, const LmConfig& c,
                                   DType dtype) {
  if (StoresBf16(w, Role::kTokEmb, 0) &&
      EmbeddingsInBf16(c, dtype, /*all_bf16=*/true)) {
    ATTN_ASSIGN_OR_RETURN(
        StreamedVector<hwy::bfloat16_t> table,
        w.fetch_bf16(Role::kTokEmb, 0, c.vocab_size, c.emb_dim));
    return ops::Weight::Hold(std::move(table), c.vocab_size, c.emb_dim);
  }
  ATTN_ASSIGN_OR_RETURN(StreamedVector<float> table,
                        w.fetch(Role::kTokEmb, 0, c.vocab_size, c.emb_dim));
  return HoldEmbeddings(std::move(table), c, dtype);
}

// The head reads the embeddings as held; quantized, it holds its own copy.
Result<ops::Linear> TiedHead(ModelData& m) {
  const int64_t e = m.config.emb_dim, v = m.config.vocab_size;
  const ops::Weight& table = m.tok_emb;
  if (const auto quant = ops::QuantTypeOf(m.dtype)) {
    Result<ops::Weight> held =
        table.type() == kernels::DataType::kBF16
            ? ops::Weight::Quantize(
                  static_cast<const hwy::bfloat16_t*>(table.data()), v, e,
                  *quant, m.num_threads, "the tied head")
            : ops::Weight::Quantize(static_cast<const float*>(table.data()), v,
                                    e, *quant, m.num_threads, "the tied head");
    if (!held.ok()) return held.status();
    return HoldLinear(std::move(held).value(), {}, m.num_threads);
  }
  if (table.type() == kernels::DataType::kBF16) {
    return HoldLinear(
        ops::Weight::Borrow(static_cast<const hwy::bfloat16_t*>(table.data()),
                            v, e),
        {}, m.num_threads);
  }
  return HoldLinear(
      ops::Weight::Borrow(static_cast<const float*>(table.data()), v, e), {},
      m.num_threads);
}

// An attention's tensors as read, which MhaWeights points into.
struct AttentionTensors {
  StreamedVector<float> qkv, q, k, v, qb, kb, vb, out, out_bias;
};

// A quantized source's projections: [q; k; v] (one tensor, or three
// stacked: a row's blocks are contiguous) and out_proj, as blocks.
struct AttentionBlocks {
  AlignedBuffer qkv, out;
};

Status ReadProjectionBlocks(const WeightSource& w, int64_t l, int64_t q_rows,
                            int64_t kv, int64_t in, AttentionBlocks& b) {
  if (w.has(Role::kQkv, l)) {
    ATTN_ASSIGN_OR_RETURN(b.qkv,
                          w.fetch_blocks(Role::kQkv, l, q_rows + 2 * kv, in));
  } else {
    const size_t row_bytes =
        kernels::QuantRowsBytes(*w.quant, 1, static_cast<size_t>(in));
    ATTN_ASSIGN_OR_RETURN(
        b.qkv, AlignedBuffer::Allocate(row_bytes * size_t(q_rows + 2 * kv)));
    auto* at = static_cast<char*>(b.qkv.data());
    for (const auto& [role, rows] : {std::pair{Role::kQuery, q_rows},
                                     {Role::kKey, kv},
                                     {Role::kValue, kv}}) {
      ATTN_ASSIGN_OR_RETURN(const AlignedBuffer part,
                            w.fetch_blocks(role, l, rows, in));
      std::memcpy(at, part.data(), part.size());
      at += part.size();
    }
  }
  return {};
}

// q, k and v (q_rows, kv and kv rows of `in`): three tensors, or Phi-3's
// one, which `mw` then points into as it is.
Status ReadProjections(const WeightSource& w, int64_t l, int64_t q_rows,
                       int64_t kv, int64_t in, AttentionTensors& t,
                       MhaWeights& mw) {
  if (w.has(Role::kQkv, l)) {
    ATTN_ASSIGN_OR_RETURN(t.qkv, w.fetch(Role::kQkv, l, q_rows + 2 * kv, in));
    mw.w_query = t.qkv.data();
    mw.w_key = mw.w_query + q_rows * in;
    mw.w_value = mw.w_key + kv * in;
  } else {
    ATTN_ASSIGN_OR_RETURN(t.q, w.fetch(Role::kQuery, l, q_rows, in));
    ATTN_ASSIGN_OR_RETURN(t.k, w.fetch(Role::kKey, l, kv, in));
    ATTN_ASSIGN_OR_RETURN(t.v, w.fetch(Role::kValue, l, kv, in));
    mw.w_query = t.q.data();
    mw.w_key = t.k.data();
    mw.w_value = t.v.data();
  }
  return {};
}

// Names the first of layer l's projections `t` that holds NaN or an
// infinity, which quantizing them refused without its name; else OK.
Status CheckFiniteToQuantize(const WeightSource& w, int64_t l,
                             const AttentionTensors& t) {
  const std::pair<Role, const StreamedVector<float>*> projections[] = {
      {Role::kQkv, &t.qkv},
      {Role::kQuery, &t.q},
      {Role::kKey, &t.k},
      {Role::kValue, &t.v},
      {Role::kOut, &t.out}};
  for (const auto& [role, values] : projections) {
    const float* v = values->data();
    if (std::all_of(v, v + values->size(),
                    [](float x) { return std::isfinite(x); })) {
      continue;
    }
    return ops::NotFiniteToQuantize(WeightName(w, role, l));
  }
  return {};
}

// The q, k and v biases, with `bias`.
Status ReadBiases(const WeightSource& w, int64_t l, bool bias, int64_t q_rows,
                  int64_t kv, AttentionTensors& t, MhaWeights& mw) {
  if (bias) {
    ATTN_ASSIGN_OR_RETURN(t.qb, w.fetch(Role::kQueryBias, l, q_rows, 0));
    ATTN_ASSIGN_OR_RETURN(t.kb, w.fetch(Role::kKeyBias, l, kv, 0));
    ATTN_ASSIGN_OR_RETURN(t.vb, w.fetch(Role::kValueBias, l, kv, 0));
    mw.b_query = t.qb.data();
    mw.b_key = t.kb.data();
    mw.b_value = t.vb.data();
  }
  return {};
}

Result<std::shared_ptr<const MhaModel>> MakeAttention(
    const LmConfig& c, const WeightSource& w, int64_t l,
    const MhaOptions& options) {
  const int64_t e = c.emb_dim, q_rows = c.num_heads * c.head_dim;
  const int64_t kv = c.num_kv_heads * c.head_dim;
  MhaConfig mc;
  mc.d_in = e;
  mc.d_out = q_rows;
  mc.out_dim = q_rows == e ? 0 : e;
  mc.num_heads = c.num_heads;
  mc.num_kv_heads = c.num_kv_heads;
  mc.context_length = c.context_length;
  mc.qkv_bias = c.qkv_bias;
  mc.rope = c.rope;
  mc.sliding_window = c.sliding_window;
  AttentionTensors t;
  MhaWeights mw;
  if (w.has(Role::kOutBias, l)) {
    ATTN_ASSIGN_OR_RETURN(t.out_bias, w.fetch(Role::kOutBias, l, e, 0));
    mw.b_out = t.out_bias.data();
  }
  ATTN_RETURN_IF_ERROR(ReadBiases(w, l, c.qkv_bias, q_rows, kv, t, mw));
  if (w.quant) {
    AttentionBlocks b;
    ATTN_RETURN_IF_ERROR(ReadProjectionBlocks(w, l, q_rows, kv, e, b));
    ATTN_ASSIGN_OR_RETURN(b.out, w.fetch_blocks(Role::kOut, l, e, q_rows));
    return ModelAccess::CreateQuantizedMha(
        mc,
        {*w.quant, b.qkv.data(), b.out.data(), mw.b_query, mw.b_key, mw.b_value,
         mw.b_out},
        options);
  }
  ATTN_RETURN_IF_ERROR(ReadProjections(w, l, q_rows, kv, e, t, mw));
  ATTN_ASSIGN_OR_RETURN(t.out, w.fetch(Role::kOut, l, e, q_rows));
  mw.w_out = t.out.data();
  Result<std::shared_ptr<const MhaModel>> attention =
      ModelAccess::CreateMha(mc, mw, options, /*decoders_only=*/true);
  if (!attention.ok() &&
      attention.status().code() == StatusCode::kInvalidArgument &&
      ops::QuantTypeOf(options.step_weights)) {
    ATTN_RETURN_IF_ERROR(CheckFiniteToQuantize(w, l, t));
  }
  return attention;
}

Result<Layer> MakeLayer(const LmConfig& c, const WeightSource& w, int64_t l,
                        const MhaOptions& options) {
  const int64_t e = c.emb_dim;
  const DType dtype = options.step_weights;  // the attention's and the rest's
  Layer layer;
  ATTN_ASSIGN_OR_RETURN(
      layer.norm1, MakeNorm(w, Role::kNorm1Scale, Role::kNorm1Shift, l, e));
  ATTN_ASSIGN_OR_RETURN(layer.attention, MakeAttention(c, w, l, options));
  ATTN_ASSIGN_OR_RETURN(
      layer.norm2, MakeNorm(w, Role::kNorm2Scale, Role::kNorm2Shift, l, e));
  if (w.has(Role::kGateUp, l)) {  // Phi-3: one [2h, e], no gate
    ATTN_ASSIGN_OR_RETURN(
        layer.up, MakeLinear(w, c, Role::kGateUp, std::nullopt, l, dtype,
                             options.num_threads));
  } else {
    ATTN_ASSIGN_OR_RETURN(layer.up, MakeLinear(w, c, Role::kUp, Role::kUpBias,
                                               l, dtype, options.num_threads));
  }
  if (c.architecture == LmArchitecture::kLlama && !w.has(Role::kGateUp, l)) {
    ATTN_ASSIGN_OR_RETURN(
        layer.gate, MakeLinear(w, c, Role::kGate, Role::kGateBias, l, dtype,
                               options.num_threads));
  }
  ATTN_ASSIGN_OR_RETURN(layer.down,
                        MakeLinear(w, c, Role::kDown, Role::kDownBias, l, dtype,
                                   options.num_threads));
  return layer;
}

// Fills `m` from `w` for config `c` (sizes checked), within the memory cap.
Status Build(const LmConfig& c, const WeightSource& w, const LmOptions& options,
             ModelData& m) {
  ATTN_RETURN_IF_ERROR(CheckSizes(c));
  ATTN_RETURN_IF_ERROR(CheckQuantizable(c, options.dtype));
  // bf16 prompts run oneDNN's bf16 matmuls.
  ATTN_RETURN_IF_ERROR(CheckDTypeSupported(options.dtype));
  m.config = c;
  m.dtype = options.dtype;
  ATTN_ASSIGN_OR_RETURN(m.num_threads, ResolveNumThreads(options));
  m.max_memory_bytes = ResolveMaxMemory(options.max_memory_bytes);
  ATTN_RETURN_IF_ERROR(CheckMemory("the model's weights and packed copies",
                                   ModelBytes(c, options.dtype),
                                   m.max_memory_bytes));
  const ThreadScope threads(m.num_threads);
  const int64_t e = c.emb_dim;
  ATTN_ASSIGN_OR_RETURN(m.tok_emb, ReadEmbeddings(w, c, options.dtype));
  if (c.architecture == LmArchitecture::kGpt2) {
    ATTN_ASSIGN_OR_RETURN(m.pos_emb,
                          w.fetch(Role::kPosEmb, 0, c.context_length, e));
  }
  MhaOptions mha;
  mha.num_threads = m.num_threads;
  mha.max_memory_bytes = m.max_memory_bytes;
  mha.step_weights = options.dtype;
  // bf16 prompts project q, k, v and out in bf16 like the rest.
  if (options.dtype == DType::kBF16) mha.dtype = DType::kBF16;
  mha.sessions = false;  // batches only decode
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ATTN_ASSIGN_OR_RETURN(lm::Layer layer, MakeLayer(c, w, l, mha));
    m.layers.push_back(std::move(layer));
  }
  ATTN_ASSIGN_OR_RETURN(
      m.final_norm, MakeNorm(w, Role::kFinalScale, Role::kFinalShift, 0, e));
  if (c.tied_head) {
    ATTN_ASSIGN_OR_RETURN(m.head, TiedHead(m));
  } else {
    ATTN_ASSIGN_OR_RETURN(m.head, MakeLinear(w, c, Role::kHead, std::nullopt, 0,
                                             m.dtype, m.num_threads));
  }
  return BuildProgram(m);
}

// The options a file loads with: a quantized file runs in its own type,
// which the default dtype (f32) stands for.
Result<LmOptions> OptionsFor(const FileModel& file, const std::string& path,
                             LmOptions options) {
  const std::optional<kernels::QuantType> quant = file.weights.quant;
  if (!quant) return options;
  const DType own = ops::DTypeOf(*quant);
  if (options.dtype != DType::kF32 && options.dtype != own) {
    return InvalidArgument(Quoted(path) + " holds " + DTypeName(own) +
                           " weights, which run as they are: dtype is " +
                           DTypeName(options.dtype) + ", want " +
                           DTypeName(own) + " or the default");
  }
  options.dtype = own;
  return options;
}

// GPT-2's initialisation scale: weights uniform in +-1/sqrt(in) (nn.Linear's
// bound), embeddings +-0.1, norms 1 and biases, shifts 0.
WeightSource RandomWeights(const LmConfig& c, uint64_t seed) {
  WeightSource source;
  source.has = [c](Role role, int64_t) {
    switch (role) {
      case Role::kPosEmb:
      case Role::kNorm1Shift:
      case Role::kNorm2Shift:
      case Role::kFinalShift:
      case Role::kOutBias:
      case Role::kUpBias:
      case Role::kDownBias:
        return c.architecture == LmArchitecture::kGpt2;
      case Role::kGate:
        return c.architecture == LmArchitecture::kLlama;
      case Role::kGateBias:
      case Role::kQkv:
      case Role::kGateUp:
        return false;
      case Role::kQueryBias:
      case Role::kKeyBias:
      case Role::kValueBias:
        return c.qkv_bias;
      case Role::kHead:
        return !c.tied_head;
      default:
        return true;
    }
  };
  source.fetch = [seed](Role role, int64_t layer, int64_t rows,
                        int64_t cols) -> Result<StreamedVector<float>> {
    StreamedVector<float> values;
    try {
      values.resize(static_cast<size_t>(rows * (cols ? cols : 1)));
    } catch (const std::bad_alloc&) {
      return OutOfMemory("cannot allocate " + std::to_string(rows) +
                         " rows of seeded weights");
    }
    const bool norm = role == Role::kNorm1Scale || role == Role::kNorm2Scale ||
                      role == Role::kFinalScale;
    if (cols == 0) {  // biases and shifts 0, norm scales 1
      std::fill(values.begin(), values.end(), norm ? 1.0f : 0.0f);
      return values;
    }
    const bool embedding = role == Role::kTokEmb || role == Role::kPosEmb;
    const double bound = embedding ? 0.1 : 1.0 / std::sqrt(double(cols));
    // One stream per (role, layer): a tensor's values do not depend on the
    // order tensors are made in.
    uint64_t state = seed ^ (uint64_t(role) << 48) ^ uint64_t(layer) << 32;
    for (float& x : values) {
      const double u = UniformDouble(state);
      x = static_cast<float>((2.0 * u - 1.0) * bound);
    }
    return values;
  };
  return source;
}

}  // namespace
}  // namespace lm

LanguageModel::LanguageModel(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
const lm::ModelData& ModelAccess::Of(const LanguageModel& model) {
  return *model.impl_;
}
LanguageModel::~LanguageModel() = default;

Result<std::shared_ptr<const LanguageModel>> LanguageModel::Load(
    const std::string& path, const LmOptions& options) {
  ATTN_ASSIGN_OR_RETURN(const lm::FileModel file,
                        lm::OpenModelFile(path, options));
  ATTN_ASSIGN_OR_RETURN(const LmOptions resolved,
                        lm::OptionsFor(file, path, options));
  auto impl = std::make_unique<Impl>();
  ATTN_RETURN_IF_ERROR(lm::Build(file.config, file.weights, resolved, *impl));
  return std::shared_ptr<const LanguageModel>(
      new LanguageModel(std::move(impl)));
}

Result<LmConfig> LanguageModel::ReadConfig(const std::string& path,
                                           const LmOptions& options) {
  ATTN_ASSIGN_OR_RETURN(lm::FileModel file, lm::OpenModelFile(path, options));
  ATTN_RETURN_IF_ERROR(lm::CheckSizes(file.config));
  return std::move(file.config);
}

Result<std::shared_ptr<const LanguageModel>> LanguageModel::Random(
    const LmConfig& config, uint64_t seed, const LmOptions& options) {
  LmConfig c = config;
  c.layout = "random";
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_dim == 0 && c.num_heads > 0 && c.emb_dim % c.num_heads == 0) {
    c.head_dim = c.emb_dim / c.num_heads;
  }
  auto impl = std::make_unique<Impl>();
  ATTN_RETURN_IF_ERROR(
      lm::Build(c, lm::RandomWeights(c, seed), options, *impl));
  return std::shared_ptr<const LanguageModel>(
      new LanguageModel(std::move(impl)));
}

bool LanguageModel::IsLanguageModelFile(const std::string& path,
                                        uint64_t max_memory_bytes) {
  Result<WeightFiles> files = WeightFiles::Open(path, max_memory_bytes);
  return files.ok() && !lm::DetectLayout(*files).empty();
}

const LmConfig& LanguageModel::config() const { return impl_->config; }
DType LanguageModel::dtype() const { return impl_->dtype; }
int LanguageModel::num_threads() const { return impl_->num_threads; }

uint64_t LanguageModel::memory_bytes() const {
  const Impl& m = *impl_;
  uint64_t bytes = m.tok_emb.bytes() + m.pos_emb.size() * sizeof(float);
  for (const lm::Layer& layer : m.layers) {
    bytes += layer.attention->memory_bytes() + layer.up.bytes() +
             layer.gate.bytes() + layer.down.bytes();
  }
  return bytes + m.head.bytes();
}

}  // namespace attn
