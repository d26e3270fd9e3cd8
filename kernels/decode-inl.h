// Per-target body of the decode attention (see decode.h for the contract).
// Included once per Highway target by decode.cc and by tests/decode_test.cc.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_INL_H_
#undef ATTN_KERNELS_DECODE_INL_H_
#else
#define ATTN_KERNELS_DECODE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/decode.h"
#include "kernels/exp-inl.h"
#include "kernels/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows this far ahead are prefetched. The hardware's stream prefetchers stop
// at 4 KiB pages, which a 64-float head crosses every 16 rows; software
// prefetch keeps the loads in flight across them.
constexpr size_t kDecodePrefetchRows = 16;

// Prefetches the `dims` floats of the row at p (harmless past the end: a
// prefetch never faults).
HWY_INLINE void DecodePrefetchRow(const float* p, size_t dims) {
  for (size_t i = 0; i < dims; i += kDecodeAlign) hwy::Prefetch(p + i);
}

// scores[j] = q . k_j for j in [0, n); k rows `stride` floats apart; `dims`
// is a multiple of the vector length (rows are zero padded). Four keys at a
// time, so each q vector load serves four independent FMA chains.
template <class D>
HWY_INLINE void DecodeScoresT(D d, const float* HWY_RESTRICT q,
                              const float* HWY_RESTRICT k, size_t stride,
                              size_t dims, size_t n,
                              float* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k0 = k + j * stride;
    const float* k1 = k0 + stride;
    const float* k2 = k1 + stride;
    const float* k3 = k2 + stride;
    for (size_t u = 0; u < 4; ++u) {
      DecodePrefetchRow(k0 + (kDecodePrefetchRows + u) * stride, dims);
    }
    V a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (size_t i = 0; i < dims; i += N) {
      const V qv = hn::LoadU(d, q + i);
      a0 = hn::MulAdd(qv, hn::LoadU(d, k0 + i), a0);
      a1 = hn::MulAdd(qv, hn::LoadU(d, k1 + i), a1);
      a2 = hn::MulAdd(qv, hn::LoadU(d, k2 + i), a2);
      a3 = hn::MulAdd(qv, hn::LoadU(d, k3 + i), a3);
    }
    scores[j] = hn::GetLane(hn::SumOfLanes(d, a0));
    scores[j + 1] = hn::GetLane(hn::SumOfLanes(d, a1));
    scores[j + 2] = hn::GetLane(hn::SumOfLanes(d, a2));
    scores[j + 3] = hn::GetLane(hn::SumOfLanes(d, a3));
  }
  for (; j < n; ++j) {
    const float* kj = k + j * stride;
    V a = hn::Zero(d);
    for (size_t i = 0; i < dims; i += N) {
      a = hn::MulAdd(hn::LoadU(d, q + i), hn::LoadU(d, kj + i), a);
    }
    scores[j] = hn::GetLane(hn::SumOfLanes(d, a));
  }
}

// o[i, i + kVecs * N) = sum_j p[j] * v_j[i, ...): kVecs accumulators held in
// registers while the chunk's value rows stream past once.
template <size_t kVecs, class D>
HWY_INLINE void DecodeWeightedBlockT(D d, const float* HWY_RESTRICT p,
                                     const float* HWY_RESTRICT v, size_t stride,
                                     size_t n, float* HWY_RESTRICT o) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kVecs];
  for (size_t u = 0; u < kVecs; ++u) acc[u] = hn::Zero(d);
  for (size_t j = 0; j < n; ++j) {
    const V pj = hn::Set(d, p[j]);
    const float* vj = v + j * stride;
    DecodePrefetchRow(vj + kDecodePrefetchRows * stride, kVecs * N);
    for (size_t u = 0; u < kVecs; ++u) {
      acc[u] = hn::MulAdd(pj, hn::LoadU(d, vj + u * N), acc[u]);
    }
  }
  for (size_t u = 0; u < kVecs; ++u) hn::StoreU(acc[u], d, o + u * N);
}

// o[0, dims) = sum_j p[j] * v_j, dims a multiple of the vector length.
template <class D>
HWY_INLINE void DecodeWeightedSumT(D d, const float* HWY_RESTRICT p,
                                   const float* HWY_RESTRICT v, size_t stride,
                                   size_t dims, size_t n,
                                   float* HWY_RESTRICT o) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + 8 * N <= dims; i += 8 * N) {
    DecodeWeightedBlockT<8>(d, p, v + i, stride, n, o + i);
  }
  if (i + 4 * N <= dims) {
    DecodeWeightedBlockT<4>(d, p, v + i, stride, n, o + i);
    i += 4 * N;
  }
  if (i + 2 * N <= dims) {
    DecodeWeightedBlockT<2>(d, p, v + i, stride, n, o + i);
    i += 2 * N;
  }
  if (i < dims) DecodeWeightedBlockT<1>(d, p, v + i, stride, n, o + i);
}

