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
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/cpu.h"
#include "kernels/decode.h"
#include "kernels/exp-inl.h"
#include "kernels/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Query heads one pass over a chunk computes (their scores live on the
// stack, 32 KiB); a group larger than this makes several passes over its
// K/V head, each reading the chunk from L2 rather than memory. 32 holds all
// of Llama 3.2 1B's heads (8 K/V heads of 4), so a pass reads whole key
// rows as one stream: its decode attention at 4096 keys on Zen 4 ran
// 1.3-1.8x faster than in two passes of 16, each reading half of every row.
constexpr size_t kDecodeMaxHeads = 32;

// The query heads of one pass: `count` consecutive heads, the first's
// query at q and the others padded_dim apart, their partials
// `partial_stride` floats apart from `partial`. Head i reads its K/V head
// kv_offset[i] floats from a key's row.
struct DecodeHeads {
  const float* q;
  size_t count;
  float* partial;
  size_t partial_stride;
  size_t kv_offset[kDecodeMaxHeads];
};

// Hints that the rows heads [first, first + count) read of the key at
// `key` (k or v) will be read soon: each of their K/V heads once.
HWY_INLINE void DecodePrefetchKey(const DecodeParams& params,
                                  const DecodeHeads& heads, size_t first,
                                  size_t count, const float* key) {
  for (size_t i = first; i < first + count; ++i) {
    if (i != first && heads.kv_offset[i] == heads.kv_offset[i - 1]) continue;
    const float* row = key + heads.kv_offset[i];
    for (size_t x = 0; x < params.padded_dim; x += kDecodeAlign) {
      PrefetchL2(row + x);
    }
  }
}

// Vectors of queries or of sums a block of heads keeps in registers: half
// the vector registers (x86 before AVX-512 has 16, the others 32).
constexpr size_t kDecodeBlockRegisters =
    (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 8 : 16;

// scores[first + h][j] = q . k_j for kHeads heads from `first`, kVecs
// vectors each, whose queries stay in registers while the keys pass; each
// score is the chain DecodePassScoresT makes, so a head's bits do not
// depend on its block. The block's heads are read side by side, key after
// key: in a head-major cache, one stream of keys per head (the engine's for
// such heads, DecodeBlocksHeads).
// Prefetches the block's rows `prefetch_keys` keys ahead (0: none).
template <size_t kHeads, size_t kVecs, class D>
HWY_INLINE void DecodeScoresBlockT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads, size_t first,
                                   const float* HWY_RESTRICT k, size_t n,
                                   size_t prefetch_keys,
                                   float (*scores)[kDecodeChunk]) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V q[kHeads][kVecs];
  for (size_t h = 0; h < kHeads; ++h) {
    for (size_t x = 0; x < kVecs; ++x) {
      q[h][x] = hn::LoadU(d, heads.q + (first + h) * params.padded_dim + x * N);
    }
  }
  for (size_t j = 0; j < n; ++j) {
    const float* kj = k + j * params.key_stride;
    if (prefetch_keys != 0 && j + prefetch_keys < n) {
      DecodePrefetchKey(params, heads, first, kHeads,
                        kj + prefetch_keys * params.key_stride);
    }
    for (size_t h = 0; h < kHeads; ++h) {
      const float* row = kj + heads.kv_offset[first + h];
      V a = hn::Zero(d);
      for (size_t x = 0; x < kVecs; ++x) {
        a = hn::MulAdd(q[h][x], hn::LoadU(d, row + x * N), a);
      }
      scores[first + h][j] = hn::GetLane(hn::SumOfLanes(d, a));
    }
  }
}

