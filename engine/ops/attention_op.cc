// The attention operator (see attention_op.h): plan, pack, run.
#include "engine/ops/attention_op.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "engine/io/model_config.h"
#include "engine/runtime/threads.h"
#include "kernels/attention_tiny.h"
#include "kernels/rows_linear.h"

namespace attn {

using kernels::DataType;
using kernels::MatMul;
using kernels::Operand;

Result<std::unique_ptr<AttentionOp>> AttentionOp::Create(
    const MhaModelData& m, DataType type, int64_t batch, int64_t seq_len,
    const KvView* cache, int num_threads, uint64_t held,
    const std::string& what) {
  std::unique_ptr<AttentionOp> op(new AttentionOp());
  const MhaConfig& c = m.config;
  op->m_ = &m;
  op->batch_ = batch;
  op->seq_len_ = seq_len;
  op->H_ = c.num_heads;
  op->Hkv_ = c.num_kv_heads;
  op->D_ = c.d_out / c.num_heads;
  if (cache) {
    if (type != DataType::kF32) {
      return Unsupported("a KV cache holds fp32 only");
    }
    if (!m.decode) {
      return InvalidArgument(
          "the model was made without decode layouts "
          "(MhaOptions::decode false)");
    }
    op->cache_ = *cache;
  }
  const bool rope = c.rope.theta != 0.0;
  if (rope && type != DataType::kF32) {
    return Unsupported(
        "rotary embeddings with dtype bf16 run in decoders only; an "
        "MhaSession needs dtype f32");
  }
  // The plain loops know the book's attention only.
  const bool plain = op->Hkv_ == op->H_ && !rope && c.sliding_window == 0;
  const double flops = AttentionFlops(c, batch, seq_len);
  if (!cache && plain && type == DataType::kF32 && flops < kTinyMhaMaxFlops) {
    op->tiny_ = true;
    op->buffer_bytes_[kQkv] =
        kernels::TinyAttentionScratchFloats(op->TinyShape()) * sizeof(float);
    return op;
  }
  const ThreadScope threads(num_threads);
  op->num_threads_ = threads.num_threads();
  ATTN_RETURN_IF_ERROR(op->MakeCore(type));
  ATTN_RETURN_IF_ERROR(op->MakePlans(type));
  ATTN_RETURN_IF_ERROR(op->Allocate(type, held, what));
  ATTN_RETURN_IF_ERROR(op->PackWeights());
  if (rope) {
    const auto rows = static_cast<uint64_t>(batch * seq_len);
    ATTN_RETURN_IF_ERROR(
        op->MakeRope(static_cast<size_t>(seq_len),
                     AddSat(held, op->bytes() + rows * sizeof(int64_t)), what));
    for (int64_t r = 0; r < batch * seq_len; ++r) {
      op->positions_.push_back(r % seq_len);
    }
  }
  return op;
}

// The causal core over the q plane and K and V (planes, or the cache).
Status AttentionOp::MakeCore(DataType type) {
  kernels::AttentionShape shape;
  shape.batch = batch_;
  shape.seq_len = seq_len_;
  shape.num_heads = H_;
  shape.head_dim = D_;
  shape.type = type;
  shape.kv_row_stride = cache_ ? cache_->row_stride : 0;
  shape.num_kv_heads = Hkv_;
  shape.window = m_->config.sliding_window;
  ATTN_ASSIGN_OR_RETURN(kernels::CausalAttention core,
                        kernels::CausalAttention::Create(shape));
  core_.emplace(std::move(core));
  return {};
}

// The model's qkv and out Linears for R rows. Without a cache: x
// [R, d_in] -> the planes [H + 2 Hkv, R, D] in `type`, dense per head as
// the core reads them, and ctx in `type` -> y, by the matmul at every row
// count. With one (fp32): x -> rows [R, (H + 2 Hkv) D], which Project
// scatters (q into its plane, K and V into the cache; one product of the
// full width: per-head ones of D columns run at a fraction of the matmul's
// speed), and ctx -> y, both on the panels for a few rows.
Status AttentionOp::MakePlans(DataType type) {
  const int64_t R = batch_ * seq_len_;
  const auto fallback = ops::LinearFallback::kOwnPacked;
  ops::LinearEpilogue qkv_form, out_form;
  if (!cache_) {
    qkv_form.type = out_form.type = type;
    qkv_form.head_dim = D_;
    qkv_form.dst = out_form.src = type;
    qkv_form.panels = out_form.panels = false;
  }
  ATTN_ASSIGN_OR_RETURN(
      ops::LinearPlan qkv,
      ops::LinearPlan::Create(m_->qkv, R, qkv_form, fallback, num_threads_));
  ATTN_ASSIGN_OR_RETURN(
      ops::LinearPlan out,
      ops::LinearPlan::Create(m_->out, R, out_form, fallback, num_threads_));
  qkv_plan_.emplace(std::move(qkv));
  out_plan_.emplace(std::move(out));
  return {};
}

Status AttentionOp::Allocate(DataType type, uint64_t held,
                             const std::string& what) {
  const MhaConfig& c = m_->config;
  const auto rows = static_cast<size_t>(batch_ * seq_len_);
  const size_t elem = kernels::SizeOf(type);
  const auto d_out = static_cast<size_t>(c.d_out);
  const auto threads = static_cast<size_t>(num_threads_);
  Workspace workspace;
  workspace.Add(&w_qkv_, qkv_plan_->own_packed_bytes());
  workspace.Add(&w_out_, out_plan_->own_packed_bytes());
  SizeProjectionBuffers();
  // With a cache kQkv holds the q plane, then the projection's rows.
  const auto heads =
      static_cast<size_t>(cache_ ? 2 * H_ + 2 * Hkv_ : H_ + 2 * Hkv_);
  buffer_bytes_[kQkv] = rows * heads * static_cast<size_t>(D_) * elem;
  buffer_bytes_[kContext] = rows * d_out * elem;
  buffer_bytes_[kCoreScratch] = core_->worker_scratch_bytes() * threads;
  return workspace.Allocate(what, held, m_->max_memory_bytes);
}

// The projections' buffers, used by one at a time: an input converted to the
// matmul's type, and the scratch of the plans and of the out projection's
// groups of kept rows.
void AttentionOp::SizeProjectionBuffers() {
  buffer_bytes_[kInputLow] = std::max(qkv_plan_->lowered_input_bytes(),
                                      out_plan_->lowered_input_bytes());
  buffer_bytes_[kProjScratch] =
      std::max({qkv_plan_->scratch_bytes(), out_plan_->scratch_bytes(),
                m_->out.FewRowsScratchBytes()});
}

// The weights the projections read that this op packs itself.
Status AttentionOp::PackWeights() {
  if (w_qkv_.size()) {
    ATTN_RETURN_IF_ERROR(qkv_plan_->PackOwn(m_->qkv, w_qkv_.data()));
  }
  if (w_out_.size()) {
    ATTN_RETURN_IF_ERROR(out_plan_->PackOwn(m_->out, w_out_.data()));
  }
  return {};
}

size_t AttentionOp::bytes() const {
  size_t total = (rope_ ? rope_->bytes() : 0) +
                 positions_.size() * sizeof(int64_t) +
                 decode_rows_.capacity() * sizeof(kernels::DecodeRow);
  for (const AlignedBuffer* b : {&w_qkv_, &w_out_}) {
    total += b->size();
  }
  return total;
}

void AttentionOp::Forward(const float* x, const int64_t* cache_seqs, float* y,
                          const Buffers& buffers, const KeptRows* keep) const {
  if (tiny_) {
    const MhaModelData& m = *m_;
    const kernels::TinyAttentionWeights w{
        m.w_qkv.data(), m.b_qkv.empty() ? nullptr : m.b_qkv.data(),
        m.w_out.data(), m.b_out.data()};
    kernels::TinyAttention(TinyShape(), w, x, y,
                           static_cast<float*>(buffers[kQkv]));
    return;
  }
  const ThreadScope threads(num_threads_);
  // x: [B*T, d_in] -> q, k, v (the planes, or q and the cache).
  Project(x, cache_seqs, buffers);
  RotateForward(cache_seqs, buffers);
  // Per (sequence, head, query block): softmax(q k^T / sqrt(D), causal) v.
  kernels::AttentionInputs in;
  if (cache_) {
    in.q = static_cast<const float*>(buffers[kQkv]);
    in.q_batch_stride = seq_len_ * D_;
    in.q_head_stride = batch_ * seq_len_ * D_;
    in.k = cache_->k;
    in.v = cache_->v;
    in.kv_batch_stride = cache_->batch_stride;
    in.kv_head_stride = cache_->head_stride;
    in.kv_batches = cache_seqs;
  } else {
    in = core_->PlanesOf(buffers[kQkv]);
  }
  core_->Run(in, buffers[kContext], buffers[kCoreScratch],
             threads.num_threads());
  auto* ctx = static_cast<float*>(buffers[kContext]);
  size_t rows = static_cast<size_t>(batch_ * seq_len_);
  if (keep) {  // the kept rows of ctx, moved to its front
    const auto d_out = static_cast<size_t>(m_->config.d_out);
    for (size_t j = 0; j < keep->count; ++j) {
      std::memmove(ctx + j * d_out,
                   ctx + static_cast<size_t>(keep->rows[j]) * d_out,
                   d_out * sizeof(float));
    }
    rows = keep->count;
  }
  // ctx: [rows, d_out] -> y: [rows, out_dim].
  ProjectOut(ctx, rows, y, buffers[kInputLow], buffers[kProjScratch],
             threads.num_threads());
}

// y = ctx W_out^T + b_out: the out Linear's plan for all the op's rows,
// its panels for fewer (kept rows).
void AttentionOp::ProjectOut(const float* ctx, size_t rows, float* y,
                             void* lowered, void* scratch, int threads) const {
  if (rows == static_cast<size_t>(out_plan_->rows())) {
    out_plan_->Run(m_->out, ctx, y, {lowered, scratch, w_out_.data()}, threads);
  } else {
    m_->out.RunFewRows(ctx, rows, y, scratch, threads);
  }
}

// Rotary embeddings on q and k where the projection left them: the planes'
// rows (row r at position r mod seq_len), and each prompt's K rows in its
// cache sequence.
void AttentionOp::RotateForward(const int64_t* cache_seqs,
                                const Buffers& buffers) const {
  if (!rope_) return;
  const auto R = static_cast<size_t>(batch_ * seq_len_);
  const auto D = static_cast<size_t>(D_);
  // Without a cache the k planes follow the q planes.
  const auto heads = static_cast<size_t>(cache_ ? H_ : H_ + Hkv_);
  kernels::ApplyRope(*rope_,
                     {static_cast<float*>(buffers[kQkv]), R, D, heads, R * D},
                     positions_.data(), num_threads_);
  if (!cache_) return;
  for (int64_t i = 0; i < batch_; ++i) {
    kernels::ApplyRope(
        *rope_,
        {cache_->k + cache_seqs[i] * cache_->batch_stride,
         static_cast<size_t>(seq_len_), static_cast<size_t>(cache_->row_stride),
         static_cast<size_t>(Hkv_), static_cast<size_t>(cache_->head_stride)},
        positions_.data(), num_threads_);
  }
}

// The table for positions [0, max_positions), checked against the cap with
// `held` bytes already held.
Status AttentionOp::MakeRope(size_t max_positions, uint64_t held,
                             const std::string& what) {
  const size_t bytes =
      kernels::RopeTable::BytesFor(D_, static_cast<int64_t>(max_positions));
  ATTN_RETURN_IF_ERROR(
      CheckMemory(what, AddSat(held, bytes), m_->max_memory_bytes));
  ATTN_ASSIGN_OR_RETURN(
      kernels::RopeTable table,
      kernels::RopeTable::Create(KernelRope(m_->config.rope), D_,
                                 static_cast<int64_t>(max_positions)));
  rope_.emplace(std::move(table));
  return {};
}

void AttentionOp::Project(const float* x, const int64_t* cache_seqs,
                          const Buffers& buffers) const {
  const int threads = num_threads_;
  const ops::LinearPlan::Buffers scratch{buffers[kInputLow],
                                         buffers[kProjScratch], w_qkv_.data()};
  if (!cache_) {
    qkv_plan_->Run(m_->qkv, x, buffers[kQkv], scratch, threads);
    return;
  }
  // The rows of q, k and v after the q plane, then each where it goes.
  const int64_t R = batch_ * seq_len_;
  auto* q = static_cast<float*>(buffers[kQkv]);
  float* rows = q + R * H_ * D_;
  qkv_plan_->Run(m_->qkv, x, rows, scratch, threads);
  ScatterQkv(rows, cache_seqs, q);
}

// Row r of `rows` ([R, (H + 2 Hkv) D]) is token r mod T of sequence r / T:
// its q heads go to rows r of the q plane [H, R, D], its K and V heads to
// that token's row of its cache sequence. Rows split over the team: on the
// caller alone a GPT-2 prompt of 128 tokens left the other core idle for
// 1.5-1.8 ms (12 layers, Zen 4).
void AttentionOp::ScatterQkv(const float* rows, const int64_t* cache_seqs,
                             float* q) const {
  const int64_t T = seq_len_, R = batch_ * T, D = D_;
  const size_t bytes = static_cast<size_t>(D) * sizeof(float);
  const auto scatter = [&](size_t first, size_t count) {
    const auto end = static_cast<int64_t>(first + count);
    for (auto r = static_cast<int64_t>(first); r < end; ++r) {
      const float* row = rows + r * QkvWidth();
      for (int64_t h = 0; h < H_; ++h) {
        std::memcpy(q + (h * R + r) * D, row + h * D, bytes);
      }
      const int64_t at = cache_seqs[r / T] * cache_->batch_stride +
                         (r % T) * cache_->row_stride;
      for (int64_t h = 0; h < Hkv_; ++h) {
        const int64_t to = at + h * cache_->head_stride;
        std::memcpy(cache_->k + to, row + (H_ + h) * D, bytes);
        std::memcpy(cache_->v + to, row + (H_ + Hkv_ + h) * D, bytes);
      }
    }
  };
  kernels::ParallelForChunks(static_cast<size_t>(R),
                             static_cast<size_t>(QkvWidth()), 1, num_threads_,
                             scatter);
}

Result<std::unique_ptr<AttentionOp>> AttentionOp::CreateStep(
    const MhaModelData& m, int64_t rows, const KvView& cache, int num_threads,
    uint64_t held, const std::string& what) {
  if (!m.decode) {
    return InvalidArgument(
        "the model was made without decode layouts (MhaOptions::decode "
        "false)");
  }
  std::unique_ptr<AttentionOp> op(new AttentionOp());
  const MhaConfig& c = m.config;
  op->m_ = &m;
  op->step_ = true;
  op->batch_ = rows;
  op->seq_len_ = 1;
  op->H_ = c.num_heads;
  op->Hkv_ = c.num_kv_heads;
  op->D_ = c.d_out / c.num_heads;
  op->cache_ = cache;
  const auto R = static_cast<size_t>(rows);
  const auto d_out = static_cast<size_t>(c.d_out);
  const auto qkv_out = static_cast<size_t>(op->QkvWidth());
  const size_t Dp = kernels::DecodePaddedDim(static_cast<size_t>(op->D_));
  // The kernel's row list first, against the cap before any primitive
  // exists (the caller holds the buffers: Grow).
  held = AddSat(held, MulSat(sizeof(kernels::DecodeRow), R));
  ATTN_RETURN_IF_ERROR(CheckMemory(what, held, m.max_memory_bytes));
  const ThreadScope threads(num_threads);
  op->num_threads_ = threads.num_threads();
  ATTN_RETURN_IF_ERROR(op->MakePlans(DataType::kF32));
  op->buffer_bytes_[kQkv] = R * qkv_out * sizeof(float);
  op->buffer_bytes_[kContext] = R * d_out * sizeof(float);
  op->SizeProjectionBuffers();
  op->buffer_bytes_[kCoreScratch] = R * static_cast<size_t>(op->H_) * Dp * 4;
  Workspace workspace;
  workspace.Add(&op->w_qkv_, op->qkv_plan_->own_packed_bytes());
  workspace.Add(&op->w_out_, op->out_plan_->own_packed_bytes());
  ATTN_RETURN_IF_ERROR(workspace.Allocate(what, held, m.max_memory_bytes));
  op->decode_rows_.reserve(R);
  ATTN_RETURN_IF_ERROR(op->PackWeights());
  if (c.rope.theta != 0.0) {
    ATTN_RETURN_IF_ERROR(op->MakeRope(static_cast<size_t>(cache.capacity),
                                      AddSat(held, workspace.bytes()), what));
  }
  return op;
}

void AttentionOp::Step(const float* x, const int64_t* seqs,
                       const int64_t* positions, float* y,
                       const Buffers& buffers, float* partials,
                       size_t max_partials, const KeptRows* keep) {
  const ThreadScope threads(num_threads_);
  const MhaModelData& m = *m_;
  const int64_t d_out = m.config.d_out;
  auto* qkv = static_cast<float*>(buffers[kQkv]);
  auto* ctx = static_cast<float*>(buffers[kContext]);
  void* scratch = buffers[kProjScratch];
  // x: [R, d_in] -> qkv: [R, (H + 2 Hkv) D], one fused projection, then
  // each row's q and k turned to its position.
  const auto R = static_cast<size_t>(batch_);
  qkv_plan_->Run(m.qkv, x, qkv, {buffers[kInputLow], scratch, w_qkv_.data()},
                 threads.num_threads());
  if (rope_) {
    const auto D = static_cast<size_t>(D_);
    kernels::ApplyRope(*rope_,
                       {qkv, R, static_cast<size_t>(QkvWidth()),
                        static_cast<size_t>(H_ + Hkv_), D},
                       positions, threads.num_threads());
  }
  // q into its padded rows; k and v appended to their sequence's cache.
  decode_rows_.clear();
  const kernels::DecodeParams params = DecodeParamsOf(*cache_, m.config);
  const size_t row_floats = static_cast<size_t>(H_) * params.padded_dim;
  for (int64_t r = 0; r < batch_; ++r) {
    kernels::DecodeRow row;
    const int64_t at = seqs[r] * cache_->batch_stride;
    row.q = static_cast<float*>(buffers[kCoreScratch]) +
            static_cast<size_t>(r) * row_floats;
    row.k = cache_->k + at;
    row.v = cache_->v + at;
    row.num_keys = static_cast<size_t>(positions[r] + 1);
    row.ctx = ctx + r * d_out;
    decode_rows_.push_back(row);
  }
  kernels::DecodeAppend(params, qkv, decode_rows_.data(), decode_rows_.size(),
                        threads.num_threads());
  if (keep) {  // the kept rows alone attend, their ctx packed in order
    for (size_t j = 0; j < keep->count; ++j) {
      decode_rows_[j] = decode_rows_[static_cast<size_t>(keep->rows[j])];
      decode_rows_[j].ctx = ctx + j * static_cast<size_t>(d_out);
    }
    decode_rows_.resize(keep->count);
  }
  RunDecodeKernel(params, partials, max_partials, threads.num_threads());
  // ctx: [rows, d_out] -> y: [rows, out_dim].
  ProjectOut(ctx, decode_rows_.size(), y, buffers[kInputLow], scratch,
             threads.num_threads());
}

// Per (row, head, key chunk): softmax(q k^T / sqrt(D)) v over the row's
// visible keys, in groups of rows whose partials fit the buffer (a step of
// one token per sequence is always one group).
void AttentionOp::RunDecodeKernel(const kernels::DecodeParams& params,
                                  float* partials, size_t max_partials,
                                  int threads) {
  std::vector<kernels::DecodeRow>& rows = decode_rows_;
  size_t begin = 0, used = 0;
  for (size_t i = 0; i <= rows.size(); ++i) {
    const size_t need =
        i < rows.size() ? kernels::DecodeRowPartials(params, rows[i].num_keys)
                        : 0;
    if ((i == rows.size() && i > begin) || used + need > max_partials) {
      kernels::DecodeAttention(params, rows.data() + begin, i - begin, partials,
                               threads);
      begin = i;
      used = 0;
    }
    if (i < rows.size()) {
      rows[i].first_partial = used;
      used += need;
    }
  }
}

Status OwnedBuffers::Allocate(const AttentionOp& op, uint64_t held,
                              uint64_t cap, const std::string& what) {
  Workspace workspace;
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    workspace.Add(&buffers_[i], op.buffer_bytes()[i]);
  }
  pointers_ = {};
  ATTN_RETURN_IF_ERROR(workspace.Allocate(what, held, cap));
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    pointers_[i] = buffers_[i].data();
  }
  return {};
}

