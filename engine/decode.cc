// MhaDecoder: a KV cache per sequence and the forward pass of new tokens
// against it (see attn/decode.hpp). Per step, straight-line: one fused QKV
// projection of the new tokens, K and V appended to the cache, the decode
// attention kernel (kernels/decode.h), one output projection.
#include "attn/decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/buffer.h"
#include "engine/limits.h"
#include "engine/mha_model.h"
#include "engine/threads.h"
#include "kernels/attention.h"
#include "kernels/decode.h"
#include "kernels/matmul.h"
#include "kernels/rows_linear.h"

namespace attn {

using kernels::DataType;

namespace {

// The projections for steps of `rows` new tokens (matmuls with weights
// packed for them, unless the rows are few enough for kernels::RowsLinear),
// and the step's buffers.
struct Projection {
  int64_t rows = 0;
  std::optional<kernels::MatMul> qkv_proj, out_proj;
  AlignedBuffer w_qkv, w_out;  // packed
  AlignedBuffer qkv;           // [rows, 3 * d_out]: q, k, v of each token
  AlignedBuffer q;             // [rows, H, Dp], zero padded
  AlignedBuffer ctx;           // [rows, d_out], heads merged
  AlignedBuffer scratch;       // for either matmul

  size_t bytes() const {
    return w_qkv.size() + w_out.size() + qkv.size() + q.size() + ctx.size() +
           scratch.size();
  }
};

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

struct MhaDecoder::Impl {
  std::shared_ptr<const MhaModel> model;
  const MhaModel::Impl* m = nullptr;
  // B sequences of at most `capacity` tokens; H heads of D floats, each
  // cache row padded to Dp.
  int64_t B = 0, capacity = 0, H = 0, D = 0, Dp = 0, d_in = 0, d_out = 0;
  int num_threads = 1;
  std::vector<int64_t> lengths;
  AlignedBuffer k_cache, v_cache;  // [B, H, capacity, Dp] each
  AlignedBuffer partials;          // the kernel's split-KV partials
  size_t max_partials = 0;         // slots in `partials`
  std::vector<kernels::DecodeRow> rows;
  std::vector<int64_t> counts;  // Decode's all-ones counts
  Projection step;              // rows == B: Decode, and Prefill when equal
  Projection other;             // the last other Prefill size
  // Fresh prompts of one length run through the full-sequence causal core.
  struct {
    int64_t batch = 0, seq_len = 0;
    std::optional<kernels::CausalAttention> core;
    AlignedBuffer qkv;  // [3, H, batch * seq_len, D], head-major
    AlignedBuffer scratch;
  } prompt;