// scores[i][j] = q_i . k_j for the heads and keys [0, n) of a chunk, key by
// key, so that a token-major cache is read front to back as one stream;
// query heads sharing a K/V head find its row in L1. Prefetches
// `prefetch_keys` keys ahead (0: none).
template <class D>
HWY_INLINE void DecodePassScoresT(D d, const DecodeParams& params,
                                  const DecodeHeads& heads,
                                  const float* HWY_RESTRICT k, size_t n,
                                  size_t prefetch_keys,
                                  float (*scores)[kDecodeChunk]) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), dims = params.padded_dim;
  for (size_t j = 0; j < n; ++j) {
    if (prefetch_keys != 0 && j + prefetch_keys < n) {
      DecodePrefetchKey(params, heads, 0, heads.count,
                        k + (j + prefetch_keys) * params.key_stride);
    }
    for (size_t i = 0; i < heads.count; ++i) {
      const float* q = heads.q + i * dims;
      const float* kj = k + j * params.key_stride + heads.kv_offset[i];
      V a = hn::Zero(d);
      for (size_t x = 0; x < dims; x += N) {
        a = hn::MulAdd(hn::LoadU(d, q + x), hn::LoadU(d, kj + x), a);
      }
      scores[i][j] = hn::GetLane(hn::SumOfLanes(d, a));
    }
  }
}

// o_i = sum_j p_i[j] v_j over keys [0, n) for kHeads heads from `first`,
// kVecs vectors each (padded_dim floats), held in registers while the keys
// pass: no load and store of o per key, which kept the GPT-2 batch-8 pass
// waiting on its own stores. Heads without live[i] get zero. Prefetches as
// the scores.
template <size_t kHeads, size_t kVecs, class D>
HWY_INLINE void DecodeValuesBlockT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads, size_t first,
                                   const float* HWY_RESTRICT v, size_t n,
                                   size_t prefetch_keys,
                                   const float (*p)[kDecodeChunk],
                                   const bool* live) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kHeads][kVecs];
  for (size_t h = 0; h < kHeads; ++h) {
    for (size_t x = 0; x < kVecs; ++x) acc[h][x] = hn::Zero(d);
  }
  for (size_t j = 0; j < n; ++j) {
    const float* vj = v + j * params.key_stride;
    if (prefetch_keys != 0 && j + prefetch_keys < n) {
      DecodePrefetchKey(params, heads, first, kHeads,
                        vj + prefetch_keys * params.key_stride);
    }
    for (size_t h = 0; h < kHeads; ++h) {
      const V pj = hn::Set(d, p[first + h][j]);
      const float* row = vj + heads.kv_offset[first + h];
      for (size_t x = 0; x < kVecs; ++x) {
        acc[h][x] = hn::MulAdd(pj, hn::LoadU(d, row + x * N), acc[h][x]);
      }
    }
  }
  for (size_t h = 0; h < kHeads; ++h) {
    float* o =
        heads.partial + (first + h) * heads.partial_stride + kDecodeAlign;
    for (size_t x = 0; x < kVecs; ++x) {
      hn::StoreU(live[first + h] ? acc[h][x] : hn::Zero(d), d, o + x * N);
    }
  }
}

// o_i = sum_j p_i[j] v_j over keys [0, n), key by key as the scores, for
// the heads with live[i] (zero for the others). Each o_i, padded_dim floats,
// stays in L1 between keys. Prefetches as the scores.
template <class D>
HWY_INLINE void DecodePassValuesT(D d, const DecodeParams& params,
                                  const DecodeHeads& heads,
                                  const float* HWY_RESTRICT v, size_t n,
                                  size_t prefetch_keys,
                                  const float (*p)[kDecodeChunk],
                                  const bool* live) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), dims = params.padded_dim;
  for (size_t i = 0; i < heads.count; ++i) {
    std::memset(heads.partial + i * heads.partial_stride + kDecodeAlign, 0,
                dims * sizeof(float));
  }
  for (size_t j = 0; j < n; ++j) {
    if (prefetch_keys != 0 && j + prefetch_keys < n) {
      DecodePrefetchKey(params, heads, 0, heads.count,
                        v + (j + prefetch_keys) * params.key_stride);
    }
    for (size_t i = 0; i < heads.count; ++i) {
      if (!live[i]) continue;
      float* HWY_RESTRICT o =
          heads.partial + i * heads.partial_stride + kDecodeAlign;
      const float* vj = v + j * params.key_stride + heads.kv_offset[i];
      const V pj = hn::Set(d, p[i][j]);
      for (size_t x = 0; x < dims; x += N) {
        hn::StoreU(hn::MulAdd(pj, hn::LoadU(d, vj + x), hn::LoadU(d, o + x)), d,
                   o + x);
      }
    }
  }
}

