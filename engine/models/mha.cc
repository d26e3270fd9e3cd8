// MhaModel (validated, immutable weights) and MhaSession (per-shape plan:
// primitives, packed weights and buffers created once, then straight-line
// forward passes).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "engine/io/model_config.h"
#include "engine/models/mha_model.h"
#include "engine/models/model_access.h"
#include "engine/ops/attention_op.h"
#include "engine/ops/linear.h"
#include "engine/ops/step_weights.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/runner.h"
#include "engine/runtime/threads.h"
#include "kernels/attention.h"
#include "kernels/softmax.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attn {

using kernels::DataType;

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

Status CheckDims(const MhaConfig& c) {
  auto positive = [](const char* name, int64_t value) -> Status {
    if (value <= 0 || value > kMaxDim) {
      return InvalidArgument(
          std::string(name) + " is " + std::to_string(value) +
          ", want a positive size up to " + std::to_string(kMaxDim));
    }
    return {};
  };
  ATTN_RETURN_IF_ERROR(positive("d_in", c.d_in));
  ATTN_RETURN_IF_ERROR(positive("d_out", c.d_out));
  ATTN_RETURN_IF_ERROR(positive("num_heads", c.num_heads));
  if (c.out_dim != 0) ATTN_RETURN_IF_ERROR(positive("out_dim", c.out_dim));
  if (c.d_out % c.num_heads != 0) {
    return InvalidArgument("d_out " + std::to_string(c.d_out) +
                           " is not divisible by num_heads " +
                           std::to_string(c.num_heads));
  }
  if (c.context_length < 0) {
    return InvalidArgument("context_length is " +
                           std::to_string(c.context_length) +
                           ", want a positive length (or 0 for no limit)");
  }
  if (!(c.dropout >= 0.0f && c.dropout < 1.0f)) {
    return InvalidArgument("dropout is " + std::to_string(c.dropout) +
                           ", want a probability in [0, 1)");
  }
  return {};
}

// Checks that tensor `name` has shape `want` and copies it out as float.
Result<std::vector<float>> ReadWeight(const SafetensorsFile& file,
                                      const std::string& name,
                                      const std::vector<int64_t>& want) {
  const TensorInfo* t = file.Find(name);
  if (!t) {
    return InvalidArgument("weight '" + name + "' is missing from '" +
                           file.path() + "'");
  }
  if (t->shape != want) {
    return InvalidArgument("weight '" + name + "' has shape " +
                           ShapeString(t->shape) + ", want " +
                           ShapeString(want));
  }
  return file.ReadF32(name);
}

}  // namespace

uint64_t WeightBytes(const MhaConfig& c) {
  const auto in = static_cast<uint64_t>(c.d_in);
  const auto out = static_cast<uint64_t>(c.d_out);
  const auto proj = static_cast<uint64_t>(OutDim(c));
  const uint64_t qkv = out + 2 * static_cast<uint64_t>(KvDim(c));
  uint64_t floats = AddSat(MulSat(qkv, in), MulSat(proj, out));
  floats = AddSat(floats, (c.qkv_bias ? qkv : 0) + proj);
  return MulSat(floats, sizeof(float));
}

MhaModel::MhaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
const MhaModelData& ModelAccess::Of(const MhaModel& model) {
  return *model.impl_;
}
MhaModel::~MhaModel() = default;
const MhaConfig& MhaModel::config() const { return impl_->config; }
DType MhaModel::dtype() const { return impl_->dtype; }
int MhaModel::num_threads() const { return impl_->num_threads; }
uint64_t MhaModel::memory_bytes() const { return MhaModelBytes(*impl_); }