// One work item: keys [0, n) of a chunk (n <= kDecodeChunk) for one query
// head. Writes partial = {m, l, ..., o}: m the max raw score, l = sum_j
// exp(scale (s_j - m)), o = sum_j exp(scale (s_j - m)) v_j. m is NaN when a
// score is NaN or +inf; m = -inf (l = 0, o = 0) when every score is -inf.
template <class D>
HWY_INLINE void DecodeChunkT(D d, const DecodeParams& params,
                             const float* HWY_RESTRICT q,
                             const float* HWY_RESTRICT k,
                             const float* HWY_RESTRICT v, size_t n,
                             float* HWY_RESTRICT partial) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t dims = params.row_stride;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  HWY_ALIGN float scores[kDecodeChunk];
  // The loops prefetch kDecodePrefetchRows ahead; the first rows of k, and of
  // v (needed after the softmax), are requested here.
  for (size_t j = 0; j < std::min(n, kDecodePrefetchRows); ++j) {
    DecodePrefetchRow(k + j * dims, dims);
  }
  DecodeScoresT(d, q, k, dims, dims, n, scores);
  for (size_t j = 0; j < std::min(n, kDecodePrefetchRows); ++j) {
    DecodePrefetchRow(v + j * dims, dims);
  }
  // Tail lanes read -inf: excluded from the max, and exp gives 0 there.
  const size_t padded = (n + N - 1) / N * N;
  for (size_t j = n; j < padded; ++j) scores[j] = -kInf;

  // The chunk's max, NaN for a NaN or +inf score (as the softmax's rows).
  const float m = SoftmaxRowMax(d, scores, padded);
  float* o = partial + kDecodeAlign;
  if (!(m > -kInf)) {  // NaN or -inf: nothing to accumulate
    partial[0] = m;
    partial[1] = 0.0f;
    std::memset(o, 0, dims * sizeof(float));
    return;
  }
  // p_j = exp(scale * (s_j - m)): subtracting the max keeps exp finite.
  const V vm = hn::Set(d, m);
  const V vscale = hn::Set(d, params.scale);
  V vsum = hn::Zero(d);
  for (size_t j = 0; j < padded; j += N) {
    const V e = ExpNonPositive(
        d, hn::Mul(hn::Sub(hn::Load(d, scores + j), vm), vscale));
    hn::Store(e, d, scores + j);
    vsum = hn::Add(vsum, e);
  }
  partial[0] = m;
  partial[1] = hn::GetLane(hn::SumOfLanes(d, vsum));
  DecodeWeightedSumT(d, scores, v, dims, dims, n, o);
}

// Merges `chunks` partials (consecutive, `partial_floats` apart) in order
// into out[0, head_dim). Clobbers the first partial's o.
template <class D>
HWY_INLINE void DecodeMergeT(D d, const DecodeParams& params, float* partials,
                             size_t chunks, size_t partial_floats, float* out) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t dims = params.row_stride;
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (size_t c = 0; c < chunks; ++c) {
    const float mc = partials[c * partial_floats];
    nan = nan || std::isnan(mc);
    m = std::max(m, mc);
  }
  if (nan || m == -std::numeric_limits<float>::infinity()) {
    const float fill = nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    std::fill(out, out + params.head_dim, fill);
    return;
  }
  float* acc = partials + kDecodeAlign;
  float l = 0.0f;
  for (size_t c = 0; c < chunks; ++c) {
    const float* pc = partials + c * partial_floats;
    // The chunk holding the max gets weight exp(0) = 1, so l >= that
    // chunk's l >= 1.
    const float w = std::exp(params.scale * (pc[0] - m));
    l += w * pc[1];
    const V vw = hn::Set(d, w);
    const float* oc = pc + kDecodeAlign;
    for (size_t i = 0; i < dims; i += N) {
      const V prev = c == 0 ? hn::Zero(d) : hn::LoadU(d, acc + i);
      hn::StoreU(hn::MulAdd(vw, hn::LoadU(d, oc + i), prev), d, acc + i);
    }
  }
  const V inv_l = hn::Set(d, 1.0f / l);
  for (size_t i = 0; i < dims; i += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, acc + i), inv_l), d, acc + i);
  }
  std::memcpy(out, acc, params.head_dim * sizeof(float));
}

// The whole kernel (see DecodeAttention in decode.h).
inline void DecodeAttentionT(const DecodeParams& params, const DecodeRow* rows,
                             size_t num_rows, float* partials,
                             int num_threads) {
  const size_t H = params.num_heads;
  const size_t num_items = DecodeNumPartials(params, rows, num_rows);
  const size_t partial_floats = DecodePartialFloats(params.row_stride);
  const auto items = static_cast<int64_t>(num_items);
  const auto heads = static_cast<int64_t>(num_rows * H);
#pragma omp parallel num_threads(num_threads) if (num_threads > 1)
  {
    const hn::ScalableTag<float> d;
    // Phase 1: every (row, head, chunk) on its own; its slot is its index.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const auto index = static_cast<size_t>(item);
      const DecodeRow* row = std::upper_bound(rows, rows + num_rows, index,
                                              [](size_t i, const DecodeRow& r) {
                                                return i < r.first_partial;
                                              }) -
                             1;
      const size_t chunks = DecodeChunks(row->num_keys);
      const size_t local = index - row->first_partial;
      const size_t h = local / chunks, c = local % chunks;
      const size_t j0 = c * kDecodeChunk;
      const size_t n = std::min(kDecodeChunk, row->num_keys - j0);
      const size_t kv = h * params.head_stride + j0 * params.row_stride;
      DecodeChunkT(d, params, row->q + h * params.row_stride, row->k + kv,
                   row->v + kv, n, partials + index * partial_floats);
    }
    // Phase 2 (after the implicit barrier): merge each (row, head) in order.
#pragma omp for schedule(static)
    for (int64_t rh = 0; rh < heads; ++rh) {
      const DecodeRow& row = rows[static_cast<size_t>(rh) / H];
      const size_t h = static_cast<size_t>(rh) % H;
      const size_t chunks = DecodeChunks(row.num_keys);
      DecodeMergeT(d, params,
                   partials + (row.first_partial + h * chunks) * partial_floats,
                   chunks, partial_floats, row.ctx + h * params.head_dim);
    }
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_DECODE_INL_H_