// Turns one head's scores[0, n) into p_j = exp(scale * (s_j - m)) in place
// and writes m and l = sum_j p_j to the partial. Returns false when m is
// NaN (a NaN or +inf score) or -inf (every score -inf): then l is zero and
// nothing is to be accumulated.
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

// The softmax of every head's scores of a pass (DecodeChunkSoftmaxT):
// live[i] false where head i has nothing to accumulate.
template <class D>
HWY_INLINE void DecodePassSoftmaxT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads, size_t n,
                                   float (*scores)[kDecodeChunk], bool* live) {
  for (size_t i = 0; i < heads.count; ++i) {
    live[i] = DecodeChunkSoftmaxT(d, params, scores[i], n,
                                  heads.partial + i * heads.partial_stride);
  }
}

// f(std::integral_constant<size_t, kHeads>(), first) for the heads [first,
// count) in blocks of kHeads, the rest in blocks of half as many, and so on
// down to one: the more heads a block reads side by side, the more streams
// the memory serves at once. A batch-1 GPT-2 step at 2 threads splits its
// 12 heads into items of 2; as one block of two instead of two of one they
// read a 160-key cache in 29-30 us instead of 32-35 (decode_bench, Zen 5).
template <size_t kHeads, class F>
HWY_INLINE void ForEachHeadBlock(size_t count, const F& f, size_t first = 0) {
  for (; first + kHeads <= count; first += kHeads) {
    f(std::integral_constant<size_t, kHeads>(), first);
  }
  if constexpr (kHeads > 1) {
    ForEachHeadBlock<kHeads / 2>(count, f, first);
  }
}

// Scores, softmax and values of a pass for heads of kVecs vectors: blocks
// of heads whose queries, then sums, fill kDecodeBlockRegisters registers.
template <size_t kVecs, class D>
HWY_INLINE void DecodeBlockedPassT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads,
                                   const float* HWY_RESTRICT k,
                                   const float* HWY_RESTRICT v, size_t n,
                                   size_t prefetch_keys,
                                   float (*scores)[kDecodeChunk], bool* live) {
  static_assert(kVecs <= kDecodeBlockRegisters, "a head fits the registers");
  constexpr size_t kHeads = kDecodeBlockRegisters / kVecs;
  ForEachHeadBlock<kHeads>(heads.count, [&](auto block, size_t first) {
    DecodeScoresBlockT<decltype(block)::value, kVecs>(
        d, params, heads, first, k, n, prefetch_keys, scores);
  });
  DecodePassSoftmaxT(d, params, heads, n, scores, live);
  ForEachHeadBlock<kHeads>(heads.count, [&](auto block, size_t first) {
    DecodeValuesBlockT<decltype(block)::value, kVecs>(
        d, params, heads, first, v, n, prefetch_keys, scores, live);
  });
}

// Widest head, in vectors, whose blocks DecodeBlockedPassT holds in
// registers, and whose query or sums DecodeTiledPassT does.
constexpr size_t kDecodeBlockMaxVecs = 8;

// Whether DecodePassT runs heads of `group` query heads per K/V head and
// padded_dim floats through DecodeBlockedPassT: ungrouped heads of 1 to
// kDecodeBlockMaxVecs vectors (16 to 128 dimensions on AVX-512, 8 to 64 on
// AVX2; grouped heads of as many go tile by tile, DecodeTiledPassT).
// Decoders lay out their caches by this (DecodeBlocksHeads).
template <class D>
HWY_INLINE bool DecodeBlocksHeadsT(D d, size_t group, size_t padded_dim) {
  const size_t N = hn::Lanes(d);
  return group == 1 && padded_dim % N == 0 &&
         padded_dim <= kDecodeBlockMaxVecs * N;
}