  // Bytes the weights, the cache and the decode buffers hold.
  uint64_t HeldBytes() const {
    const uint64_t weights = 4 * (m->w_qkv.size() + m->b_qkv.size() +
                                  m->w_out.size() + m->b_out.size());
    return AddSat(AddSat(weights, k_cache.size() + v_cache.size()),
                  partials.size() + step.bytes());
  }
  // The memory cap (MhaOptions::max_memory_bytes) against `extra` more.
  Status CheckCap(const std::string& what, uint64_t extra) const {
    return CheckMemory(what, AddSat(HeldBytes(), extra), m->max_memory_bytes);
  }
  Status MakeProjection(int64_t rows, Projection& p) const;
  Status MakeMatMuls(Projection& p, uint64_t held) const;
  void Project(const Projection& p, const std::optional<kernels::MatMul>& mm,
               const AlignedBuffer& packed, const std::vector<float>& w,
               const std::vector<float>& b, const float* x, int64_t in,
               int64_t out, float* y, int threads) const;
  Status Append(const float* input, const int64_t* new_tokens, float* output);
  Status PreparePrompt(int64_t batch, int64_t seq_len);
};

Status MhaDecoder::Impl::MakeProjection(int64_t R, Projection& p) const {
  p = Projection();
  const auto rows = static_cast<size_t>(R);
  const uint64_t per_row = 4 * static_cast<uint64_t>(4 * d_out + H * Dp);
  ATTN_RETURN_IF_ERROR(CheckCap("a decoder step of " + Str(R) + " tokens",
                                MulSat(per_row, rows)));
  const struct {
    AlignedBuffer* buffer;
    size_t bytes;
  } wants[] = {{&p.qkv, rows * static_cast<size_t>(3 * d_out) * sizeof(float)},
               {&p.q, rows * static_cast<size_t>(H * Dp) * sizeof(float)},
               {&p.ctx, rows * static_cast<size_t>(d_out) * sizeof(float)}};
  for (const auto& want : wants) {
    Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(want.bytes);
    if (!buffer.ok()) return buffer.status();
    *want.buffer = std::move(buffer).value();
  }
  // The padding lanes of q stay zero: steps write only the first D.
  std::memset(p.q.data(), 0, p.q.size());
  p.rows = R;
  // A step's few rows run kernels::RowsLinear on the model's weights.
  if (rows <= kernels::kRowsLinearMaxRows) return {};
  return MakeMatMuls(p, per_row * rows);
}

Status MhaDecoder::Impl::MakeMatMuls(Projection& p, uint64_t held) const {
  const int64_t R = p.rows;
  // x [R, d_in] x W_qkv^T [d_in, 3 d_out] (+ b) -> qkv [R, 3 d_out].
  const kernels::Operand qkv_bias{{1, 3 * d_out}, {}, DataType::kF32};
  Result<kernels::MatMul> qkv_proj = kernels::MatMul::Create(
      {{R, d_in}, {}, DataType::kF32}, {{d_in, 3 * d_out}, {}, DataType::kF32},
      m->config.qkv_bias ? &qkv_bias : nullptr,
      {{R, 3 * d_out}, {}, DataType::kF32}, kernels::Threading::kTeam);
  if (!qkv_proj.ok()) return qkv_proj.status();
  // ctx [R, d_out] x W_out^T + b_out -> y [R, d_out].
  const kernels::Operand out_bias{{1, d_out}, {}, DataType::kF32};
  Result<kernels::MatMul> out_proj = kernels::MatMul::Create(
      {{R, d_out}, {}, DataType::kF32}, {{d_out, d_out}, {}, DataType::kF32},
      &out_bias, {{R, d_out}, {}, DataType::kF32}, kernels::Threading::kTeam);
  if (!out_proj.ok()) return out_proj.status();
  const size_t scratch_bytes =
      std::max(qkv_proj->scratch_bytes(), out_proj->scratch_bytes()) *
      static_cast<size_t>(num_threads);
  ATTN_RETURN_IF_ERROR(CheckCap(
      "a decoder step of " + Str(R) + " tokens",
      AddSat(held, qkv_proj->packed_weights_bytes() +
                       out_proj->packed_weights_bytes() + scratch_bytes)));
  const struct {
    AlignedBuffer* buffer;
    size_t bytes;
  } wants[] = {{&p.w_qkv, qkv_proj->packed_weights_bytes()},
               {&p.w_out, out_proj->packed_weights_bytes()},
               {&p.scratch, scratch_bytes}};
  for (const auto& want : wants) {
    Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(want.bytes);
    if (!buffer.ok()) return buffer.status();
    *want.buffer = std::move(buffer).value();
  }
  // W_qkv [3 d_out, d_in] row-major is W_qkv^T [d_in, 3 d_out] with strides
  // {1, d_in}; likewise W_out.
  ATTN_RETURN_IF_ERROR(
      qkv_proj->PackWeights({{d_in, 3 * d_out}, {1, d_in}, DataType::kF32},
                            m->w_qkv.data(), p.w_qkv.data()));
  ATTN_RETURN_IF_ERROR(
      out_proj->PackWeights({{d_out, d_out}, {1, d_out}, DataType::kF32},
                            m->w_out.data(), p.w_out.data()));
  p.qkv_proj.emplace(std::move(qkv_proj).value());
  p.out_proj.emplace(std::move(out_proj).value());
  return {};
}

// x [R, in] -> y [R, out] = x W^T + b by `mm` on its packed weights, or by
// kernels::RowsLinear on the plain ones when the step made no matmul.
void MhaDecoder::Impl::Project(const Projection& p,
                               const std::optional<kernels::MatMul>& mm,
                               const AlignedBuffer& packed,
                               const std::vector<float>& w,
                               const std::vector<float>& b, const float* x,
                               int64_t in, int64_t out, float* y,
                               int threads) const {
  if (mm) {
    mm->Run(x, packed.data(), b.data(), y, p.scratch.data(), threads);
    return;
  }
  kernels::RowsLinear(x, static_cast<size_t>(p.rows), static_cast<size_t>(in),
                      w.data(), b.empty() ? nullptr : b.data(),
                      static_cast<size_t>(out), y, threads);
}

Status MhaDecoder::Impl::PreparePrompt(int64_t batch, int64_t seq_len) {
  if (prompt.core && prompt.batch == batch && prompt.seq_len == seq_len) {
    return {};
  }
  prompt.core.reset();
  prompt.batch = prompt.seq_len = 0;
  kernels::AttentionShape shape;
  shape.batch = batch;
  shape.seq_len = seq_len;
  shape.num_heads = H;
  shape.head_dim = D;
  Result<kernels::CausalAttention> core =
      kernels::CausalAttention::Create(shape);
  if (!core.ok()) return core.status();
  const size_t bytes = static_cast<size_t>(3 * batch * seq_len) *
                       static_cast<size_t>(d_out) * sizeof(float);
  ATTN_RETURN_IF_ERROR(CheckCap(
      "a prompt of batch " + Str(batch) + " x " + Str(seq_len) + " tokens",
      AddSat(AddSat(bytes, other.bytes()),
             core->worker_scratch_bytes() * static_cast<size_t>(num_threads))));
  Result<AlignedBuffer> qkv = AlignedBuffer::Allocate(bytes);
  if (!qkv.ok()) return qkv.status();
  Result<AlignedBuffer> scratch = AlignedBuffer::Allocate(
      core->worker_scratch_bytes() * static_cast<size_t>(num_threads));
  if (!scratch.ok()) return scratch.status();
  prompt.qkv = std::move(qkv).value();
  prompt.scratch = std::move(scratch).value();
  prompt.core.emplace(std::move(core).value());
  prompt.batch = batch;
  prompt.seq_len = seq_len;
  return {};
}

Status MhaDecoder::Impl::Append(const float* input, const int64_t* new_tokens,
                                float* output) {
  if (!input || !output || !new_tokens) {
    return InvalidArgument("input, output and counts must not be null");
  }
  // Validate everything before touching any state.
  int64_t R = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = new_tokens[b];
    if (n < 0) {
      return InvalidArgument("counts[" + Str(b) + "] is " + Str(n) +
                             ", want >= 0 new tokens");
    }
    if (n > capacity - lengths[b]) {
      return InvalidArgument(
          "sequence " + Str(b) + " holds " + Str(lengths[b]) + " tokens; " +
          Str(n) + " more would exceed max_length " + Str(capacity) +
          (capacity == m->config.context_length ? " (the context_length)"
                                                : "") +
          ": Truncate or Reset it");
    }
    R += n;
  }
  if (R == 0) return {};
  Projection* p = &step;
  if (R != B) {
    p = &other;
    if (other.rows != R) {
      const Status made = MakeProjection(R, other);
      if (!made.ok()) {
        other = Projection();
        return made;
      }
    }
  }
  const ThreadScope threads(num_threads);
  const auto Hs = static_cast<size_t>(H), Ds = static_cast<size_t>(D),
             Dps = static_cast<size_t>(Dp), C = static_cast<size_t>(d_out),
             cap = static_cast<size_t>(capacity);
  auto* qkv = static_cast<float*>(p->qkv.data());
  auto* q = static_cast<float*>(p->q.data());
  auto* ctx = static_cast<float*>(p->ctx.data());
  auto* k_base = static_cast<float*>(k_cache.data());
  auto* v_base = static_cast<float*>(v_cache.data());

