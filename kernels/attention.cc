// The attention core (see attention.h): per (batch, K/V head, query block)
// one matmul for the scores of every query head of the group, stacked, the
// Highway causal softmax (unnormalised), one matmul for the block's context,
// and its rows normalised into ctx.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/softmax.h"

namespace attn::kernels {
namespace {

size_t AlignUp(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Scores one work item may hold: a group whose stacked query blocks would
// need more (long sequences, large groups) is split over several items,
// each reading the K/V tile again.
constexpr size_t kMaxItemScoresBytes = size_t{64} << 20;

// Query heads one item stacks: the largest divisor of `group` whose scores
// for `rows` query rows against `keys` keys fit kMaxItemScoresBytes; 1 at
// least.
int64_t ItemHeads(int64_t group, int64_t rows, int64_t keys) {
  for (int64_t heads = group; heads > 1; --heads) {
    const auto bytes = static_cast<size_t>(heads * rows * keys) * sizeof(float);
    if (group % heads == 0 && bytes <= kMaxItemScoresBytes) return heads;
  }
  return 1;
}

Status Validate(const AttentionShape& shape) {
  if (shape.batch <= 0 || shape.seq_len <= 0 || shape.num_heads <= 0 ||
      shape.head_dim <= 0 || shape.query_block <= 0) {
    return InvalidArgument("attention shape needs every size > 0");
  }
  if (shape.num_kv_heads < 0 ||
      (shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads != 0)) {
    return InvalidArgument(
        "num_kv_heads " + std::to_string(shape.num_kv_heads) +
        " does not divide num_heads " + std::to_string(shape.num_heads));
  }
  if (shape.window < 0) return InvalidArgument("window is below 0");
  return {};
}

// Scores of keys a window hides from their row: row r, query i0 + r, sees
// the block's columns from i0 + r - window + 1 - k0 on. Set to -inf, the
// softmax gives them 0.
void MaskBeforeWindow(float* scores, int64_t rows, int64_t cols, int64_t i0,
                      int64_t k0, int64_t window) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t hidden =
        std::clamp<int64_t>(i0 + r - window + 1 - k0, 0, cols);
    std::fill(scores + r * cols, scores + r * cols + hidden,
              -std::numeric_limits<float>::infinity());
  }
}

}  // namespace

int64_t CausalAttention::FirstKey(int64_t qb) const {
  const int64_t i0 = qb * std::min(shape_.query_block, shape_.seq_len);
  return shape_.window > 0 ? std::max<int64_t>(0, i0 - shape_.window + 1) : 0;
}