namespace {

// The weights `c` needs are all given, the q/k/v biases all or none as
// qkv_bias says.
Status CheckWeightsGiven(const MhaConfig& c, const MhaWeights& w) {
  if (!w.w_query || !w.w_key || !w.w_value || !w.w_out) {
    return InvalidArgument(
        "weights: W_query, W_key, W_value and out_proj weight are required");
  }
  const int qkv_biases =
      (w.b_query != nullptr) + (w.b_key != nullptr) + (w.b_value != nullptr);
  if (qkv_biases != 0 && qkv_biases != 3) {
    return InvalidArgument(
        "weights: give all of W_query, W_key and W_value biases or none");
  }
  if ((qkv_biases == 3) != c.qkv_bias) {
    return InvalidArgument(
        std::string("qkv_bias is ") + (c.qkv_bias ? "true" : "false") +
        " but the q/k/v biases are " + (qkv_biases ? "given" : "absent"));
  }
  return {};
}

// The dtype and step weights `options` ask for, on this CPU and for `c`.
Status CheckDTypes(const MhaConfig& c, const MhaOptions& options) {
  ATTN_RETURN_IF_ERROR(CheckDenseDType(options.dtype, "an MHA model"));
  if (const auto quant = ops::QuantTypeOf(options.step_weights);
      quant && (options.sessions || !options.decode)) {
    return InvalidArgument(std::string("MhaOptions::step_weights ") +
                           kernels::QuantName(*quant) +
                           " needs sessions false and decode true: quantized "
                           "projections serve decoders only");
  }
  ATTN_RETURN_IF_ERROR(CheckDTypeSupported(options.dtype));
  // A session would rotate its q and k planes in dtype; a decoder rotates
  // its fp32 rows.
  if (c.rope.theta != 0.0 && options.dtype != DType::kF32 &&
      (options.sessions || !options.decode)) {
    return Unsupported(
        "rotary embeddings with dtype bf16 run in decoders only "
        "(MhaOptions::sessions false, decode true; attn run: "
        "--incremental); use dtype f32");
  }
  return {};
}

// Copies the biases of `w` into m's: [b_query; b_key; b_value] with
// qkv_bias, and out_proj's (zeros when absent: x + 0 == x, so the biased
// path's kernels and results serve Llama too).
void CopyBiases(const float* b_query, const float* b_key, const float* b_value,
                const float* b_out, MhaModelData& m) {
  const MhaConfig& c = m.config;
  const auto out = static_cast<size_t>(c.d_out);
  const auto kv = static_cast<size_t>(KvDim(c));
  const auto proj = static_cast<size_t>(OutDim(c));
  if (c.qkv_bias) {
    m.b_qkv.resize(out + 2 * kv);
    float* b = m.b_qkv.data();
    std::memcpy(b, b_query, out * sizeof(float));
    std::memcpy(b + out, b_key, kv * sizeof(float));
    std::memcpy(b + out + kv, b_value, kv * sizeof(float));
  }
  if (b_out) {
    m.b_out.assign(b_out, b_out + proj);
  } else {
    m.b_out.assign(proj, 0.0f);
  }
}

Status OutOfMemoryForWeights(const MhaConfig& c) {
  return OutOfMemory("cannot allocate the weights (d_in " +
                     std::to_string(c.d_in) + ", d_out " +
                     std::to_string(c.d_out) + ")");
}

// Copies `w` into m's fp32 weights: [W_query; W_key; W_value], each [rows,
// d_in], out_proj, and their biases.
Status CopyWeights(const MhaWeights& w, MhaModelData& m) {
  const MhaConfig& c = m.config;
  const auto in = static_cast<size_t>(c.d_in);
  const auto out = static_cast<size_t>(c.d_out);
  const auto kv = static_cast<size_t>(KvDim(c));
  const auto proj = static_cast<size_t>(OutDim(c));
  try {
    m.w_qkv.resize((out + 2 * kv) * in);
    float* rows = m.w_qkv.data();
    std::memcpy(rows, w.w_query, out * in * sizeof(float));
    std::memcpy(rows + out * in, w.w_key, kv * in * sizeof(float));
    std::memcpy(rows + (out + kv) * in, w.w_value, kv * in * sizeof(float));
    m.w_out.assign(w.w_out, w.w_out + proj * out);
    CopyBiases(w.b_query, w.b_key, w.b_value, w.b_out, m);
  } catch (const std::bad_alloc&) {
    return OutOfMemoryForWeights(c);
  }
  return {};
}

// `m` for `config` with `options` applied and checked, weights not yet
// held.
Status InitModel(const MhaConfig& config, const MhaOptions& options,
                 MhaModelData& m) {
  MhaConfig& c = m.config;
  c = config;
  if (options.num_heads != 0) c.num_heads = options.num_heads;
  if (options.context_length != 0) c.context_length = options.context_length;
  if (options.num_kv_heads != 0) c.num_kv_heads = options.num_kv_heads;
  if (options.rope.theta != 0.0) c.rope = options.rope;
  if (options.sliding_window != 0) c.sliding_window = options.sliding_window;
  ATTN_RETURN_IF_ERROR(CheckDims(c));
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  ATTN_RETURN_IF_ERROR(CheckAttentionVariant(c));
  ATTN_RETURN_IF_ERROR(CheckDTypes(c, options));
  m.dtype = options.dtype;
  m.step_weights = options.step_weights;
  ATTN_ASSIGN_OR_RETURN(m.num_threads, ResolveNumThreads(options));
  m.max_memory_bytes = ResolveMaxMemory(options.max_memory_bytes);
  return {};
}

}  // namespace