Status OwnedBuffers::Grow(const AttentionOp& op, uint64_t held, uint64_t cap,
                          const std::string& what) {
  if (Holds(op)) return {};
  std::array<size_t, AttentionOp::kNumBuffers> sizes{};
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    sizes[i] = std::max(buffers_[i].size(), op.buffer_bytes()[i]);
  }
  *this = OwnedBuffers();  // the old ones go first
  Workspace workspace;
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    workspace.Add(&buffers_[i], sizes[i]);
  }
  ATTN_RETURN_IF_ERROR(workspace.Allocate(what, held, cap));
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    buffers_[i].ZeroAllPages();
    pointers_[i] = buffers_[i].data();
  }
  return {};
}

bool OwnedBuffers::Holds(const AttentionOp& op) const {
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    if (buffers_[i].size() < op.buffer_bytes()[i]) return false;
  }
  return true;
}

bool OwnedBuffers::Fit(const AttentionOp& op) const {
  for (size_t i = 0; i < AttentionOp::kNumBuffers; ++i) {
    if (buffers_[i].size() != op.buffer_bytes()[i]) return false;
  }
  return true;
}

size_t OwnedBuffers::bytes() const {
  size_t total = 0;
  for (const AlignedBuffer& b : buffers_) total += b.size();
  return total;
}

kernels::DecodeParams DecodeParamsOf(const KvView& cache, const MhaConfig& c) {
  const int64_t head_dim = c.d_out / c.num_heads;
  kernels::DecodeParams params;
  params.num_heads = static_cast<size_t>(c.num_heads);
  params.num_kv_heads = static_cast<size_t>(c.num_kv_heads);
  params.window = static_cast<size_t>(c.sliding_window);
  params.head_dim = static_cast<size_t>(head_dim);
  params.padded_dim = kernels::DecodePaddedDim(params.head_dim);
  params.key_stride = static_cast<size_t>(cache.row_stride);
  params.head_stride = static_cast<size_t>(cache.head_stride);
  params.scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return params;
}

}  // namespace attn
