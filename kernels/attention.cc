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
  core.scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  size_t mm_scratch = 0;
  for (int64_t i0 = 0; i0 < T; i0 += Bq) {
    const int64_t M = std::min(Bq, T - i0);  // query rows
    const int64_t N = i0 + M;                // keys they may see
    // scores [M, N] f32 = q [M, D] x k^T, with k stored [N, D].
    Result<MatMul> scores =
        MatMul::Create({{M, D}, {}, type}, {{D, N}, {1, D}, type}, nullptr,
                       {{M, N}, {}, DataType::kF32}, Threading::kWorker);
    if (!scores.ok()) return scores.status();
    // ctx_blk [M, D] f32 = probs [M, N] x v [N, D], dense: oneDNN 2.6 runs
    // a strided dst (row stride C) on its slower gemm:jit, not brgemm.
    Result<MatMul> context =
        MatMul::Create({{M, N}, {}, type}, {{N, D}, {D, 1}, type}, nullptr,
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

void CausalAttention::Run(const void* qkv, void* ctx, void* scratch,
                          int num_threads) const {
  // Shapes: B batch, T seq_len, H heads, D head_dim, C = H * D.
  const int64_t B = shape_.batch, T = shape_.seq_len, H = shape_.num_heads;
  const int64_t D = shape_.head_dim, C = H * D;
  const int64_t Bq = std::min(shape_.query_block, T);
  const int64_t num_blocks = static_cast<int64_t>(scores_mm_.size());
  const size_t elem = SizeOf(shape_.type);
  const auto* qkv_bytes = static_cast<const char*>(qkv);
  auto* ctx_bytes = static_cast<char*>(ctx);
  const size_t plane = static_cast<size_t>(H * B * T * D) * elem;
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

    // Rows of head h in batch b start here in each of the q, k, v planes.
    const size_t head_rows = static_cast<size_t>((h * B + b) * T * D) * elem;
    const char* q = qkv_bytes + head_rows + static_cast<size_t>(i0 * D) * elem;
    const char* k = qkv_bytes + plane + head_rows;
    const char* v = qkv_bytes + 2 * plane + head_rows;
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

size_t TinyMhaScratchFloats(const TinyMhaShape& s) {
  const auto rows = static_cast<size_t>(s.batch * s.seq_len);
  const auto t = static_cast<size_t>(s.seq_len);
  return rows * static_cast<size_t>(4 * s.d_out) + t * t;
}

void TinyMhaForward(const TinyMhaShape& s, const float* x, const float* w_qkv,
                    const float* b_qkv, const float* w_out, const float* b_out,
                    float* scratch, float* y) {
  const int64_t R = s.batch * s.seq_len, T = s.seq_len, C = s.d_out;
  const int64_t D = C / s.num_heads;
  float* qkv = scratch;             // [R, 3C]: q, k, v of row r side by side
  float* scores = qkv + R * 3 * C;  // [T, T], one (batch, head) at a time
  float* ctx = scores + T * T;      // [R, C], heads merged
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < 3 * C; ++j) {
      float sum = b_qkv ? b_qkv[j] : 0.0f;
      for (int64_t i = 0; i < s.d_in; ++i) {
        sum += x[r * s.d_in + i] * w_qkv[j * s.d_in + i];
      }
      qkv[r * 3 * C + j] = sum;
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const float* q = qkv + b * T * 3 * C + h * D;
      const float* k = q + C;
      const float* v = q + 2 * C;
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t t = 0; t <= i; ++t) {
          float dot = 0.0f;
          for (int64_t d = 0; d < D; ++d) {
            dot += q[i * 3 * C + d] * k[t * 3 * C + d];
          }
          scores[i * T + t] = dot;
        }
      }
      CausalSoftmax(scores, static_cast<size_t>(T), static_cast<size_t>(T),
                    static_cast<size_t>(T), 0, scale);
      for (int64_t i = 0; i < T; ++i) {
        float* out = ctx + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
        for (int64_t t = 0; t <= i; ++t) {
          const float p = scores[i * T + t];
          for (int64_t d = 0; d < D; ++d) out[d] += p * v[t * 3 * C + d];
        }
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < C; ++j) {
      float sum = b_out[j];
      for (int64_t d = 0; d < C; ++d) sum += ctx[r * C + d] * w_out[j * C + d];
      y[r * C + j] = sum;
    }
  }
}

}  // namespace attn::kernels