Result<std::shared_ptr<const MhaModel>> MhaModel::Create(
    const MhaConfig& config, const MhaWeights& w, const MhaOptions& options) {
  return ModelAccess::CreateMha(config, w, options, /*decoders_only=*/false);
}

Result<std::shared_ptr<const MhaModel>> ModelAccess::CreateMha(
    const MhaConfig& config, const MhaWeights& w, const MhaOptions& options,
    bool decoders_only) {
  if (decoders_only && (options.sessions || !options.decode)) {
    return InvalidArgument(
        "a model for decoders alone takes MhaOptions "
        "sessions false and decode true");
  }
  auto impl = std::make_unique<MhaModel::Impl>();
  ATTN_RETURN_IF_ERROR(InitModel(config, options, *impl));
  const MhaConfig& c = impl->config;
  ATTN_RETURN_IF_ERROR(CheckWeightsGiven(c, w));
  ATTN_RETURN_IF_ERROR(CheckMemory("the model's weights", WeightBytes(c),
                                   impl->max_memory_bytes));
  ATTN_RETURN_IF_ERROR(CopyWeights(w, *impl));
  if (options.step_weights == DType::kBF16) {  // steps read them exactly
    ATTN_RETURN_IF_ERROR(ops::RoundToBf16(impl->w_qkv).status());
    ATTN_RETURN_IF_ERROR(ops::RoundToBf16(impl->w_out).status());
  }
  ATTN_RETURN_IF_ERROR(
      MakeMhaLinears(*impl, options.sessions, options.decode, decoders_only));
  return std::shared_ptr<const MhaModel>(new MhaModel(std::move(impl)));
}

Result<std::shared_ptr<const MhaModel>> MhaModel::Load(
    const std::string& path, const MhaOptions& options) {
  Result<SafetensorsFile> opened =
      SafetensorsFile::Open(path, options.max_memory_bytes);
  if (!opened.ok()) return opened.status();
  const SafetensorsFile& file = *opened;

  // d_in and d_out follow from W_query.weight, everything else must agree.
  const TensorInfo* wq = file.Find("W_query.weight");
  if (!wq) {
    return InvalidArgument("weight 'W_query.weight' is missing from '" + path +
                           "'");
  }
  if (wq->shape.size() != 2 || wq->shape[0] <= 0 || wq->shape[1] <= 0) {
    return InvalidArgument("weight 'W_query.weight' has shape " +
                           ShapeString(wq->shape) + ", want [d_out, d_in]");
  }
  MhaConfig config;
  config.d_out = wq->shape[0];
  config.d_in = wq->shape[1];
  config.qkv_bias = file.Find("W_query.bias") || file.Find("W_key.bias") ||
                    file.Find("W_value.bias");

  ATTN_ASSIGN_OR_RETURN(
      const ResolvedDims dims,
      ResolveAttentionDims(file, DimsOf(options), {}, "mask", ""));
  // Before the weights' shapes, which follow from these.
  ATTN_RETURN_IF_ERROR(ApplyDims(dims, file.Find("W_key.weight"),
                                 "W_key.weight", "the rows of 'W_query.weight'",
                                 config));
  ATTN_RETURN_IF_ERROR(CheckDims(config));

  const std::vector<int64_t> proj = {config.d_out, config.d_in};
  const std::vector<int64_t> kv_proj = {KvDim(config), config.d_in};
  const std::vector<int64_t> square = {config.d_out, config.d_out};
  const std::vector<int64_t> vec = {config.d_out};
  const std::vector<int64_t> kv_vec = {KvDim(config)};
  std::vector<std::pair<const char*, std::vector<int64_t>>> wanted = {
      {"W_query.weight", proj},
      {"W_key.weight", kv_proj},
      {"W_value.weight", kv_proj},
      {"out_proj.weight", square},
      {"out_proj.bias", vec}};
  if (config.qkv_bias) {
    wanted.insert(wanted.end(), {{"W_query.bias", vec},
                                 {"W_key.bias", kv_vec},
                                 {"W_value.bias", kv_vec}});
  }
  // Reading copies the weights once, Create copies them again and packs a
  // third copy; for decoders also a packed copy of the projections and
  // their panels (at most fp32 too).
  ATTN_RETURN_IF_ERROR(
      CheckMemory("loading the weights of '" + path + "'",
                  MulSat(options.decode ? 5 : 3, WeightBytes(config)),
                  ResolveMaxMemory(options.max_memory_bytes)));
  std::vector<std::vector<float>> values;
  for (const auto& [name, shape] : wanted) {
    Result<std::vector<float>> v = ReadWeight(file, name, shape);
    if (!v.ok()) return v.status();
    values.push_back(std::move(v).value());
  }
  MhaWeights w;
  w.w_query = values[0].data();
  w.w_key = values[1].data();
  w.w_value = values[2].data();
  w.w_out = values[3].data();
  w.b_out = values[4].data();
  if (config.qkv_bias) {
    w.b_query = values[5].data();
    w.b_key = values[6].data();
    w.b_value = values[7].data();
  }
  MhaOptions rest = options;  // the attention's fields are in config
  rest.num_heads = rest.num_kv_heads = rest.sliding_window = 0;
  rest.rope = {};
  return Create(config, w, rest);
}