  // x: [R, d_in] -> qkv: [R, 3 d_out], one fused projection.
  Project(*p, p->qkv_proj, p->w_qkv, m->w_qkv, m->b_qkv, input, d_in, 3 * d_out,
          qkv, threads.num_threads());

  // Prompts of one length n >= kPromptCore, every one starting an empty
  // sequence, are the full causal forward: the matmul-based core does them
  // (as MhaSession::Run). Everything else goes through the decode kernel.
  constexpr int64_t kPromptCore = 64;
  int64_t n = 0, seqs = 0;
  bool fresh = true;
  for (int64_t b = 0; b < B; ++b) {
    if (new_tokens[b] == 0) continue;
    fresh = fresh && lengths[b] == 0 && (n == 0 || new_tokens[b] == n);
    n = new_tokens[b];
    ++seqs;
  }
  const bool use_core = fresh && n >= kPromptCore;
  if (use_core) ATTN_RETURN_IF_ERROR(PreparePrompt(seqs, n));

  // q into its padded rows; k and v appended to their sequence's cache.
  // Row r is token i of sequence b, at position lengths[b] + i.
  rows.clear();
  size_t r = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < new_tokens[b]; ++i, ++r) {
      kernels::DecodeRow row;
      const auto pos = static_cast<size_t>(lengths[b] + i);
      const size_t seq = static_cast<size_t>(b) * Hs * cap;
      row.q = q + r * Hs * Dps;
      row.k = k_base + seq * Dps;
      row.v = v_base + seq * Dps;
      row.num_keys = pos + 1;
      row.ctx = ctx + r * C;
      rows.push_back(row);
    }
  }
  const auto rows_total = static_cast<int64_t>(R);
