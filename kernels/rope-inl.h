// Per-target body of the rotary position embeddings (see rope.h for the
// contract). Included once per Highway target by rope.cc and by the tests.

// Per-target include guard (Highway idiom; see hwy/examples/skeleton-inl.h).
#if defined(ATTN_KERNELS_ROPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_ROPE_INL_H_
#undef ATTN_KERNELS_ROPE_INL_H_
#else
#define ATTN_KERNELS_ROPE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include "hwy/highway.h"
#include "kernels/rope.h"
#include "kernels/tail-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One head, rotate-half: (x1, x2) := (x1 cos - x2 sin, x2 cos + x1 sin), x1
// and x2 being its first and second halves, half floats each.
template <class D>
HWY_INLINE void RotateHalfT(D d, float* HWY_RESTRICT x,
                            const float* HWY_RESTRICT cos,
                            const float* HWY_RESTRICT sin, size_t half) {
  const size_t N = hn::Lanes(d);
  float* HWY_RESTRICT x2 = x + half;
  size_t i = 0;
  for (; i + N <= half; i += N) {
    const auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x2 + i);
    const auto c = hn::LoadU(d, cos + i), s = hn::LoadU(d, sin + i);
    hn::StoreU(hn::MulSub(a, c, hn::Mul(b, s)), d, x + i);
    hn::StoreU(hn::MulAdd(b, c, hn::Mul(a, s)), d, x2 + i);
  }
  if (i < half) {
    const size_t n = half - i;
    const auto a = LoadTail(d, x + i, n), b = LoadTail(d, x2 + i, n);
    const auto c = LoadTail(d, cos + i, n), s = LoadTail(d, sin + i, n);
    StoreTail(d, hn::MulSub(a, c, hn::Mul(b, s)), x + i, n);
    StoreTail(d, hn::MulAdd(b, c, hn::Mul(a, s)), x2 + i, n);
  }
}

// Every head of every row; row r is at positions[r], or at first_position + r
// when positions is null.
HWY_INLINE void RopeRowsT(const RopeTable& table, const RopeRows& rows,
                          const int64_t* positions, int64_t first_position) {
  const hn::ScalableTag<float> d;
  const size_t half = static_cast<size_t>(table.head_dim() / 2);
  for (size_t r = 0; r < rows.num_rows; ++r) {
    const int64_t p =
        positions ? positions[r] : first_position + static_cast<int64_t>(r);
    float* row = rows.data + r * rows.row_stride;
    for (size_t h = 0; h < rows.num_heads; ++h) {
      RotateHalfT(d, row + h * rows.head_stride, table.cos(p), table.sin(p),
                  half);
    }
  }
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTN_KERNELS_ROPE_INL_H_