// f(std::integral_constant<size_t, vecs>()) for heads of `vecs` vectors,
// kVecs <= vecs <= kDecodeBlockMaxVecs: the passes that hold a head in
// registers.
template <size_t kVecs = 1, class F>
HWY_INLINE void DecodeWithVecs(size_t vecs, const F& f) {
  if (vecs == kVecs) return f(std::integral_constant<size_t, kVecs>());
  if constexpr (kVecs < kDecodeBlockMaxVecs) {
    DecodeWithVecs<kVecs + 1>(vecs, f);
  }
}

// Keys of one tile of DecodeTiledPassT: 16 KiB of Llama 3.2 1B's keys (8
// K/V heads of 64 floats), in L1 while every query head reads its part.
// decode_bench's Llama shape ran 3-20% slower in tiles of 16 on Zen 5.
constexpr size_t kDecodeTileKeys = 8;

// Prefetches the next tile's keys [first, first + keys) spread over the
// heads of a pass: every heads / keys heads hint every K/V head's row of one
// key, and the keys left after the last head go at once. A burst of a whole
// tile's lines at the start of each tile stalled on its own prefetches; two
// tiles ahead was slower still.
class DecodeTilePrefetch {
 public:
  DecodeTilePrefetch(const DecodeParams& params, const DecodeHeads& heads,
                     const float* kv_chunk, size_t first, size_t n)
      : params_(params),
        heads_(heads),
        kv_(first < n ? kv_chunk + first * params.key_stride : nullptr),
        keys_(std::min(kDecodeTileKeys, n - std::min(first, n))),
        every_(std::max<size_t>(1, heads.count / std::max<size_t>(1, keys_))) {}

  // Before head i of the pass.
  HWY_INLINE void AtHead(size_t i) const {
    if (kv_ != nullptr && i % every_ == 0 && i / every_ < keys_) {
      Key(i / every_);
    }
  }
  // After the last head.
  HWY_INLINE void AfterHeads() const {
    if (kv_ == nullptr) return;
    for (size_t t = (heads_.count + every_ - 1) / every_; t < keys_; ++t) {
      Key(t);
    }
  }

 private:
  HWY_INLINE void Key(size_t t) const {
    DecodePrefetchKey(params_, heads_, 0, heads_.count,
                      kv_ + t * params_.key_stride);
  }

  const DecodeParams& params_;
  const DecodeHeads& heads_;
  const float* kv_;  // the next tile's first key, or null: none
  size_t keys_, every_;
};

// The scores of DecodePassScoresT tile by tile of kDecodeTileKeys keys,
// for heads of kVecs vectors (padded_dim floats): over a tile each head
// keeps its query in registers and reads its part of the tile's keys from
// L1 once the first head of its K/V head brought them in. The same chains
// in the same order as key by key, so the same bits.
template <size_t kVecs, class D>
HWY_INLINE void DecodeTiledScoresT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads,
                                   const float* HWY_RESTRICT k, size_t n,
                                   float (*scores)[kDecodeChunk]) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), stride = params.key_stride;
  for (size_t j0 = 0; j0 < n; j0 += kDecodeTileKeys) {
    const size_t end = std::min(n, j0 + kDecodeTileKeys);
    const DecodeTilePrefetch next(params, heads, k, end, n);
    for (size_t i = 0; i < heads.count; ++i) {
      next.AtHead(i);
      V q[kVecs];
      for (size_t x = 0; x < kVecs; ++x) {
        q[x] = hn::LoadU(d, heads.q + i * params.padded_dim + x * N);
      }
      const float* row = k + heads.kv_offset[i];
      for (size_t j = j0; j < end; ++j) {
        V a = hn::Zero(d);
        for (size_t x = 0; x < kVecs; ++x) {
          a = hn::MulAdd(q[x], hn::LoadU(d, row + j * stride + x * N), a);
        }
        scores[i][j] = hn::GetLane(hn::SumOfLanes(d, a));
      }
    }
    next.AfterHeads();
  }
}