#pragma omp parallel for num_threads(threads.num_threads()) if (R > 16)
  for (int64_t ri = 0; ri < rows_total; ++ri) {
    const kernels::DecodeRow& row = rows[static_cast<size_t>(ri)];
    const float* src = qkv + static_cast<size_t>(ri) * 3 * C;
    const size_t pos = row.num_keys - 1;
    for (size_t h = 0; h < Hs && !use_core; ++h) {
      std::memcpy(const_cast<float*>(row.q) + h * Dps, src + h * Ds,
                  Ds * sizeof(float));
    }
    for (size_t h = 0; h < Hs; ++h) {
      float* k = const_cast<float*>(row.k) + (h * cap + pos) * Dps;
      float* v = const_cast<float*>(row.v) + (h * cap + pos) * Dps;
      std::memcpy(k, src + C + h * Ds, Ds * sizeof(float));
      std::memcpy(v, src + 2 * C + h * Ds, Ds * sizeof(float));
      std::fill(k + Ds, k + Dps, 0.0f);  // padding lanes must be zero
      std::fill(v + Ds, v + Dps, 0.0f);
    }
  }

  if (use_core) {
    // qkv [R, 3, H, D] -> [3, H, R, D], the layout the core takes; then per
    // (sequence, head, query block) softmax(q k^T / sqrt(D), causal) v.
    auto* hm = static_cast<float*>(prompt.qkv.data());
#pragma omp parallel for num_threads(threads.num_threads())
    for (int64_t ri = 0; ri < rows_total; ++ri) {
      const auto row = static_cast<size_t>(ri);
      for (size_t g = 0; g < 3 * Hs; ++g) {
        std::memcpy(hm + (g * static_cast<size_t>(R) + row) * Ds,
                    qkv + row * 3 * C + g * Ds, Ds * sizeof(float));
      }
    }
    prompt.core->Run(hm, ctx, prompt.scratch.data(), threads.num_threads());
    rows.clear();  // nothing left for the decode kernel
  }

  // Per (row, head, key chunk): softmax(q k^T / sqrt(D)) v over the row's
  // visible keys, in groups of rows whose partials fit the buffer (a Decode
  // step is always one group).
  kernels::DecodeParams params;
  params.num_heads = Hs;
  params.head_dim = Ds;
  params.row_stride = Dps;
  params.head_stride = cap * Dps;
  params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto* partial_data = static_cast<float*>(partials.data());
  size_t begin = 0, used = 0;
  for (size_t i = 0; i <= rows.size(); ++i) {
    const size_t need =
        i < rows.size() ? Hs * kernels::DecodeChunks(rows[i].num_keys) : 0;
    if ((i == rows.size() && i > begin) || used + need > max_partials) {
      kernels::DecodeAttention(params, rows.data() + begin, i - begin,
                               partial_data, threads.num_threads());
      begin = i;
      used = 0;
    }
    if (i < rows.size()) {
      rows[i].first_partial = used;
      used += need;
    }
  }

  // ctx: [R, d_out] -> y: [R, d_out].
  Project(*p, p->out_proj, p->w_out, m->w_out, m->b_out, ctx, d_out, d_out,
          output, threads.num_threads());
  for (int64_t b = 0; b < B; ++b) lengths[b] += new_tokens[b];
  return {};
}

