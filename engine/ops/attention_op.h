// The one attention operator:
// the fused QKV projection, the causal core and the output projection of an
// MhaModel, planned once per shape. MhaSession runs it on buffers of its
// own, a graph's mha step on its session's planned arena; MhaDecoder runs it
// on a prompt whose K and V land in its cache, and on steps of new tokens
// against that cache. Engine internal, never installed.
#ifndef ATTN_ENGINE_OPS_ATTENTION_OP_H_
#define ATTN_ENGINE_OPS_ATTENTION_OP_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/status.hpp"
#include "engine/models/mha_model.h"
#include "engine/ops/linear.h"
#include "engine/runtime/buffer.h"
#include "kernels/attention.h"
#include "kernels/attention_tiny.h"
#include "kernels/decode.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"

namespace attn {

// One addressing for every K/V layout: rows of head h of sequence b at
// k (or v) + b * batch_stride + h * head_stride, row_stride floats apart
// (AttentionInputs in kernels/attention.h). A layer of a KV cache
// (engine/runtime/kv_cache.h), padded to
// Dp = DecodePaddedDim(D) floats a row (padding lanes zero), is laid out as
// the decode kernel reads it fastest (kernels::DecodeBlocksHeads): head
// major, [B, Hkv, capacity, Dp] (row_stride Dp, head_stride capacity * Dp),
// each head's keys one run; or token major, [B, capacity, Hkv, Dp]
// (row_stride Hkv * Dp, head_stride Dp), a sequence's keys one run however
// far capacity exceeds them. batch_stride is capacity * Hkv * Dp in both.
struct KvView {
  float* k = nullptr;
  float* v = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  int64_t capacity = 0;  // tokens per sequence
};

// The decode kernel's parameters for `cache` and the attention of `c`.
kernels::DecodeParams DecodeParamsOf(const KvView& cache, const MhaConfig& c);

// Below this many FLOPs (AttentionFlops) a block runs as plain loops on the
// calling thread: oneDNN's and OpenMP's fixed cost per call (about 18 us)
// buys about 10^5 FLOPs of those loops at a few GFLOP/s, so 32768 stays
// clear of the crossover (the book's chapter-3 example is 816).
constexpr double kTinyMhaMaxFlops = 32768;

// The rows of a step or of a forward on a cache that go on past the
// attention (a model's last block: those whose logits are asked for),
// ascending: only they reach the output. A step attends only them; a
// forward's causal core still runs every row, then projects the kept ones
// out by the model's out_proj panels. Every row's K and V land in the cache
// either way.
struct KeptRows {
  const int64_t* rows = nullptr;
  size_t count = 0;
};

class AttentionOp {
 public:
  // The activations and scratch of one Forward, which the caller owns: its
  // own (OwnedBuffers) or a graph's planned arena. Each is needed only
  // while Forward runs, 64-byte aligned, and of buffer_bytes()[i] bytes
  // (0: unused, may be null).
  // A step's (CreateStep) buffers are the same kinds: kQkv its projection's
  // rows, kContext, kProjScratch, and kCoreScratch its q rows zero-padded
  // for the decode kernel.
  enum Buffer {
    kInputLow,     // x or the context converted for a projection's matmul
                   // of another type (bf16)
    kQkv,          // the q, k, v planes (with a cache, q's and then the
                   // projection's rows; tiny: all)
    kContext,      // the core's output, heads merged
    kProjScratch,  // the projections' per-thread scratch
    kCoreScratch,  // the core's per-thread scratch
    kNumBuffers
  };
  using Buffers = std::array<void*, kNumBuffers>;

  // Plans x [batch * seq_len, d_in] -> y [batch * seq_len, d_out] for model
  // `m`, on `num_threads`. Without `cache`, the matmuls run in `type` and q, k
  // and v are the planes [H + 2 Hkv, batch * seq_len, D] that the model's qkv
  // Linear writes in kQkv (Hkv: the K/V heads), on its packed copies where
  // the matmuls read them, else on the op's own. Rotary embeddings, when the
  // model has them, turn q and k where the projection left them (fp32
  // only). With it (`type` fp32, a model made with MhaOptions::decode), the
  // projections run in their Linears' type (the model's dtype) and the
  // model's qkv Linear gives each token's q, k and v, copied to the q plane
  // and to rows [0, seq_len) of its cache sequence, where the core reads K
  // and V. Checked against the model's cap with `held` bytes already held;
  // a failure names `what`.
  static Result<std::unique_ptr<AttentionOp>> Create(
      const MhaModelData& m, kernels::DataType type, int64_t batch,
      int64_t seq_len, const KvView* cache, int num_threads, uint64_t held,
      const std::string& what);

  // Plans steps of `rows` new tokens against `cache` (fp32, a model made
  // with MhaOptions::decode): the model's qkv Linear [rows, (H + 2 Hkv) D]
  // (its panels up to kRowsLinearMaxRows rows, else a matmul), rotary
  // embeddings on its q and k, the tokens' q, k and v into the decode
  // kernel's rows and the cache (kernels::DecodeAppend), the decode kernel
  // over each row's keys, the model's out Linear.
  static Result<std::unique_ptr<AttentionOp>> CreateStep(
      const MhaModelData& m, int64_t rows, const KvView& cache, int num_threads,
      uint64_t held, const std::string& what);