// Everything one (batch, seq_len) needs, created by Prepare: the one-node
// program on the Runner, whose arena holds the operator's activations and
// scratch.
struct MhaSession::Plan {
  explicit Plan(const MhaModelData& m)
      : program(m.config.d_in, OutDim(m.config)),
        runner(program.bound(), RunnerPolicy{}, m.num_threads) {}
  AttentionProgram program;
  Runner runner;
  std::unique_ptr<AttentionOp> op;
  int64_t seq_len = 0;
};

MhaSession::MhaSession(std::shared_ptr<const MhaModel> model)
    : model_(std::move(model)) {}
MhaSession::MhaSession(MhaSession&&) noexcept = default;
MhaSession& MhaSession::operator=(MhaSession&&) noexcept = default;
MhaSession::~MhaSession() = default;

size_t MhaSession::workspace_bytes() const {
  return plan_ ? plan_->op->bytes() + plan_->runner.bytes() : 0;
}

namespace {

Status CheckRunShape(const MhaConfig& c, int64_t batch, int64_t seq_len) {
  if (batch <= 0 || batch > kMaxDim) {
    return InvalidArgument("batch is " + std::to_string(batch) +
                           ", want a positive size");
  }
  if (seq_len <= 0 || seq_len > kMaxDim) {
    return InvalidArgument("seq_len is " + std::to_string(seq_len) +
                           ", want a positive length");
  }
  if (c.context_length > 0 && seq_len > c.context_length) {
    return InvalidArgument("sequence length " + std::to_string(seq_len) +
                           " exceeds context_length " +
                           std::to_string(c.context_length));
  }
  const int64_t R = batch * seq_len;
  if (R >
      std::numeric_limits<int64_t>::max() / (3 * std::max(c.d_in, c.d_out))) {
    return InvalidArgument("batch x seq_len " + std::to_string(R) +
                           " is too large");
  }
  return {};
}

// The memory cap, checked before any primitive or buffer exists: the
// activations and scratch estimated here (the operator checks its exact
// need, a copy of the weights it packs itself included).
Status CheckRunEstimate(const MhaModelData& m, int64_t batch, int64_t seq_len,
                        const std::string& run_what) {
  const MhaConfig& c = m.config;
  const int64_t R = batch * seq_len, d_in = c.d_in, d_out = c.d_out;
  const size_t elem = m.dtype == DType::kBF16 ? 2 : sizeof(float);
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const uint64_t activations =
      MulSat(u(R), u(4 * d_out + (elem == sizeof(float) ? 0 : d_in)));
  // Each worker of the core holds one query block of scores (and of bf16
  // probabilities) against every key.
  const int64_t block =
      std::min(kernels::AttentionShape{}.query_block, seq_len);
  const uint64_t core_scratch =
      MulSat(u(m.num_threads), MulSat(u(block * seq_len), 4 + elem));
  return CheckMemory(
      run_what,
      AddSat(AddSat(MulSat(activations, elem), core_scratch), MhaModelBytes(m)),
      m.max_memory_bytes);
}

// The layouts of the projections, packed in the model's type: forwards
// without a cache (`sessions`) write the head planes and project out;
// decoders (`decode`) project rows of prompts, and read panels of
// step_weights' type in steps; for decoders alone, without the plain
// weights where they can.
void ChooseLayouts(const MhaModelData& m, bool sessions, bool decode,
                   bool decoders_only, ops::LinearLayouts& qkv,
                   ops::LinearLayouts& out) {
  const MhaConfig& c = m.config;
  const DataType type = ops::ToDataType(m.dtype);
  if (decode) {
    qkv.packed.push_back({type, 0});
    out.packed.push_back({type, 0});
    const bool bf16 = m.step_weights == DType::kBF16;
    qkv.panels = out.panels = bf16 ? DataType::kBF16 : DataType::kF32;
  }
  qkv.drop_plain = out.drop_plain = decoders_only;
  if (!sessions) return;
  qkv.packed.push_back({type, c.d_out / c.num_heads});
  if (!decode) out.packed.push_back({type, 0});
}

// Bytes the layouts of a linear [rows, in] add to its weights.
Result<uint64_t> LayoutBytes(int64_t rows, int64_t in, bool bias,
                             const ops::LinearLayouts& layouts) {
  uint64_t bytes = 0;
  for (const ops::PackedLayout& layout : layouts.packed) {
    ATTN_ASSIGN_OR_RETURN(const uint64_t packed,
                          ops::Linear::PackedBytes(rows, in, bias, layout));
    bytes = AddSat(bytes, packed);
  }
  const bool bf16 = layouts.panels == DataType::kBF16;
  const bool shared = bf16 && !layouts.packed.empty() &&
                      layouts.packed[0].type == DataType::kBF16 &&
                      layouts.packed[0].head_dim == 0 &&
                      ops::Linear::PanelsArePackedCopy(rows, in);
  if (layouts.panels && !shared) {
    bytes = AddSat(bytes, StepWeights::BytesOf(rows, in, bf16));
  }
  return bytes;
}

// Bytes of the attention's projections held as `quant`'s packed blocks.
uint64_t QuantizedBytes(const MhaConfig& c, kernels::QuantType quant) {
  const auto in = static_cast<size_t>(c.d_in);
  const auto out = static_cast<size_t>(c.d_out);
  return kernels::QuantPackedBytes(quant, out + 2 * KvDim(c), in) +
         kernels::QuantPackedBytes(quant, static_cast<size_t>(OutDim(c)), out);
}

// m.qkv and m.out over quantized weights (a language model's q8_0 or
// q4_0), which only decoders read: the fp32 weights are then dropped.
Status HoldQuantizedLinears(MhaModelData& m, ops::Weight qkv, ops::Weight out) {
  const MhaConfig& c = m.config;
  const int64_t qkv_rows = c.d_out + 2 * KvDim(c);
  const ops::LinearLayouts layouts;  // none: decoders read the blocks
  ops::Weight qkv_bias;
  if (c.qkv_bias) qkv_bias = ops::Weight::Borrow(m.b_qkv.data(), qkv_rows, 1);
  ATTN_ASSIGN_OR_RETURN(
      m.qkv, ops::Linear::Create(std::move(qkv), std::move(qkv_bias), layouts,
                                 m.num_threads));
  ATTN_ASSIGN_OR_RETURN(
      m.out,
      ops::Linear::Create(std::move(out),
                          ops::Weight::Borrow(m.b_out.data(), OutDim(c), 1),
                          layouts, m.num_threads));
  StreamedVector<float>().swap(m.w_qkv);
  StreamedVector<float>().swap(m.w_out);
  m.decode = true;
  return {};
}

Status QuantizeMhaLinears(MhaModelData& m, kernels::QuantType quant) {
  const MhaConfig& c = m.config;
  ATTN_RETURN_IF_ERROR(CheckMemory(
      "the model's quantized weights",
      AddSat(WeightBytes(c), QuantizedBytes(c, quant)), m.max_memory_bytes));
  ATTN_ASSIGN_OR_RETURN(
      ops::Weight qkv, ops::Weight::Quantize(
                           m.w_qkv.data(), c.d_out + 2 * KvDim(c), c.d_in,
                           quant, m.num_threads, "the attention's q, k and v"));
  ATTN_ASSIGN_OR_RETURN(
      ops::Weight out,
      ops::Weight::Quantize(m.w_out.data(), OutDim(c), c.d_out, quant,
                            m.num_threads, "the attention's out_proj"));
  return HoldQuantizedLinears(m, std::move(qkv), std::move(out));
}

}  // namespace