// The sums of DecodePassValuesT tile by tile as the scores: each head's
// sums in registers over a tile, in L1 between tiles.
template <size_t kVecs, class D>
HWY_INLINE void DecodeTiledValuesT(D d, const DecodeParams& params,
                                   const DecodeHeads& heads,
                                   const float* HWY_RESTRICT v, size_t n,
                                   const float (*p)[kDecodeChunk],
                                   const bool* live) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), stride = params.key_stride;
  for (size_t i = 0; i < heads.count; ++i) {
    float* o = heads.partial + i * heads.partial_stride + kDecodeAlign;
    for (size_t x = 0; x < kVecs; ++x) hn::StoreU(hn::Zero(d), d, o + x * N);
  }
  for (size_t j0 = 0; j0 < n; j0 += kDecodeTileKeys) {
    const size_t end = std::min(n, j0 + kDecodeTileKeys);
    const DecodeTilePrefetch next(params, heads, v, end, n);
    for (size_t i = 0; i < heads.count; ++i) {
      next.AtHead(i);
      if (!live[i]) continue;
      float* o = heads.partial + i * heads.partial_stride + kDecodeAlign;
      V acc[kVecs];
      for (size_t x = 0; x < kVecs; ++x) acc[x] = hn::LoadU(d, o + x * N);
      const float* row = v + heads.kv_offset[i];
      for (size_t j = j0; j < end; ++j) {
        const V pj = hn::Set(d, p[i][j]);
        for (size_t x = 0; x < kVecs; ++x) {
          acc[x] =
              hn::MulAdd(pj, hn::LoadU(d, row + j * stride + x * N), acc[x]);
        }
      }
      for (size_t x = 0; x < kVecs; ++x) hn::StoreU(acc[x], d, o + x * N);
    }
    next.AfterHeads();
  }
}

// One pass tile by tile, for grouped heads of up to kDecodeBlockMaxVecs
// vectors. Key by key, each head's sums went to L1 and back at every key:
// decode_bench's Llama shape (32 heads on 8 K/V heads, 4096 keys) on Zen 5
// took 1.1-1.5 ms on one thread and as long on two, tile by tile 0.85-1.04
// and 0.48-0.55 ms. Whatever DecodePrefetch says, the next tile is
// prefetched: without, 1.3 ms on one thread; all at once at the start of a
// tile, 1.0-1.25.
template <size_t kVecs, class D>
HWY_INLINE void DecodeTiledPassT(D d, const DecodeParams& params,
                                 const DecodeHeads& heads,
                                 const float* HWY_RESTRICT k,
                                 const float* HWY_RESTRICT v, size_t n,
                                 float (*scores)[kDecodeChunk], bool* live) {
  DecodeTiledScoresT<kVecs>(d, params, heads, k, n, scores);
  DecodePassSoftmaxT(d, params, heads, n, scores, live);
  DecodeTiledValuesT<kVecs>(d, params, heads, v, n, scores, live);
}