  // The forward on `buffers` (see Buffer). `cache_seqs[i]`: the cache
  // sequence of the batch's i-th sequence (with a cache only; null
  // otherwise). With `keep` (with a cache only) y gets only the kept rows,
  // in order.
  void Forward(const float* x, const int64_t* cache_seqs, float* y,
               const Buffers& buffers, const KeptRows* keep = nullptr) const;
  // Bytes of each of Forward's buffers.
  const std::array<size_t, kNumBuffers>& buffer_bytes() const {
    return buffer_bytes_;
  }

  // A step: row r of x is token `positions[r]` of cache sequence `seqs[r]`
  // (the tokens before it are in the cache), on `buffers` of at least
  // buffer_bytes() each, kCoreScratch's padding lanes zero (OwnedBuffers::
  // Grow makes them so). `partials`: the decode kernel's, `max_partials`
  // slots of DecodePartialFloats(Dp) floats. With `keep` only the kept rows
  // attend and reach y, in order.
  void Step(const float* x, const int64_t* seqs, const int64_t* positions,
            float* y, const Buffers& buffers, float* partials,
            size_t max_partials, const KeptRows* keep = nullptr);

  // Columns of the fused projection: the q, k and v heads.
  int64_t QkvWidth() const { return (H_ + 2 * Hkv_) * D_; }
  // Rows of a step, tokens of a forward.
  int64_t rows() const { return batch_ * seq_len_; }
  int64_t batch() const { return batch_; }
  int64_t seq_len() const { return seq_len_; }
  // Bytes the op holds: its packed weights and lists, not its buffers.
  size_t bytes() const;

 private:
  AttentionOp() = default;
  Status MakeCore(kernels::DataType type);
  Status MakePlans(kernels::DataType type);
  Status Allocate(kernels::DataType type, uint64_t held,
                  const std::string& what);
  Status PackWeights();
  kernels::TinyAttentionShape TinyShape() const {
    return {batch_, seq_len_, m_->config.d_in, m_->config.d_out, H_};
  }
  void Project(const float* x, const int64_t* cache_seqs,
               const Buffers& buffers) const;
  void ScatterQkv(const float* rows, const int64_t* cache_seqs, float* q) const;
  void ProjectOut(const float* ctx, size_t rows, float* y, void* lowered,
                  void* scratch, int threads) const;
  void SizeProjectionBuffers();
  void RunDecodeKernel(const kernels::DecodeParams& params, float* partials,
                       size_t max_partials, int threads);
  Status MakeRope(size_t max_positions, uint64_t held, const std::string& what);
  void RotateForward(const int64_t* cache_seqs, const Buffers& buffers) const;

  const MhaModelData* m_ = nullptr;
  int64_t batch_ = 0, seq_len_ = 0, H_ = 0, Hkv_ = 0, D_ = 0;
  int num_threads_ = 1;
  bool tiny_ = false;  // kernels::TinyAttention; kQkv is its scratch
  bool step_ = false;  // CreateStep: the decode kernel over the cache
  std::optional<KvView> cache_;
  // The model's qkv and out Linears for this op's rows (MakePlans), on
  // their packed copies or panels, or on w_qkv_ and w_out_.
  std::optional<ops::LinearPlan> qkv_plan_, out_plan_;
  std::optional<kernels::CausalAttention> core_;
  // Rotary embeddings: the table, and each forward row's position.
  std::optional<kernels::RopeTable> rope_;
  std::vector<int64_t> positions_;
  // Weights packed for this op's tiles where the model's are laid out
  // otherwise.
  AlignedBuffer w_qkv_, w_out_;
  std::array<size_t, kNumBuffers> buffer_bytes_{};
  // Steps only: the decode kernel's rows.
  std::vector<kernels::DecodeRow> decode_rows_;
};

// Forward's and Step's buffers held by their caller, for callers without an
// arena (CachedAttention's prompts and steps).
class OwnedBuffers {
 public:
  // Checks `held` + the op's buffer_bytes() against `cap` (an error naming
  // `what`), then allocates them.
  Status Allocate(const AttentionOp& op, uint64_t held, uint64_t cap,
                  const std::string& what);
  // Whether they are the buffers `op` asks for, of its sizes exactly.
  bool Fit(const AttentionOp& op) const;
  // Whether each is at least as large as `op` asks.
  bool Holds(const AttentionOp& op) const;
  // Buffers of at least `op`'s sizes, for steps of several sizes (one per
  // owner, shared by its layers): when one is short, all are made anew,
  // each the larger of its old and `op`'s size, zeroed; `held` (which
  // leaves these buffers out) plus them must fit `cap`.
  Status Grow(const AttentionOp& op, uint64_t held, uint64_t cap,
              const std::string& what);
  const AttentionOp::Buffers& pointers() const { return pointers_; }
  size_t bytes() const;

 private:
  std::array<AlignedBuffer, AttentionOp::kNumBuffers> buffers_;
  AttentionOp::Buffers pointers_{};
};

}  // namespace attn

#endif  // ATTN_ENGINE_OPS_ATTENTION_OP_H_