Status MakeMhaLinears(MhaModelData& m, bool sessions, bool decode,
                      bool decoders_only) {
  const ThreadScope threads(m.num_threads);
  if (const auto quant = ops::QuantTypeOf(m.step_weights)) {
    return QuantizeMhaLinears(m, *quant);  // decoders only (Create checks)
  }
  const MhaConfig& c = m.config;
  const int64_t qkv_rows = c.d_out + 2 * KvDim(c);
  ops::LinearLayouts qkv_layouts, out_layouts;
  ChooseLayouts(m, sessions, decode, decoders_only, qkv_layouts, out_layouts);
  ATTN_ASSIGN_OR_RETURN(const uint64_t qkv_bytes,
                        LayoutBytes(qkv_rows, c.d_in, c.qkv_bias, qkv_layouts));
  ATTN_ASSIGN_OR_RETURN(const uint64_t out_bytes,
                        LayoutBytes(OutDim(c), c.d_out, true, out_layouts));
  ATTN_RETURN_IF_ERROR(
      CheckMemory(decode ? "the model's packed and decode weights"
                         : "the model's packed weights",
                  AddSat(WeightBytes(c), AddSat(qkv_bytes, out_bytes)),
                  m.max_memory_bytes));
  ops::Weight qkv_bias;
  if (c.qkv_bias) qkv_bias = ops::Weight::Borrow(m.b_qkv.data(), qkv_rows, 1);
  ATTN_ASSIGN_OR_RETURN(
      m.qkv,
      ops::Linear::Create(ops::Weight::Borrow(m.w_qkv.data(), qkv_rows, c.d_in),
                          std::move(qkv_bias), qkv_layouts, m.num_threads));
  ATTN_ASSIGN_OR_RETURN(
      m.out, ops::Linear::Create(
                 ops::Weight::Borrow(m.w_out.data(), OutDim(c), c.d_out),
                 ops::Weight::Borrow(m.b_out.data(), OutDim(c), 1), out_layouts,
                 m.num_threads));
  if (m.qkv.weight().empty()) StreamedVector<float>().swap(m.w_qkv);
  if (m.out.weight().empty()) StreamedVector<float>().swap(m.w_out);
  m.decode = decode;
  return {};
}