// One pass: keys [0, n) of a chunk (n <= kDecodeChunk) for `heads`; k and
// v point at the chunk's first key of K/V head 0; both passes prefetch
// `prefetch_keys` keys ahead (0: none) except tile by tile, which always
// prefetches the next tile. Writes each head's partial = {m, l,
// ..., o}: m the max raw score, l = sum_j exp(scale (s_j - m)), o = sum_j
// exp(scale (s_j - m)) v_j. Heads DecodeBlocksHeadsT picks go through
// registers (DecodeBlockedPassT); other heads of up to kDecodeBlockMaxVecs
// vectors (grouped heads) tile by tile (DecodeTiledPassT), wider ones key
// by key through L1: the same bits every way. Blocks of grouped heads were
// slower: 12 heads on 3 K/V heads by 1.35-1.5x on Zen 5, each block reading
// one K/V head's part of every key.
template <class D>
HWY_INLINE void DecodePassT(D d, const DecodeParams& params,
                            const DecodeHeads& heads,
                            const float* HWY_RESTRICT k,
                            const float* HWY_RESTRICT v, size_t n,
                            size_t prefetch_keys) {
  HWY_ALIGN float scores[kDecodeMaxHeads][kDecodeChunk];
  bool live[kDecodeMaxHeads];
  const size_t vecs = params.padded_dim / hn::Lanes(d);
  if (DecodeBlocksHeadsT(d, DecodeGroup(params), params.padded_dim)) {
    return DecodeWithVecs(vecs, [&](auto kVecs) {
      DecodeBlockedPassT<decltype(kVecs)::value>(d, params, heads, k, v, n,
                                                 prefetch_keys, scores, live);
    });
  }
  if (params.padded_dim % hn::Lanes(d) == 0 && vecs <= kDecodeBlockMaxVecs) {
    return DecodeWithVecs(vecs, [&](auto kVecs) {
      DecodeTiledPassT<decltype(kVecs)::value>(d, params, heads, k, v, n,
                                               scores, live);
    });
  }
  DecodePassScoresT(d, params, heads, k, n, prefetch_keys, scores);
  DecodePassSoftmaxT(d, params, heads, n, scores, live);
  DecodePassValuesT(d, params, heads, v, n, prefetch_keys, scores, live);
}

// Merges `chunks` partials (consecutive, `partial_floats` apart) in order
// into out[0, head_dim). Clobbers the first partial's o.
template <class D>
HWY_INLINE void DecodeMergeT(D d, const DecodeParams& params, float* partials,
                             size_t chunks, size_t partial_floats, float* out) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t dims = params.padded_dim;
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

// How the work items split each row: `kv_heads` K/V heads per item, so
// `blocks` items per key chunk.
struct DecodeSplit {
  size_t kv_heads;
  size_t blocks;
};

// All of a row's K/V heads in one item (as many as one pass computes),
// unless the rows' `chunks` would then give fewer than four items per
// thread to balance; then smaller blocks (rounding may leave slightly fewer
// items than four per thread). The split changes no bit: an item computes
// each of its (head, chunk) partials as any other item would.
HWY_INLINE DecodeSplit DecodeSplitOf(const DecodeParams& params, size_t chunks,
                                     int num_threads) {
  const size_t Hkv = DecodeKvHeads(params);
  auto blocks_of = [Hkv](size_t kv_heads) {
    return (Hkv + kv_heads - 1) / kv_heads;
  };
  size_t kv_heads =
      std::min(Hkv, std::max<size_t>(1, kDecodeMaxHeads / DecodeGroup(params)));
  const size_t wanted = 4 * static_cast<size_t>(num_threads);
  if (num_threads > 1 && chunks * blocks_of(kv_heads) < wanted) {
    const size_t blocks = std::min(Hkv, (wanted + chunks - 1) / chunks);
    kv_heads = std::min(kv_heads, (Hkv + blocks - 1) / blocks);
  }
  return {kv_heads, blocks_of(kv_heads)};
}

// The row of work item `item`: a row's items are its chunks x split.blocks,
// so its first is first_partial / num_heads * split.blocks.
HWY_INLINE const DecodeRow* DecodeRowOf(const DecodeParams& params,
                                        const DecodeSplit& split,
                                        const DecodeRow* rows, size_t num_rows,
                                        size_t item) {
  const size_t H = params.num_heads;
  return std::upper_bound(rows, rows + num_rows, item,
                          [&](size_t i, const DecodeRow& r) {
                            return i < r.first_partial / H * split.blocks;
                          }) -
         1;
}

