#include "engine/runtime/cached_attention.h"

#include <string>
#include <utility>

#include "engine/runtime/limits.h"
#include "engine/runtime/threads.h"
#include "hwy/base.h"
#include "kernels/decode.h"

namespace attn {

using kernels::DataType;

KvCache::Shape CacheShapeFor(const MhaModelData& m, int64_t layers,
                             int64_t sequences, int64_t capacity) {
  const MhaConfig& c = m.config;
  KvCache::Shape shape;
  shape.layers = layers;
  shape.sequences = sequences;
  shape.capacity = capacity;
  shape.kv_heads = c.num_kv_heads;
  shape.padded_dim = static_cast<int64_t>(
      kernels::DecodePaddedDim(static_cast<size_t>(c.d_out / c.num_heads)));
  shape.head_major = kernels::DecodeBlocksHeads(DecodeParamsOf(KvView(), c));
  return shape;
}

Status CachedAttentionShared::AllocatePartials(const KvCache& cache,
                                               int64_t heads) {
  const KvCache::Shape& s = cache.shape();
  max_partials = static_cast<size_t>(s.sequences * heads) *
                 kernels::DecodeChunks(static_cast<size_t>(s.capacity));
  const size_t floats =
      kernels::DecodePartialFloats(static_cast<size_t>(s.padded_dim));
  Workspace workspace;
  workspace.Add(&partials, max_partials * floats * sizeof(float));
  return workspace.Allocate("the decode kernel's partials of " +
                                std::to_string(s.sequences) + " sequences",
                            held(), cap);
}

Status CachedAttentionShared::FitStep(const AttentionOp& op) {
  if (step_buffers.Holds(op)) return {};
  const uint64_t others = held() - step_buffers.bytes();
  return step_buffers.Grow(
      op, others, cap,
      "a decoder step of " + std::to_string(op.rows()) + " tokens");
}

Result<CachedAttention> CachedAttention::Create(const MhaModelData& m,
                                                const KvCache* cache,
                                                int64_t layer,
                                                CachedAttentionShared* shared) {
  CachedAttention op;
  op.m_ = &m;
  op.cache_ = cache;
  op.layer_ = layer;
  op.shared_ = shared;
  const int64_t slots = cache->shape().sequences;
  // A one-token-per-slot step grows no list.
  ATTN_RETURN_IF_ERROR(op.ReserveLists(slots, static_cast<size_t>(slots)));
  // The owner counts this op once it holds it: its lists count here.
  ATTN_ASSIGN_OR_RETURN(op.step_, op.MakeStep(slots, op.bytes()));
  // So that one-token-per-slot steps allocate nothing.
  ATTN_RETURN_IF_ERROR(shared->FitStep(*op.step_));
  return op;
}

Result<std::unique_ptr<AttentionOp>> CachedAttention::MakeStep(
    int64_t rows, uint64_t unseen) const {
  return AttentionOp::CreateStep(
      *m_, rows, cache_->layer(layer_), m_->num_threads,
      AddSat(shared_->held(), unseen),
      "a decoder step of " + std::to_string(rows) + " tokens");
}

uint64_t CachedAttention::bytes() const {
  const size_t lists = row_seqs_.capacity() + row_positions_.capacity() +
                       prompt_seqs_.capacity();
  return (step_ ? step_->bytes() : 0) + (other_ ? other_->bytes() : 0) +
         (prompt_ ? prompt_->bytes() : 0) + lists * sizeof(int64_t);
}

// The row lists of a step of `rows` tokens in `sequences` sequences,
// checked against the cap before they grow.
Status CachedAttention::ReserveLists(int64_t rows, size_t sequences) {
  const auto R = static_cast<size_t>(rows);
  if (R <= row_seqs_.capacity() && R <= row_positions_.capacity() &&
      sequences <= prompt_seqs_.capacity()) {
    return {};
  }
  const uint64_t more = (2 * uint64_t{R} + sequences) * sizeof(int64_t);
  ATTN_RETURN_IF_ERROR(CheckMemory(
      "the row lists of a decoder step of " + std::to_string(rows) + " tokens",
      AddSat(shared_->held(), more), shared_->cap));
  row_seqs_.reserve(R);
  row_positions_.reserve(R);
  prompt_seqs_.reserve(sequences);
  return {};
}

// Prompts of one length n >= kPromptCore, every one starting an empty
// sequence, are the full causal forward: the attention operator does them
// (as MhaSession::Run). Returns n then (and lists the sequences), else 0.
int64_t CachedAttention::FreshPromptLength(const NewTokens& tokens) {
  constexpr int64_t kPromptCore = 64;
  int64_t n = 0;
  bool fresh = true;
  prompt_seqs_.clear();
  for (size_t i = 0; i < tokens.num; ++i) {
    const int64_t b = tokens.sequence(i), count = tokens.count(i);
    if (count == 0) continue;
    fresh = fresh && cache_->length(b) == 0 && (n == 0 || count == n);
    n = count;
    prompt_seqs_.push_back(b);
  }
  return fresh && n >= kPromptCore ? n : 0;
}

Status CachedAttention::PreparePrompt(int64_t batch, int64_t seq_len) {
  if (prompt_ && prompt_->batch() == batch && prompt_->seq_len() == seq_len) {
    return {};
  }
  prompt_.reset();  // a prompt of another shape: its op goes first
  // The shared buffers go first too unless another layer already sized
  // them for this shape.
  CachedAttentionShared& shared = *shared_;
  const std::pair<int64_t, int64_t> shape{batch, seq_len};
  if (shared.prompt_shape != shape) {
    shared.prompt_buffers = OwnedBuffers();
    shared.prompt_shape = {0, 0};
  }
  const KvView cache = cache_->layer(layer_);
  const std::string what = "a prompt of batch " + std::to_string(batch) +
                           " x " + std::to_string(seq_len) + " tokens";
  ATTN_ASSIGN_OR_RETURN(
      std::unique_ptr<AttentionOp> op,
      AttentionOp::Create(*m_, DataType::kF32, batch, seq_len, &cache,
                          m_->num_threads, shared.held(), what));
  if (!shared.prompt_buffers.Fit(*op)) {
    shared.prompt_buffers = OwnedBuffers();
    ATTN_RETURN_IF_ERROR(shared.prompt_buffers.Allocate(
        *op, AddSat(shared.held(), op->bytes()), shared.cap, what));
    shared.prompt_shape = shape;
  }
  prompt_ = std::move(op);
  return {};
}

Status CachedAttention::Append(const float* input, const NewTokens& tokens,
                               int64_t rows, const KeptRows* keep,
                               float* output) {
  if (rows == 0) return {};
  for (size_t i = 0; keep && i < keep->count; ++i) {
    HWY_DASSERT(keep->rows[i] < rows &&
                (i == 0 || keep->rows[i - 1] < keep->rows[i]));
  }
  ATTN_RETURN_IF_ERROR(ReserveLists(rows, tokens.num));
  const int64_t n = FreshPromptLength(tokens);
  if (n == 0) return AppendRows(input, tokens, rows, keep, output);
  const ThreadScope threads(m_->num_threads);
  ATTN_RETURN_IF_ERROR(
      PreparePrompt(static_cast<int64_t>(prompt_seqs_.size()), n));
  prompt_->Forward(input, prompt_seqs_.data(), output,
                   shared_->prompt_buffers.pointers(), keep);
  return {};
}

// Token by token through the decode kernel (AttentionOp::Step).
Status CachedAttention::AppendRows(const float* input, const NewTokens& tokens,
                                   int64_t rows, const KeptRows* keep,
                                   float* output) {
  AttentionOp* op = step_.get();
  if (rows != step_->rows()) {
    if (!other_ || other_->rows() != rows) {
      other_.reset();  // steps of another size: its op goes first
      ATTN_ASSIGN_OR_RETURN(other_, MakeStep(rows, 0));
    }
    op = other_.get();
  }
  row_seqs_.clear();
  row_positions_.clear();
  for (size_t s = 0; s < tokens.num; ++s) {
    const int64_t b = tokens.sequence(s);
    for (int64_t i = 0; i < tokens.count(s); ++i) {
      row_seqs_.push_back(b);
      row_positions_.push_back(cache_->length(b) + i);
    }
  }
  ATTN_RETURN_IF_ERROR(shared_->FitStep(*op));
  op->Step(input, row_seqs_.data(), row_positions_.data(), output,
           shared_->step_buffers.pointers(),
           static_cast<float*>(shared_->partials.data()), shared_->max_partials,
           keep);
  return {};
}

}  // namespace attn
