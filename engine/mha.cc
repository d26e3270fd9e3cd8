// MhaModel (validated, immutable weights) and MhaSession (per-shape plan:
// primitives, packed weights and buffers created once, then straight-line
// forward passes).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "engine/buffer.h"
#include "engine/limits.h"
#include "engine/mha_model.h"
#include "engine/model_config.h"
#include "engine/threads.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
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

// Bytes of the fp32 weights a model of config `c` holds (saturating).
uint64_t WeightBytes(const MhaConfig& c) {
  const auto in = static_cast<uint64_t>(c.d_in);
  const auto out = static_cast<uint64_t>(c.d_out);
  uint64_t floats = AddSat(MulSat(3 * out, in), MulSat(out, out));
  floats = AddSat(floats, (c.qkv_bias ? 4 : 1) * out);
  return MulSat(floats, sizeof(float));
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

MhaModel::MhaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MhaModel::~MhaModel() = default;
const MhaConfig& MhaModel::config() const { return impl_->config; }
DType MhaModel::dtype() const { return impl_->dtype; }
int MhaModel::num_threads() const { return impl_->num_threads; }

Result<std::shared_ptr<const MhaModel>> MhaModel::Create(
    const MhaConfig& config, const MhaWeights& w, const MhaOptions& options) {
  auto impl = std::make_unique<Impl>();
  MhaConfig& c = impl->config;
  c = config;
  if (options.num_heads != 0) c.num_heads = options.num_heads;
  if (options.context_length != 0) c.context_length = options.context_length;
  ATTN_RETURN_IF_ERROR(CheckDims(c));
  if (!w.w_query || !w.w_key || !w.w_value || !w.w_out || !w.b_out) {
    return InvalidArgument(
        "weights: W_query, W_key, W_value, out_proj weight and bias are "
        "required");
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
  ATTN_RETURN_IF_ERROR(CheckDTypeSupported(options.dtype));
  impl->dtype = options.dtype;
  Result<int> threads = ResolveNumThreads(options);
  if (!threads.ok()) return threads.status();
  impl->num_threads = *threads;
  impl->max_memory_bytes = ResolveMaxMemory(options.max_memory_bytes);
  ATTN_RETURN_IF_ERROR(CheckMemory("the model's weights", WeightBytes(c),
                                   impl->max_memory_bytes));

  const auto in = static_cast<size_t>(c.d_in);
  const auto out = static_cast<size_t>(c.d_out);
  try {
    impl->w_qkv.resize(3 * out * in);
    std::memcpy(impl->w_qkv.data(), w.w_query, out * in * sizeof(float));
    std::memcpy(impl->w_qkv.data() + out * in, w.w_key,
                out * in * sizeof(float));
    std::memcpy(impl->w_qkv.data() + 2 * out * in, w.w_value,
                out * in * sizeof(float));
    if (c.qkv_bias) {
      impl->b_qkv.resize(3 * out);
      std::memcpy(impl->b_qkv.data(), w.b_query, out * sizeof(float));
      std::memcpy(impl->b_qkv.data() + out, w.b_key, out * sizeof(float));
      std::memcpy(impl->b_qkv.data() + 2 * out, w.b_value, out * sizeof(float));
    }
    impl->w_out.assign(w.w_out, w.w_out + out * out);
    impl->b_out.assign(w.b_out, w.b_out + out);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate the weights (d_in " +
                       std::to_string(c.d_in) + ", d_out " +
                       std::to_string(c.d_out) + ")");
  }
  return std::shared_ptr<const MhaModel>(new MhaModel(std::move(impl)));
}

Result<std::shared_ptr<const MhaModel>> MhaModel::Load(
    const std::string& path, const MhaOptions& options) {
  Result<SafetensorsFile> opened = SafetensorsFile::Open(path);
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
      const AttentionDims dims,
      ResolveAttentionDims(file, {options.num_heads, options.context_length},
                           {}, "mask", ""));
  config.num_heads = dims.num_heads;
  config.context_length = dims.context_length;

  const std::vector<int64_t> proj = {config.d_out, config.d_in};
  const std::vector<int64_t> square = {config.d_out, config.d_out};
  const std::vector<int64_t> vec = {config.d_out};
  std::vector<std::pair<const char*, std::vector<int64_t>>> wanted = {
      {"W_query.weight", proj},
      {"W_key.weight", proj},
      {"W_value.weight", proj},
      {"out_proj.weight", square},
      {"out_proj.bias", vec}};
  if (config.qkv_bias) {
    wanted.insert(
        wanted.end(),
        {{"W_query.bias", vec}, {"W_key.bias", vec}, {"W_value.bias", vec}});
  }
  // Reading copies the weights once, then Create copies them again.
  ATTN_RETURN_IF_ERROR(CheckMemory("loading the weights of '" + path + "'",
                                   MulSat(2, WeightBytes(config)),
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
  MhaOptions rest = options;
  rest.num_heads = 0;  // already folded into config
  return Create(config, w, rest);
}

// Everything one (batch, seq_len) needs, created by Prepare.
struct MhaSession::Plan {
  int64_t batch = 0, seq_len = 0;
  std::optional<kernels::Convert> to_bf16;  // bf16 only: input conversion
  std::optional<kernels::MatMul> qkv_proj, out_proj;
  std::optional<kernels::CausalAttention> core;
  AlignedBuffer w_qkv, b_qkv, w_out, b_out;  // packed for the primitives
  AlignedBuffer x_low, qkv, ctx, proj_scratch, core_scratch;
  int num_threads = 1;
  // Tiny blocks run kernels::TinyMhaForward (no primitives) with `qkv` as
  // its scratch.
  std::optional<kernels::TinyMhaShape> tiny;

  size_t bytes() const {
    size_t total = 0;
    for (const AlignedBuffer* b : {&w_qkv, &b_qkv, &w_out, &b_out, &x_low, &qkv,
                                   &ctx, &proj_scratch, &core_scratch}) {
      total += b->size();
    }
    return total;
  }
};

MhaSession::MhaSession(std::shared_ptr<const MhaModel> model)
    : model_(std::move(model)) {}
MhaSession::MhaSession(MhaSession&&) noexcept = default;
MhaSession& MhaSession::operator=(MhaSession&&) noexcept = default;
MhaSession::~MhaSession() = default;

size_t MhaSession::workspace_bytes() const {
  return plan_ ? plan_->bytes() : 0;
}

namespace {

Result<AlignedBuffer> Allocate(size_t bytes) {
  return AlignedBuffer::Allocate(bytes);
}

}  // namespace

Status MhaSession::Prepare(int64_t batch, int64_t seq_len) {
  if (!model_) return InvalidArgument("session has no model");
  const MhaModel::Impl& m = *model_->impl_;
  const MhaConfig& c = m.config;
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
  if (plan_ && plan_->batch == batch && plan_->seq_len == seq_len) return {};
  plan_.reset();

  // Shapes: B batch, T seq_len, R = B*T rows, H heads, D head_dim.
  const int64_t R = batch * seq_len, H = c.num_heads, D = c.d_out / H;
  const int64_t d_in = c.d_in, d_out = c.d_out, G = 3 * H;
  if (R > std::numeric_limits<int64_t>::max() / (3 * std::max(d_in, d_out))) {
    return InvalidArgument("batch x seq_len " + std::to_string(R) +
                           " is too large");
  }
  const DataType low =
      m.dtype == DType::kBF16 ? DataType::kBF16 : DataType::kF32;
  const size_t elem = kernels::SizeOf(low);
  // The memory cap, checked before any primitive or buffer exists: the
  // activations and packed weights estimated here, exactly below.
  const std::string run_what = "a run of batch " + std::to_string(batch) +
                               " x seq_len " + std::to_string(seq_len);
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const uint64_t activations =
      MulSat(u(R), u(4 * d_out + (elem == sizeof(float) ? 0 : d_in)));
  const uint64_t packed = MulSat(u(3 * d_in + d_out), u(d_out));
  // Each worker of the core holds one query block of scores (and of bf16
  // probabilities) against every key.
  const int64_t block =
      std::min(kernels::AttentionShape{}.query_block, seq_len);
  const uint64_t core_scratch =
      MulSat(u(m.num_threads), MulSat(u(block * seq_len), 4 + elem));
  ATTN_RETURN_IF_ERROR(CheckMemory(
      run_what,
      AddSat(AddSat(MulSat(AddSat(activations, packed), elem), core_scratch),
             WeightBytes(c)),
      m.max_memory_bytes));
  auto plan = std::make_unique<Plan>();
  plan->batch = batch;
  plan->seq_len = seq_len;
  // The FLOP count of the convention (the core at its causal half).
  const double flops =
      2.0 * double(R) * (3.0 * double(d_in) * d_out + double(d_out) * d_out) +
      2.0 * double(R) * double(seq_len) * d_out;
  if (low == DataType::kF32 && flops < kernels::kTinyMhaMaxFlops) {
    const kernels::TinyMhaShape tiny{batch, seq_len, d_in, d_out, H};
    Result<AlignedBuffer> scratch =
        Allocate(kernels::TinyMhaScratchFloats(tiny) * sizeof(float));
    if (!scratch.ok()) return scratch.status();
    plan->qkv = std::move(scratch).value();
    plan->tiny = tiny;
    plan_ = std::move(plan);
    return {};
  }
  const ThreadScope threads(m.num_threads);
  plan->num_threads = threads.num_threads();

  // x [1, R, d_in] x W_qkv [G, d_in, D] + b [G, 1, D] -> qkv [G, R, D]:
  // one matmul writes q, k and v head-major, dense per head.
  const kernels::Operand qkv_bias{{G, 1, D}, {}, DataType::kF32};
  Result<kernels::MatMul> qkv_proj =
      kernels::MatMul::Create({{1, R, d_in}, {}, low}, {{G, d_in, D}, {}, low},
                              c.qkv_bias ? &qkv_bias : nullptr,
                              {{G, R, D}, {}, low}, kernels::Threading::kTeam);
  if (!qkv_proj.ok()) return qkv_proj.status();
  // ctx [R, d_out] x W_out^T [d_out, d_out] + b_out -> y [R, d_out] f32.
  const kernels::Operand out_bias{{1, d_out}, {}, DataType::kF32};
  Result<kernels::MatMul> out_proj = kernels::MatMul::Create(
      {{R, d_out}, {}, low}, {{d_out, d_out}, {}, low}, &out_bias,
      {{R, d_out}, {}, DataType::kF32}, kernels::Threading::kTeam);
  if (!out_proj.ok()) return out_proj.status();
  kernels::AttentionShape shape;
  shape.batch = batch;
  shape.seq_len = seq_len;
  shape.num_heads = H;
  shape.head_dim = D;
  shape.type = low;
  Result<kernels::CausalAttention> core =
      kernels::CausalAttention::Create(shape);
  if (!core.ok()) return core.status();

  const auto rows = static_cast<size_t>(R);
  struct Want {
    AlignedBuffer* buffer;
    size_t bytes;
  };
  const Want wants[] = {
      {&plan->w_qkv, qkv_proj->packed_weights_bytes()},
      {&plan->w_out, out_proj->packed_weights_bytes()},
      {&plan->b_qkv, m.b_qkv.size() * sizeof(float)},
      {&plan->b_out, m.b_out.size() * sizeof(float)},
      {&plan->x_low,
       low == DataType::kBF16 ? rows * static_cast<size_t>(d_in) * elem : 0},
      {&plan->qkv, rows * static_cast<size_t>(3 * d_out) * elem},
      {&plan->ctx, rows * static_cast<size_t>(d_out) * elem},
      {&plan->proj_scratch,
       std::max(qkv_proj->scratch_bytes(), out_proj->scratch_bytes()) *
           static_cast<size_t>(plan->num_threads)},
      {&plan->core_scratch,
       core->worker_scratch_bytes() * static_cast<size_t>(plan->num_threads)}};
  uint64_t need = WeightBytes(c);
  for (const Want& want : wants) need = AddSat(need, want.bytes);
  ATTN_RETURN_IF_ERROR(CheckMemory(run_what, need, m.max_memory_bytes));
  for (const Want& want : wants) {
    Result<AlignedBuffer> buffer = Allocate(want.bytes);
    if (!buffer.ok()) return buffer.status();
    *want.buffer = std::move(buffer).value();
  }
  // Weights as oneDNN wants them: W_qkv viewed as [G, d_in, D] is
  // element (g, i, j) = w_qkv[(g * D + j) * d_in + i]; W_out^T likewise.
  ATTN_RETURN_IF_ERROR(
      qkv_proj->PackWeights({{G, d_in, D}, {D * d_in, 1, d_in}, DataType::kF32},
                            m.w_qkv.data(), plan->w_qkv.data()));
  ATTN_RETURN_IF_ERROR(
      out_proj->PackWeights({{d_out, d_out}, {1, d_out}, DataType::kF32},
                            m.w_out.data(), plan->w_out.data()));
  if (!m.b_qkv.empty()) {
    std::memcpy(plan->b_qkv.data(), m.b_qkv.data(), plan->b_qkv.size());
  }
  std::memcpy(plan->b_out.data(), m.b_out.data(), plan->b_out.size());
  if (low == DataType::kBF16) {
    Result<kernels::Convert> convert =
        kernels::Convert::Create(R * d_in, DataType::kF32, DataType::kBF16);
    if (!convert.ok()) return convert.status();
    plan->to_bf16.emplace(std::move(convert).value());
  }
  plan->qkv_proj.emplace(std::move(qkv_proj).value());
  plan->out_proj.emplace(std::move(out_proj).value());
  plan->core.emplace(std::move(core).value());
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
  if (p.tiny) {
    const MhaModel::Impl& m = *model_->impl_;
    kernels::TinyMhaForward(*p.tiny, input, m.w_qkv.data(),
                            m.b_qkv.empty() ? nullptr : m.b_qkv.data(),
                            m.w_out.data(), m.b_out.data(),
                            static_cast<float*>(p.qkv.data()), output);
    return {};
  }
  const ThreadScope threads(p.num_threads);
  // x: [B*T, d_in] -> qkv: [3, H, B*T, D], one fused projection.
  const void* x = input;
  if (p.to_bf16) {
    p.to_bf16->Run(input, p.x_low.data());
    x = p.x_low.data();
  }
  p.qkv_proj->Run(x, p.w_qkv.data(), p.b_qkv.data(), p.qkv.data(),
                  p.proj_scratch.data(), threads.num_threads());
  // Per (batch, head, query block): softmax(q k^T / sqrt(D), causal) v.
  p.core->Run(p.qkv.data(), p.ctx.data(), p.core_scratch.data(),
              threads.num_threads());
  // ctx: [B*T, d_out] -> y: [B*T, d_out].
  p.out_proj->Run(p.ctx.data(), p.w_out.data(), p.b_out.data(), output,
                  p.proj_scratch.data(), threads.num_threads());
  return {};
}

}  // namespace attn
