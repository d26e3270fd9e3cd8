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

// Key rows this far ahead are prefetched (value rows as their keys pass).
// The hardware's stream prefetchers stop at 4 KiB pages, which a 64-float
// head crosses every 16 rows; software prefetch keeps the loads in flight
// across them.
constexpr size_t kDecodePrefetchRows = 16;

// Prefetches the `dims` floats of row `row` of the rows `stride` floats
// apart from p. The row may lie past the cache: a prefetch never faults,
// and its address is formed as an integer, as a pointer there would be
// undefined.
HWY_INLINE void DecodePrefetchRow(const float* p, size_t row, size_t stride,
                                  size_t dims) {
  const uintptr_t at =
      reinterpret_cast<uintptr_t>(p) + row * stride * sizeof(float);
  for (size_t i = 0; i < dims; i += kDecodeAlign) {
    hwy::Prefetch(reinterpret_cast<const float*>(at + i * sizeof(float)));
  }
}

// scores[j] = q . k_j for j in [0, n); k rows `stride` floats apart; `dims`
// is a multiple of the vector length (rows are zero padded). Four keys at a
// time, so each q vector load serves four independent FMA chains. Unless
// null, the value rows of the same keys (laid out as k) are prefetched as
// the keys pass, so that the weighted sum after the softmax finds them in
// cache instead of starting a second stream from memory.
template <class D>
HWY_INLINE void DecodeScoresT(D d, const float* HWY_RESTRICT q,
                              const float* HWY_RESTRICT k,
                              const float* prefetch_v, size_t stride,
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
      DecodePrefetchRow(k0, kDecodePrefetchRows + u, stride, dims);
      if (prefetch_v) DecodePrefetchRow(prefetch_v, j + u, stride, dims);
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
    if (prefetch_v) DecodePrefetchRow(prefetch_v, j, stride, dims);
    const float* kj = k + j * stride;
    V a = hn::Zero(d);
    for (size_t i = 0; i < dims; i += N) {
      a = hn::MulAdd(hn::LoadU(d, q + i), hn::LoadU(d, kj + i), a);
    }
    scores[j] = hn::GetLane(hn::SumOfLanes(d, a));
  }
}

// o[i, i + kVecs * N) (+)= sum_j p[j] * v_j[i, ...): kVecs accumulators
// held in registers while the value rows stream past once. With
// `accumulate` the sum continues from o, in the same order as one longer
// call, so splitting the keys changes no bit.
template <size_t kVecs, class D>
HWY_INLINE void DecodeWeightedBlockT(D d, const float* HWY_RESTRICT p,
                                     const float* HWY_RESTRICT v, size_t stride,
                                     size_t n, bool accumulate,
                                     float* HWY_RESTRICT o) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kVecs];
  for (size_t u = 0; u < kVecs; ++u) {
    acc[u] = accumulate ? hn::LoadU(d, o + u * N) : hn::Zero(d);
  }
  for (size_t j = 0; j < n; ++j) {
    const V pj = hn::Set(d, p[j]);
    const float* vj = v + j * stride;
    for (size_t u = 0; u < kVecs; ++u) {
      acc[u] = hn::MulAdd(pj, hn::LoadU(d, vj + u * N), acc[u]);
    }
  }
  for (size_t u = 0; u < kVecs; ++u) hn::StoreU(acc[u], d, o + u * N);
}

// o[0, dims) (+)= sum_j p[j] * v_j, dims a multiple of the vector length.
template <class D>
HWY_INLINE void DecodeWeightedSumT(D d, const float* HWY_RESTRICT p,
                                   const float* HWY_RESTRICT v, size_t stride,
                                   size_t dims, size_t n, bool accumulate,
                                   float* HWY_RESTRICT o) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + 8 * N <= dims; i += 8 * N) {
    DecodeWeightedBlockT<8>(d, p, v + i, stride, n, accumulate, o + i);
  }
  if (i + 4 * N <= dims) {
    DecodeWeightedBlockT<4>(d, p, v + i, stride, n, accumulate, o + i);
    i += 4 * N;
  }
  if (i + 2 * N <= dims) {
    DecodeWeightedBlockT<2>(d, p, v + i, stride, n, accumulate, o + i);
    i += 2 * N;
  }
  if (i < dims) {
    DecodeWeightedBlockT<1>(d, p, v + i, stride, n, accumulate, o + i);
  }
}

