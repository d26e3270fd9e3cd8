// Dynamic dispatch and OpenMP split for the element-wise kernels: one
// HWY_DYNAMIC_DISPATCH per chunk of elements.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/elementwise-inl.h"
#include "kernels/threads.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

void GeluChunk(const float* x, float* y, size_t count) { GeluT(x, y, count); }

void AddChunk(const float* a, const float* b, float* y, size_t count) {
  AddT(a, b, y, count);
}

void SiluChunk(const float* x, float* y, size_t count) { SiluT(x, y, count); }

void MulChunk(const float* a, const float* b, float* y, size_t count) {
  MulT(a, b, y, count);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(GeluChunk);
HWY_EXPORT(AddChunk);
HWY_EXPORT(SiluChunk);
HWY_EXPORT(MulChunk);

namespace {

// Calls run_chunk(first, n) over [0, count) in chunks of whole vectors of
// the widest target (ParallelForChunks: a single chunk runs on the caller).
template <class RunChunk>
void ForEachChunk(size_t count, int num_threads, const RunChunk& run_chunk) {
  ParallelForChunks(count, 1, 16, num_threads, run_chunk);
}

}  // namespace

void Gelu(const float* x, float* y, size_t count, int num_threads) {
  ForEachChunk(count, num_threads, [&](size_t i, size_t n) {
    HWY_DYNAMIC_DISPATCH(GeluChunk)(x + i, y + i, n);
  });
}

void Add(const float* a, const float* b, float* y, size_t count,
         int num_threads) {
  ForEachChunk(count, num_threads, [&](size_t i, size_t n) {
    HWY_DYNAMIC_DISPATCH(AddChunk)(a + i, b + i, y + i, n);
  });
}

void Silu(const float* x, float* y, size_t count, int num_threads) {
  ForEachChunk(count, num_threads, [&](size_t i, size_t n) {
    HWY_DYNAMIC_DISPATCH(SiluChunk)(x + i, y + i, n);
  });
}

void Mul(const float* a, const float* b, float* y, size_t count,
         int num_threads) {
  ForEachChunk(count, num_threads, [&](size_t i, size_t n) {
    HWY_DYNAMIC_DISPATCH(MulChunk)(a + i, b + i, y + i, n);
  });
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