Result<std::shared_ptr<const MhaModel>> ModelAccess::CreateQuantizedMha(
    const MhaConfig& config, const QuantizedMhaWeights& w,
    const MhaOptions& options) {
  auto impl = std::make_unique<MhaModel::Impl>();
  ATTN_RETURN_IF_ERROR(InitModel(config, options, *impl));
  const MhaConfig& c = impl->config;
  if (ops::QuantTypeOf(options.step_weights) != w.quant) {
    return InvalidArgument(
        std::string("MhaOptions::step_weights must be the projections' ") +
        kernels::QuantName(w.quant));
  }
  const int biases =
      (w.b_query != nullptr) + (w.b_key != nullptr) + (w.b_value != nullptr);
  if (biases != (c.qkv_bias ? 3 : 0)) {
    return InvalidArgument("qkv_bias and the q/k/v biases given disagree");
  }
  const auto floats = static_cast<uint64_t>(
      (c.qkv_bias ? c.d_out + 2 * KvDim(c) : 0) + OutDim(c));
  ATTN_RETURN_IF_ERROR(CheckMemory(
      "the model's quantized weights",
      AddSat(MulSat(floats, sizeof(float)), QuantizedBytes(c, w.quant)),
      impl->max_memory_bytes));
  try {
    CopyBiases(w.b_query, w.b_key, w.b_value, w.b_out, *impl);
  } catch (const std::bad_alloc&) {
    return OutOfMemoryForWeights(c);
  }
  const ThreadScope threads(impl->num_threads);
  ATTN_ASSIGN_OR_RETURN(
      ops::Weight qkv,
      ops::Weight::FromBlocks(w.qkv, c.d_out + 2 * KvDim(c), c.d_in, w.quant,
                              impl->num_threads, "the attention's q, k and v"));
  ATTN_ASSIGN_OR_RETURN(
      ops::Weight out,
      ops::Weight::FromBlocks(w.out, OutDim(c), c.d_out, w.quant,
                              impl->num_threads, "the attention's out_proj"));
  ATTN_RETURN_IF_ERROR(
      HoldQuantizedLinears(*impl, std::move(qkv), std::move(out)));
  return std::shared_ptr<const MhaModel>(new MhaModel(std::move(impl)));
}