// Query heads one pass over a chunk serves; a larger group makes several
// passes (each reading the chunk from L2 rather than memory).
constexpr size_t kDecodeMaxGroup = 8;
// Keys per sub-block: their K (or V) rows, 8 KiB at head_dim 64, stay in L1
// while every query head of the group reads them.
constexpr size_t kDecodeSubBlock = 32;

// The query heads of one work item: `count` consecutive heads starting at
// q, their partials `partial_stride` floats apart from `partial`.
struct DecodeHeads {
  const float* q;
  size_t count;
  float* partial;
  size_t partial_stride;
};

// scores[i][j] = q_i . k_j for the heads and keys [0, n) of a chunk, key
// sub-block by sub-block so that each k row is loaded from memory once. The
// first head's pass prefetches the sub-block's value rows.
template <class D>
HWY_INLINE void DecodeGroupScoresT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads,
                                   const float* HWY_RESTRICT k, const float* v,
                                   size_t n, float (*scores)[kDecodeChunk]) {
  const size_t dims = params.row_stride;
  const size_t sub = heads.count == 1 ? n : kDecodeSubBlock;
  for (size_t j0 = 0; j0 < n; j0 += sub) {
    const size_t m = std::min(sub, n - j0);
    for (size_t i = 0; i < heads.count; ++i) {
      DecodeScoresT(d, heads.q + i * dims, k + j0 * dims,
                    i == 0 ? v + j0 * dims : nullptr, dims, dims, m,
                    scores[i] + j0);
    }
  }
}

// Turns one head's scores[0, n) into p_j = exp(scale * (s_j - m)) in place
// and writes m and l = sum_j p_j to the partial. Returns false when m is
// NaN (a NaN or +inf score) or -inf (every score -inf): then the partial's
// o is zero and nothing is to be accumulated.
template <class D>
HWY_INLINE bool DecodeChunkSoftmaxT(D d, const DecodeParams& params,
                                    float* HWY_RESTRICT scores, size_t n,
                                    float* HWY_RESTRICT partial) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // Tail lanes read -inf: excluded from the max, and exp gives 0 there.
  const size_t padded = (n + N - 1) / N * N;
  for (size_t j = n; j < padded; ++j) scores[j] = -kInf;
  const float m = SoftmaxRowMax(d, scores, padded);
  partial[0] = m;
  if (!(m > -kInf)) {
    partial[1] = 0.0f;
    std::memset(partial + kDecodeAlign, 0, params.row_stride * sizeof(float));
    return false;
  }
  // Subtracting the max keeps exp finite.
  const V vm = hn::Set(d, m);
  const V vscale = hn::Set(d, params.scale);
  V vsum = hn::Zero(d);
  for (size_t j = 0; j < padded; j += N) {
    const V e = ExpNonPositive(
        d, hn::Mul(hn::Sub(hn::Load(d, scores + j), vm), vscale));
    hn::Store(e, d, scores + j);
    vsum = hn::Add(vsum, e);
  }
  partial[1] = hn::GetLane(hn::SumOfLanes(d, vsum));
  return true;
}