MhaDecoder::MhaDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MhaDecoder::~MhaDecoder() = default;

Result<std::unique_ptr<MhaDecoder>> MhaDecoder::Create(
    std::shared_ptr<const MhaModel> model, const DecoderOptions& options) {
  if (!model) return InvalidArgument("decoder: model is null");
  auto impl = std::make_unique<Impl>();
  impl->m = model->impl_.get();
  const MhaConfig& c = impl->m->config;
  if (options.batch <= 0 || options.batch > (int64_t{1} << 20)) {
    return InvalidArgument("decoder batch is " + Str(options.batch) +
                           ", want a positive number of sequences");
  }
  int64_t capacity = options.max_length;
  if (capacity < 0) {
    return InvalidArgument("decoder max_length is " + Str(capacity) +
                           ", want a positive length (or 0 for the model's "
                           "context_length)");
  }
  if (capacity == 0) {
    if (c.context_length == 0) {
      return InvalidArgument(
          "decoder max_length is not given and the model has no "
          "context_length: set one of them (--context-length)");
    }
    capacity = c.context_length;
  }
  if (c.context_length > 0 && capacity > c.context_length) {
    return InvalidArgument("decoder max_length " + Str(capacity) +
                           " exceeds the model's context_length " +
                           Str(c.context_length));
  }
  impl->B = options.batch;
  impl->capacity = capacity;
  impl->H = c.num_heads;
  impl->D = c.d_out / c.num_heads;
  impl->Dp = static_cast<int64_t>(
      kernels::DecodePaddedDim(static_cast<size_t>(impl->D)));
  impl->d_in = c.d_in;
  impl->d_out = c.d_out;
  impl->num_threads = model->num_threads();
  impl->lengths.assign(static_cast<size_t>(impl->B), 0);
  impl->counts.assign(static_cast<size_t>(impl->B), 1);

  // 2 x B x H x capacity x Dp floats, checked for overflow before asking.
  const double cache_floats = 2.0 * double(impl->B) * double(impl->H) *
                              double(capacity) * double(impl->Dp);
  if (cache_floats * sizeof(float) > 0.5 * double(SIZE_MAX)) {
    return OutOfMemory("decoder cache of batch " + Str(impl->B) +
                       " x max_length " + Str(capacity) + " is too large");
  }
  const size_t cache_bytes = static_cast<size_t>(impl->B * impl->H) *
                             static_cast<size_t>(capacity * impl->Dp) *
                             sizeof(float);
  const size_t partial_bytes =
      static_cast<size_t>(impl->B * impl->H) *
      kernels::DecodeChunks(static_cast<size_t>(capacity)) *
      kernels::DecodePartialFloats(static_cast<size_t>(impl->Dp)) *
      sizeof(float);
  impl->model = model;  // HeldBytes reads the weights through m
  ATTN_RETURN_IF_ERROR(
      impl->CheckCap("a decoder cache of batch " + Str(impl->B) +
                         " x max_length " + Str(capacity),
                     AddSat(MulSat(2, cache_bytes), partial_bytes)));
  impl->max_partials = static_cast<size_t>(impl->B * impl->H) *
                       kernels::DecodeChunks(static_cast<size_t>(capacity));
  for (auto [buffer, bytes] :
       {std::pair{&impl->k_cache, cache_bytes},
        std::pair{&impl->v_cache, cache_bytes},
        std::pair{&impl->partials, impl->max_partials *
                                       kernels::DecodePartialFloats(
                                           static_cast<size_t>(impl->Dp)) *
                                       sizeof(float)}}) {
    Result<AlignedBuffer> allocated = AlignedBuffer::Allocate(bytes);
    if (!allocated.ok()) return allocated.status();
    *buffer = std::move(allocated).value();
  }
  impl->rows.reserve(static_cast<size_t>(impl->B));
  {
    const ThreadScope threads(impl->num_threads);
    ATTN_RETURN_IF_ERROR(impl->MakeProjection(impl->B, impl->step));
  }
  impl->model = std::move(model);
  return std::unique_ptr<MhaDecoder>(new MhaDecoder(std::move(impl)));
}

