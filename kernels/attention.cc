// The attention core (see attention.h): per (batch, head, query block) one
// matmul for the scores, the Highway causal softmax (unnormalised), one
// matmul for the block's context, and its rows normalised into ctx.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/softmax.h"

namespace attn::kernels {
namespace {

size_t AlignUp(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

Result<CausalAttention> CausalAttention::Create(const AttentionShape& shape) {
  if (shape.batch <= 0 || shape.seq_len <= 0 || shape.num_heads <= 0 ||
      shape.head_dim <= 0 || shape.query_block <= 0) {
    return InvalidArgument("attention shape needs every size > 0");
  }
  CausalAttention core;
  core.shape_ = shape;
  const int64_t T = shape.seq_len, D = shape.head_dim;
  const int64_t Bq = std::min(shape.query_block, T);
  const DataType type = shape.type;
  if (shape.kv_row_stride == 0) core.shape_.kv_row_stride = D;
  const int64_t Dkv = core.shape_.kv_row_stride;
  if (Dkv < D) return InvalidArgument("kv_row_stride is below head_dim");
  core.scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  size_t mm_scratch = 0;
  for (int64_t i0 = 0; i0 < T; i0 += Bq) {
    const int64_t M = std::min(Bq, T - i0);  // query rows
    const int64_t N = i0 + M;                // keys they may see
    // scores [M, N] f32 = q [M, D] x k^T, with k stored [N, D].
    Result<MatMul> scores =
        MatMul::Create({{M, D}, {}, type}, {{D, N}, {1, Dkv}, type}, nullptr,
                       {{M, N}, {}, DataType::kF32}, Threading::kWorker);
    if (!scores.ok()) return scores.status();
    // ctx_blk [M, D] f32 = probs [M, N] x v [N, D], dense: oneDNN 2.6 runs
    // a strided dst (row stride C) on its slower gemm:jit, not brgemm.
    Result<MatMul> context =
        MatMul::Create({{M, N}, {}, type}, {{N, D}, {Dkv, 1}, type}, nullptr,
                       {{M, D}, {}, DataType::kF32}, Threading::kWorker);
    if (!context.ok()) return context.status();
    mm_scratch = std::max(
        {mm_scratch, scores->scratch_bytes(), context->scratch_bytes()});
    core.scores_mm_.push_back(std::move(scores).value());
    core.context_mm_.push_back(std::move(context).value());
  }
  core.scores_bytes_ = AlignUp(static_cast<size_t>(Bq * T) * sizeof(float));
  core.probs_bytes_ =
      type == DataType::kBF16 ? AlignUp(static_cast<size_t>(Bq * T) * 2) : 0;
  core.block_ctx_bytes_ = AlignUp(static_cast<size_t>(Bq * D) * sizeof(float));
  core.row_scale_bytes_ = AlignUp(static_cast<size_t>(Bq) * sizeof(float));
  core.worker_scratch_bytes_ = core.scores_bytes_ + core.probs_bytes_ +
                               core.block_ctx_bytes_ + core.row_scale_bytes_ +
                               AlignUp(mm_scratch);
  return core;
}

AttentionInputs CausalAttention::PlanesOf(const void* qkv) const {
  const int64_t B = shape_.batch, T = shape_.seq_len, H = shape_.num_heads;
  const int64_t D = shape_.head_dim;
  const int64_t plane = H * B * T * D;
  const auto* bytes = static_cast<const char*>(qkv);
  const size_t elem = SizeOf(shape_.type);
  AttentionInputs in;
  in.q = bytes;
  in.k = bytes + static_cast<size_t>(plane) * elem;
  in.v = bytes + static_cast<size_t>(2 * plane) * elem;
  in.q_batch_stride = in.kv_batch_stride = T * D;
  in.q_head_stride = in.kv_head_stride = B * T * D;
  return in;
}

void CausalAttention::Run(const void* qkv, void* ctx, void* scratch,
                          int num_threads) const {
  Run(PlanesOf(qkv), ctx, scratch, num_threads);
}

void CausalAttention::Run(const AttentionInputs& in, void* ctx, void* scratch,
                          int num_threads) const {
  // Shapes: B batch, T seq_len, H heads, D head_dim, C = H * D.
  const int64_t B = shape_.batch, T = shape_.seq_len, H = shape_.num_heads;
  const int64_t D = shape_.head_dim, C = H * D;
  const int64_t Bq = std::min(shape_.query_block, T);
  const int64_t num_blocks = static_cast<int64_t>(scores_mm_.size());
  const size_t elem = SizeOf(shape_.type);
  const auto* q_bytes = static_cast<const char*>(in.q);
  const auto* k_bytes = static_cast<const char*>(in.k);
  const auto* v_bytes = static_cast<const char*>(in.v);
  auto* ctx_bytes = static_cast<char*>(ctx);
  const int64_t num_items = B * H * num_blocks;

  // Items go out head by head, so that a worker's next item mostly reads
  // the k and v its last one left in cache (5% faster than block-major
  // order, bench/RESULTS.md); within a head the last query blocks see the
  // most keys and go first, which keeps the team's finish even.
#pragma omp parallel for num_threads(num_threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < num_items; ++item) {
    const int64_t b = item / num_blocks / H, h = item / num_blocks % H;
    const int64_t qb = num_blocks - 1 - item % num_blocks;
    const int64_t i0 = qb * Bq, M = std::min(Bq, T - i0), N = i0 + M;

    char* worker =
        static_cast<char*>(scratch) +
        static_cast<size_t>(omp_get_thread_num()) * worker_scratch_bytes_;
    auto* scores = reinterpret_cast<float*>(worker);
    void* probs = shape_.type == DataType::kBF16
                      ? static_cast<void*>(worker + scores_bytes_)
                      : static_cast<void*>(scores);
    auto* block_ctx =
        reinterpret_cast<float*>(worker + scores_bytes_ + probs_bytes_);
    auto* row_scale = reinterpret_cast<float*>(
        reinterpret_cast<char*>(block_ctx) + block_ctx_bytes_);
    void* mm_scratch = reinterpret_cast<char*>(row_scale) + row_scale_bytes_;

    // Rows of head h of sequence b start here in q, k and v.
    const int64_t kb = in.kv_batches ? in.kv_batches[b] : b;
    const char* q =
        q_bytes + static_cast<size_t>(b * in.q_batch_stride +
                                      h * in.q_head_stride + i0 * D) *
                      elem;
    const size_t kv_rows =
        static_cast<size_t>(kb * in.kv_batch_stride + h * in.kv_head_stride) *
        elem;
    const char* k = k_bytes + kv_rows;
    const char* v = v_bytes + kv_rows;
    char* out =
        ctx_bytes + static_cast<size_t>((b * T + i0) * C + h * D) * elem;

    // The softmax's normalisation waits for the M x D context rather than
    // rescaling the M x N probabilities.
    scores_mm_[qb].Run(q, k, nullptr, scores, mm_scratch, 1);
    if (shape_.type == DataType::kBF16) {
      CausalSoftmaxUnnormalizedToBF16(scores, M, N, N, i0, scale_,
                                      static_cast<hwy::bfloat16_t*>(probs), N,
                                      row_scale);
    } else {
      CausalSoftmaxUnnormalized(scores, M, N, N, i0, scale_, row_scale);
    }
    context_mm_[qb].Run(probs, v, nullptr, block_ctx, mm_scratch, 1);
    if (shape_.type == DataType::kBF16) {
      ScaleRowsToBF16(block_ctx, M, D, row_scale,
                      reinterpret_cast<hwy::bfloat16_t*>(out), C);
    } else {
      ScaleRows(block_ctx, M, D, row_scale, reinterpret_cast<float*>(out), C);
    }
  }
}

}  // namespace attn::kernels