uint64_t MhaModelBytes(const MhaModelData& m) {
  const size_t floats =
      m.w_qkv.size() + m.b_qkv.size() + m.w_out.size() + m.b_out.size();
  return AddSat(floats * sizeof(float), m.qkv.bytes() + m.out.bytes());
}

Result<std::unique_ptr<AttentionOp>> PlanMhaRun(const MhaModelData& m,
                                                int64_t batch, int64_t seq_len,
                                                uint64_t held,
                                                const std::string& what) {
  if (const auto& quant = m.qkv.weight().quant()) {
    return InvalidArgument(std::string("an MhaSession cannot run projections "
                                       "quantized as ") +
                           kernels::QuantName(*quant) +
                           " (MhaOptions::step_weights); MhaDecoder can");
  }
  ATTN_RETURN_IF_ERROR(CheckRunShape(m.config, batch, seq_len));
  ATTN_RETURN_IF_ERROR(CheckRunEstimate(m, batch, seq_len, what));
  const DataType low =
      m.dtype == DType::kBF16 ? DataType::kBF16 : DataType::kF32;
  return AttentionOp::Create(m, low, batch, seq_len, nullptr, m.num_threads,
                             held, what);
}

Status MhaSession::Prepare(int64_t batch, int64_t seq_len) {
  if (!model_) return InvalidArgument("session has no model");
  const MhaModelData& m = ModelAccess::Of(*model_);
  // Only a valid shape was ever planned; PlanMhaRun checks a new one.
  if (plan_ && plan_->op->batch() == batch && plan_->op->seq_len() == seq_len) {
    return {};
  }
  plan_.reset();
  const std::string run_what = "a run of batch " + std::to_string(batch) +
                               " x seq_len " + std::to_string(seq_len);
  auto plan = std::make_unique<Plan>(m);
  const uint64_t held = MhaModelBytes(m);
  ATTN_ASSIGN_OR_RETURN(plan->op,
                        PlanMhaRun(m, batch, seq_len, held, run_what));
  const auto& sizes = plan->op->buffer_bytes();
  const std::vector<std::vector<size_t>> buffers = {
      std::vector<size_t>(sizes.begin(), sizes.end())};
  ATTN_RETURN_IF_ERROR(plan->runner.Prepare(
      RunShape{batch * seq_len, std::nullopt, 0}, buffers, {},
      AddSat(held, plan->op->bytes()), m.max_memory_bytes, run_what));
  plan->seq_len = seq_len;
  plan_ = std::move(plan);
  return {};
}

Status MhaSession::Run(const float* input, int64_t batch, int64_t seq_len,
                       float* output) {
  if (!input || !output) {
    return InvalidArgument("input and output must not be null");
  }
  ATTN_RETURN_IF_ERROR(Prepare(batch, seq_len));
  Plan& p = *plan_;
  const auto attend = [&p](size_t, size_t, const float* src, float* dst,
                           void* const* buffers) {
    AttentionOp::Buffers b;
    std::copy(buffers, buffers + AttentionOp::kNumBuffers, b.begin());
    p.op->Forward(src, nullptr, dst, b);
    return Status();
  };
  return p.runner.Run(0, RunRows{p.seq_len, nullptr, nullptr, nullptr}, input,
                      output, attend, ModelAccess::Of(*model_).num_threads);
}

double AttentionCoreFlops(const MhaConfig& config, int64_t batch,
                          int64_t seq_len) {
  const double t = double(seq_len), w = double(config.sliding_window);
  const bool window =
      config.sliding_window > 0 && config.sliding_window < seq_len;
  const double pairs = window ? t * w - w * w / 2 : t * t / 2;
  return 4.0 * double(batch) * pairs * double(config.d_out);
}

double AttentionFlops(const MhaConfig& config, int64_t batch, int64_t seq_len) {
  const double d_in = double(config.d_in), d_out = double(config.d_out);
  const double kv_dim = config.num_kv_heads > 0
                            ? double(config.num_kv_heads) *
                                  double(config.d_out / config.num_heads)
                            : d_out;
  return 2.0 * double(batch) * double(seq_len) *
             (d_in * (d_out + 2.0 * kv_dim) + d_out * double(OutDim(config))) +
         AttentionCoreFlops(config, batch, seq_len);
}

}  // namespace attn