Status MhaDecoder::Prefill(const float* input, const int64_t* counts,
                           float* output) {
  return impl_->Append(input, counts, output);
}

Status MhaDecoder::Prefill(const float* input, int64_t seq_len, float* output) {
  if (seq_len < 0) {
    return InvalidArgument("seq_len is " + Str(seq_len) + ", want >= 0");
  }
  if (!input || !output) {
    return InvalidArgument("input and output must not be null");
  }
  // [B, T, d_in] is already packed sequence after sequence.
  std::vector<int64_t> counts(static_cast<size_t>(impl_->B), seq_len);
  return impl_->Append(input, counts.data(), output);
}

Status MhaDecoder::Decode(const float* input, int64_t batch, float* output) {
  Impl& d = *impl_;
  if (batch != d.B) {
    return InvalidArgument("decode batch is " + Str(batch) +
                           ", but the decoder holds " + Str(d.B) +
                           " sequences");
  }
  for (int64_t b = 0; b < d.B; ++b) {
    if (d.lengths[static_cast<size_t>(b)] == 0) {
      return InvalidArgument(
          "sequence " + Str(b) +
          " is empty (new, or Reset): Prefill its prompt before Decode");
    }
  }
  return d.Append(input, d.counts.data(), output);
}

void MhaDecoder::Reset() {
  std::fill(impl_->lengths.begin(), impl_->lengths.end(), 0);
}

Status MhaDecoder::Reset(int64_t sequence) { return Truncate(sequence, 0); }

Status MhaDecoder::Truncate(int64_t sequence, int64_t length) {
  Impl& d = *impl_;
  if (sequence < 0 || sequence >= d.B) {
    return InvalidArgument("sequence " + Str(sequence) +
                           " is out of range [0, " + Str(d.B) + ")");
  }
  int64_t& held = d.lengths[static_cast<size_t>(sequence)];
  if (length < 0 || length > held) {
    return InvalidArgument("cannot truncate sequence " + Str(sequence) +
                           " of " + Str(held) + " tokens to " + Str(length) +
                           ", want 0 <= length <= " + Str(held));
  }
  held = length;
  return {};
}

int64_t MhaDecoder::batch() const { return impl_->B; }
int64_t MhaDecoder::max_length() const { return impl_->capacity; }
int64_t MhaDecoder::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= impl_->B) return -1;
  return impl_->lengths[static_cast<size_t>(sequence)];
}
size_t MhaDecoder::cache_bytes() const {
  return impl_->k_cache.size() + impl_->v_cache.size();
}
size_t MhaDecoder::workspace_bytes() const {
  return impl_->partials.size() + impl_->step.bytes() + impl_->other.bytes() +
         impl_->prompt.qkv.size() + impl_->prompt.scratch.size();
}
size_t MhaDecoder::decode_kv_bytes() const {
  size_t keys = 0;
  for (int64_t n : impl_->lengths) keys += static_cast<size_t>(n + 1);
  return 2 * keys * static_cast<size_t>(impl_->d_out) * sizeof(float);
}

}  // namespace attn