// Work item `item`: one key chunk of one row, for every query head of one
// block of K/V heads.
template <class D>
HWY_INLINE void DecodeItemT(D d, const DecodeParams& params,
                            const DecodeSplit& split, const DecodeRow* rows,
                            size_t num_rows, size_t item, size_t prefetch_keys,
                            float* partials) {
  const size_t H = params.num_heads, group = DecodeGroup(params);
  const size_t partial_floats = DecodePartialFloats(params.padded_dim);
  const DecodeRow* row = DecodeRowOf(params, split, rows, num_rows, item);
  const size_t first_key = DecodeFirstKey(params, row->num_keys);
  const size_t chunks = DecodeChunks(row->num_keys - first_key);
  const size_t local = item - row->first_partial / H * split.blocks;
  const size_t c = local / split.blocks, block = local % split.blocks;
  const size_t j0 = first_key + c * kDecodeChunk;
  const size_t n = std::min(kDecodeChunk, row->num_keys - j0);
  const size_t kv_end =
      std::min(DecodeKvHeads(params), (block + 1) * split.kv_heads);
  const size_t heads_end = kv_end * group;
  for (size_t h = block * split.kv_heads * group; h < heads_end;
       h += kDecodeMaxHeads) {
    DecodeHeads heads;
    heads.q = row->q + h * params.padded_dim;
    heads.count = std::min(kDecodeMaxHeads, heads_end - h);
    for (size_t i = 0; i < heads.count; ++i) {
      heads.kv_offset[i] = (h + i) / group * params.head_stride;
    }
    heads.partial =
        partials + (row->first_partial + h * chunks + c) * partial_floats;
    heads.partial_stride = chunks * partial_floats;
    DecodePassT(d, params, heads, row->k + j0 * params.key_stride,
                row->v + j0 * params.key_stride, n, prefetch_keys);
  }
}

// The whole kernel (see DecodeAttention in decode.h).
inline void DecodeAttentionT(const DecodeParams& params, const DecodeRow* rows,
                             size_t num_rows, float* partials, int num_threads,
                             DecodePrefetch prefetch) {
  if (num_rows == 0) return;
  const size_t prefetch_keys =
      prefetch == DecodePrefetch::kKeysAhead ? kDecodePrefetchKeys : 0;
  const size_t H = params.num_heads;
  const size_t partial_floats = DecodePartialFloats(params.padded_dim);
  const size_t all_chunks = DecodeNumPartials(params, rows, num_rows) / H;
  const DecodeSplit split = DecodeSplitOf(params, all_chunks, num_threads);
  const auto items = static_cast<int64_t>(all_chunks * split.blocks);
  const auto heads = static_cast<int64_t>(num_rows * H);
  const hn::ScalableTag<float> d;
  // Phase 1: every (row, chunk, block of K/V heads) on its own; each
  // partial has one fixed slot.
  const auto run_item = [&](int64_t item) {
    DecodeItemT(d, params, split, rows, num_rows, static_cast<size_t>(item),
                prefetch_keys, partials);
  };
  // Phase 2 (after phase 1): merge each (row, head) in order.
  const auto merge = [&](int64_t rh) {
    const DecodeRow& row = rows[static_cast<size_t>(rh) / H];
    const size_t h = static_cast<size_t>(rh) % H;
    const size_t chunks = DecodeChunks(DecodeVisibleKeys(params, row.num_keys));
    DecodeMergeT(d, params,
                 partials + (row.first_partial + h * chunks) * partial_floats,
                 chunks, partial_floats, row.ctx + h * params.head_dim);
  };
  if (num_threads <= 1) {  // without libgomp's cost of a region (threads.h)
    for (int64_t item = 0; item < items; ++item) run_item(item);
    for (int64_t rh = 0; rh < heads; ++rh) merge(rh);
    return;
  }
#pragma omp parallel num_threads(num_threads)
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      run_item(item);
    }  // the loop's implicit barrier ends phase 1
#pragma omp for schedule(static)
    for (int64_t rh = 0; rh < heads; ++rh) merge(rh);
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_DECODE_INL_H_
