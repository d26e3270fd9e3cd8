// Per-target helpers for the partial vector at the end of a row, shared by
// the row kernels (softmax, element-wise, LayerNorm). Neither ever touches
// memory past the `count` elements: the bytes after a row may belong to
// another worker, or to no mapping at all.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_TAIL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_TAIL_INL_H_
#undef ATTN_KERNELS_TAIL_INL_H_
#else
#define ATTN_KERNELS_TAIL_INL_H_
#endif

#include <stddef.h>

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether a masked load or store of 4- or 2-byte lanes is one masked
// instruction. Highway 1.0.3's MaskedLoad on SSE4 reads the whole vector
// (past the row); its BlendedStore there, and for 2-byte lanes on AVX2,
// goes lane by lane. Those use a stack buffer instead.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kTailMasked32 = true, kTailMasked16 = true;
#elif HWY_TARGET == HWY_AVX2
constexpr bool kTailMasked32 = true, kTailMasked16 = false;
#else
constexpr bool kTailMasked32 = false, kTailMasked16 = false;
#endif

// Loads the first min(count, Lanes) floats at p; the other lanes hold
// `fill`.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V LoadTail(D d, const float* p, size_t count, V fill) {
  if constexpr (kTailMasked32) {
    const auto first = hn::FirstN(d, count);
    return hn::IfThenElse(first, hn::MaskedLoad(first, d, p), fill);
  } else {
    alignas(64) float buf[hn::MaxLanes(d)];
    hn::Store(fill, d, buf);
    std::memcpy(buf, p, std::min(count, hn::Lanes(d)) * sizeof(float));
    return hn::Load(d, buf);
  }
}

// As above, with zeros in the other lanes.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* p, size_t count) {
  return LoadTail(d, p, count, hn::Zero(d));
}

// Stores the first min(count, Lanes) lanes of v to p.
template <class D, class V = hn::Vec<D>, typename T = hn::TFromD<D>>
HWY_INLINE void StoreTail(D d, V v, T* p, size_t count) {
  if (count >= hn::Lanes(d)) {
    hn::StoreU(v, d, p);
  } else if constexpr (sizeof(T) == 4 ? kTailMasked32 : kTailMasked16) {
    hn::BlendedStore(v, hn::FirstN(d, count), d, p);
  } else {
    alignas(64) T buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    // The min is for GCC, which cannot see count < Lanes on SCALAR.
    std::memcpy(p, buf, std::min(count, hn::MaxLanes(d)) * sizeof(T));
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_TAIL_INL_H_