// One work item: keys [0, n) of a chunk (n <= kDecodeChunk) for up to
// kDecodeMaxGroup query heads sharing one K/V head. Writes each head's
// partial = {m, l, ..., o}: m the max raw score, l = sum_j exp(scale (s_j -
// m)), o = sum_j exp(scale (s_j - m)) v_j.
template <class D>
HWY_INLINE void DecodeChunkT(D d, const DecodeParams& params,
                             const DecodeHeads& heads,
                             const float* HWY_RESTRICT k,
                             const float* HWY_RESTRICT v, size_t n) {
  const size_t dims = params.row_stride;
  HWY_ALIGN float scores[kDecodeMaxGroup][kDecodeChunk];
  // The score loop prefetches keys kDecodePrefetchRows ahead (and values as
  // it goes); the first key rows are requested here.
  for (size_t j = 0; j < std::min(n, kDecodePrefetchRows); ++j) {
    DecodePrefetchRow(k, j, dims, dims);
  }
  DecodeGroupScoresT(d, params, heads, k, v, n, scores);
  bool live[kDecodeMaxGroup];
  for (size_t i = 0; i < heads.count; ++i) {
    live[i] = DecodeChunkSoftmaxT(d, params, scores[i], n,
                                  heads.partial + i * heads.partial_stride);
  }
  const size_t sub = heads.count == 1 ? n : kDecodeSubBlock;
  for (size_t j0 = 0; j0 < n; j0 += sub) {
    const size_t m = std::min(sub, n - j0);
    for (size_t i = 0; i < heads.count; ++i) {
      if (!live[i]) continue;
      float* o = heads.partial + i * heads.partial_stride + kDecodeAlign;
      DecodeWeightedSumT(d, scores[i] + j0, v + j0 * dims, dims, dims, m,
                         j0 > 0, o);
    }
  }
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

// The row of work item `item` (items count DecodeRowPartials / group per
// row, so a row's first item is first_partial / group).
HWY_INLINE const DecodeRow* DecodeRowOf(const DecodeRow* rows, size_t num_rows,
                                        size_t item, size_t group) {
  return std::upper_bound(
             rows, rows + num_rows, item * group,
             [](size_t i, const DecodeRow& r) { return i < r.first_partial; }) -
         1;
}

// Work item `item`: one key chunk of one K/V head of one row, for every
// query head of the group.
template <class D>
HWY_INLINE void DecodeItemT(D d, const DecodeParams& params,
                            const DecodeRow* rows, size_t num_rows, size_t item,
                            float* partials) {
  const size_t group = DecodeGroup(params);
  const size_t partial_floats = DecodePartialFloats(params.row_stride);
  const DecodeRow* row = DecodeRowOf(rows, num_rows, item, group);
  const size_t first_key = DecodeFirstKey(params, row->num_keys);
  const size_t chunks = DecodeChunks(row->num_keys - first_key);
  const size_t local = item - row->first_partial / group;
  const size_t g = local / chunks, c = local % chunks;
  const size_t j0 = first_key + c * kDecodeChunk;
  const size_t n = std::min(kDecodeChunk, row->num_keys - j0);
  const size_t kv = g * params.head_stride + j0 * params.row_stride;
  for (size_t h0 = 0; h0 < group; h0 += kDecodeMaxGroup) {
    const size_t h = g * group + h0;  // first query head of this pass
    DecodeHeads heads;
    heads.q = row->q + h * params.row_stride;
    heads.count = std::min(kDecodeMaxGroup, group - h0);
    heads.partial =
        partials + (row->first_partial + h * chunks + c) * partial_floats;
    heads.partial_stride = chunks * partial_floats;
    DecodeChunkT(d, params, heads, row->k + kv, row->v + kv, n);
  }
}

// The whole kernel (see DecodeAttention in decode.h).
inline void DecodeAttentionT(const DecodeParams& params, const DecodeRow* rows,
                             size_t num_rows, float* partials,
                             int num_threads) {
  const size_t H = params.num_heads;
  const size_t partial_floats = DecodePartialFloats(params.row_stride);
  const auto items = static_cast<int64_t>(
      DecodeNumPartials(params, rows, num_rows) / DecodeGroup(params));
  const auto heads = static_cast<int64_t>(num_rows * H);
#pragma omp parallel num_threads(num_threads) if (num_threads > 1)
  {
    const hn::ScalableTag<float> d;
    // Phase 1: every (row, K/V head, chunk) on its own; each partial has
    // one fixed slot.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      DecodeItemT(d, params, rows, num_rows, static_cast<size_t>(item),
                  partials);
    }
    // Phase 2 (after the implicit barrier): merge each (row, head) in order.
#pragma omp for schedule(static)
    for (int64_t rh = 0; rh < heads; ++rh) {
      const DecodeRow& row = rows[static_cast<size_t>(rh) / H];
      const size_t h = static_cast<size_t>(rh) % H;
      const size_t chunks =
          DecodeChunks(DecodeVisibleKeys(params, row.num_keys));
      DecodeMergeT(d, params,
                   partials + (row.first_partial + h * chunks) * partial_floats,
                   chunks, partial_floats, row.ctx + h * params.head_dim);
    }
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_DECODE_INL_H_