Result<CausalAttention> CausalAttention::Create(const AttentionShape& shape) {
  ATTN_RETURN_IF_ERROR(Validate(shape));
  CausalAttention core;
  core.shape_ = shape;
  const int64_t T = shape.seq_len, D = shape.head_dim;
  const int64_t Bq = std::min(shape.query_block, T);
  const DataType type = shape.type;
  if (shape.kv_row_stride == 0) core.shape_.kv_row_stride = D;
  if (shape.num_kv_heads == 0) core.shape_.num_kv_heads = shape.num_heads;
  const int64_t Dkv = core.shape_.kv_row_stride;
  if (Dkv < D) return InvalidArgument("kv_row_stride is below head_dim");
  core.group_ = shape.num_heads / core.shape_.num_kv_heads;
  core.scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  int64_t max_keys = 0;
  for (int64_t i0 = 0; i0 < T; i0 += Bq) {
    max_keys =
        std::max(max_keys, std::min(T, i0 + Bq) - core.FirstKey(i0 / Bq));
  }
  const int64_t G = core.item_heads_ = ItemHeads(core.group_, Bq, max_keys);

  size_t mm_scratch = 0;
  for (int64_t i0 = 0; i0 < T; i0 += Bq) {
    const int64_t M = std::min(Bq, T - i0);             // query rows per head
    const int64_t N = i0 + M - core.FirstKey(i0 / Bq);  // keys they may see
    // scores [G M, N] f32 = q [G M, D] x k^T, with k stored [N, D].
    Result<MatMul> scores = MatMul::Create(
        {{G * M, D}, {}, type}, {{D, N}, {1, Dkv}, type}, nullptr,
        {{G * M, N}, {}, DataType::kF32}, Threading::kWorker);
    if (!scores.ok()) return scores.status();
    // ctx_blk [G M, D] f32 = probs [G M, N] x v [N, D], dense: oneDNN 2.6
    // runs a strided dst (row stride C) on its slower gemm:jit, not brgemm.
    Result<MatMul> context = MatMul::Create(
        {{G * M, N}, {}, type}, {{N, D}, {Dkv, 1}, type}, nullptr,
        {{G * M, D}, {}, DataType::kF32}, Threading::kWorker);
    if (!context.ok()) return context.status();
    mm_scratch = std::max(
        {mm_scratch, scores->scratch_bytes(), context->scratch_bytes()});
    core.scores_mm_.push_back(std::move(scores).value());
    core.context_mm_.push_back(std::move(context).value());
  }
  const auto rows = static_cast<size_t>(G * Bq);
  const size_t elem = SizeOf(type);
  const auto keys = static_cast<size_t>(max_keys);
  const auto dims = static_cast<size_t>(D);
  core.q_group_bytes_ = G > 1 ? AlignUp(rows * dims * elem) : 0;
  core.scores_bytes_ = AlignUp(rows * keys * sizeof(float));
  core.probs_bytes_ = type == DataType::kBF16 ? AlignUp(rows * keys * 2) : 0;
  core.block_ctx_bytes_ = AlignUp(rows * dims * sizeof(float));
  core.row_scale_bytes_ = AlignUp(rows * sizeof(float));
  core.worker_scratch_bytes_ = core.q_group_bytes_ + core.scores_bytes_ +
                               core.probs_bytes_ + core.block_ctx_bytes_ +
                               core.row_scale_bytes_ + AlignUp(mm_scratch);
  return core;
}

AttentionInputs CausalAttention::PlanesOf(const void* qkv) const {
  const int64_t B = shape_.batch, T = shape_.seq_len, H = shape_.num_heads;
  const int64_t D = shape_.head_dim, Hkv = shape_.num_kv_heads;
  const int64_t head = B * T * D;
  const auto* bytes = static_cast<const char*>(qkv);
  const size_t elem = SizeOf(shape_.type);
  AttentionInputs in;
  in.q = bytes;
  in.k = bytes + static_cast<size_t>(H * head) * elem;
  in.v = bytes + static_cast<size_t>((H + Hkv) * head) * elem;
  in.q_batch_stride = in.kv_batch_stride = T * D;
  in.q_head_stride = in.kv_head_stride = head;
  return in;
}

void CausalAttention::Run(const void* qkv, void* ctx, void* scratch,
                          int num_threads) const {
  Run(PlanesOf(qkv), ctx, scratch, num_threads);
}

CausalAttention::Worker CausalAttention::WorkerAt(void* scratch) const {
  char* at = static_cast<char*>(scratch);
  Worker w;
  w.q_group = at;
  at += q_group_bytes_;
  w.scores = reinterpret_cast<float*>(at);
  w.probs = shape_.type == DataType::kBF16 ? at + scores_bytes_ : at;
  at += scores_bytes_ + probs_bytes_;
  w.block_ctx = reinterpret_cast<float*>(at);
  at += block_ctx_bytes_;
  w.row_scale = reinterpret_cast<float*>(at);
  w.mm_scratch = at + row_scale_bytes_;
  return w;
}

void CausalAttention::Run(const AttentionInputs& in, void* ctx, void* scratch,
                          int num_threads) const {
  const int64_t B = shape_.batch, units = shape_.num_heads / item_heads_;
  const auto num_blocks = static_cast<int64_t>(scores_mm_.size());
  const int64_t num_items = B * units * num_blocks;
  // Items go out K/V head by K/V head, so that a worker's next item mostly
  // reads the k and v its last one left in cache (5% faster than
  // block-major order); within a head the last query blocks see the most
  // keys and go first, which keeps the team's finish even.
#pragma omp parallel for num_threads(num_threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < num_items; ++item) {
    const int64_t b = item / num_blocks / units;
    const int64_t h0 = item / num_blocks % units * item_heads_;
    const int64_t qb = num_blocks - 1 - item % num_blocks;
    RunItem(in, b, h0, qb, ctx,
            WorkerAt(static_cast<char*>(scratch) +
                     static_cast<size_t>(omp_get_thread_num()) *
                         worker_scratch_bytes_));
  }
}

void CausalAttention::RunItem(const AttentionInputs& in, int64_t b, int64_t h0,
                              int64_t qb, void* ctx, const Worker& w) const {
  // Shapes: T seq_len, D head_dim, C = H * D, G query heads of this item,
  // all of K/V head g.
  const int64_t T = shape_.seq_len, D = shape_.head_dim, G = item_heads_;
  const int64_t g = h0 / group_;
  const int64_t C = shape_.num_heads * D;
  const int64_t Bq = std::min(shape_.query_block, T);
  const int64_t i0 = qb * Bq, M = std::min(Bq, T - i0);
  const int64_t k0 = FirstKey(qb), N = i0 + M - k0;
  const size_t elem = SizeOf(shape_.type);
  const bool bf16 = shape_.type == DataType::kBF16;
  auto at = [elem](const void* base, int64_t elements) {
    return static_cast<const char*>(base) +
           static_cast<size_t>(elements) * elem;
  };
  // The heads' query rows [i0, i0 + M), stacked head after head so that
  // one matmul reads each k row once for all of them.
  const char* q =
      at(in.q, b * in.q_batch_stride + h0 * in.q_head_stride + i0 * D);
  if (G > 1) {
    for (int64_t i = 0; i < G; ++i) {
      std::memcpy(static_cast<char*>(w.q_group) + i * M * D * elem,
                  q + i * in.q_head_stride * elem, M * D * elem);
    }
    q = static_cast<const char*>(w.q_group);
  }
  const int64_t kb = in.kv_batches ? in.kv_batches[b] : b;
  const int64_t kv_rows = kb * in.kv_batch_stride + g * in.kv_head_stride +
                          k0 * shape_.kv_row_stride;
  scores_mm_[qb].Run(q, at(in.k, kv_rows), nullptr, w.scores, w.mm_scratch, 1);
  // The softmax's normalisation waits for the M x D context rather than
  // rescaling the M x N probabilities.
  for (int64_t i = 0; i < G; ++i) {
    float* s = w.scores + i * M * N;
    if (shape_.window > 0) MaskBeforeWindow(s, M, N, i0, k0, shape_.window);
    if (bf16) {
      CausalSoftmaxUnnormalizedToBF16(
          s, M, N, N, i0 - k0, scale_,
          static_cast<hwy::bfloat16_t*>(w.probs) + i * M * N, N,
          w.row_scale + i * M);
    } else {
      CausalSoftmaxUnnormalized(s, M, N, N, i0 - k0, scale_,
                                w.row_scale + i * M);
    }
  }
  context_mm_[qb].Run(w.probs, at(in.v, kv_rows), nullptr, w.block_ctx,
                      w.mm_scratch, 1);
  for (int64_t i = 0; i < G; ++i) {
    char* out = static_cast<char*>(ctx) +
                static_cast<size_t>((b * T + i0) * C + (h0 + i) * D) * elem;
    const float* rows = w.block_ctx + i * M * D;
    if (bf16) {
      ScaleRowsToBF16(rows, M, D, w.row_scale + i * M,
                      reinterpret_cast<hwy::bfloat16_t*>(out), C);
    } else {
      ScaleRows(rows, M, D, w.row_scale + i * M, reinterpret_cast<float*>(out),
                C);
    }
  }
}

}  // namespace attn::kernels
