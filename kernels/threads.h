// The team-size guard every OpenMP region and oneDNN call runs under, and
// the static split of the small kernels.
#ifndef ATTN_KERNELS_THREADS_H_
#define ATTN_KERNELS_THREADS_H_

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/base.h"

namespace attn::kernels {

// Sets the calling thread's OpenMP team size (which oneDNN follows) for the
// scope's lifetime and restores the caller's setting after. Inside an
// enclosing parallel region the team is 1: the host's threads are already
// busy, and nesting would oversubscribe the cores.
class ThreadScope {
 public:
  explicit ThreadScope(int num_threads)
      : saved_(omp_get_max_threads()),
        num_threads_(omp_in_parallel() ? 1 : num_threads) {
    omp_set_num_threads(num_threads_);
  }
  ~ThreadScope() { omp_set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;
  int num_threads() const { return num_threads_; }

 private:
  int saved_;
  int num_threads_;
};

// Floats of work that the small kernels (elementwise, norms, rotations, the
// cache append) give one chunk: 64 KiB, microseconds of work. On 2-vCPU VMs
// a region of two threads costs 2.4-3 us (bench/threads_bench), more than a
// decode step's norm or residual add of 8 rows, which therefore stay on the
// caller.
constexpr size_t kParallelGrainFloats = 16384;

// Calls fn(first, n) over [0, count) items of `item_floats` floats each, in
// chunks of about kParallelGrainFloats floats, whole multiples of `align`
// items but the last, as many as a multiple of the team so that each thread
// takes an equal share, split statically. One chunk or one thread runs on
// the caller without entering libgomp, which spends 1.3 us even on a region
// an `if` clause turns off.
template <class Fn>
void ParallelForChunks(size_t count, size_t item_floats, size_t align,
                       int num_threads, const Fn& fn) {
  if (count == 0) return;
  HWY_DASSERT(align >= 1);
  const size_t grain = std::max<size_t>(
      1, kParallelGrainFloats / std::max<size_t>(item_floats, 1));
  size_t chunks = (count + grain - 1) / grain;
  if (chunks <= 1 || num_threads <= 1) {
    fn(size_t{0}, count);
    return;
  }
  const auto team = static_cast<size_t>(num_threads);
  chunks = (chunks + team - 1) / team * team;
  const size_t per_chunk = (count + chunks - 1) / chunks;
  const size_t size = (per_chunk + align - 1) / align * align;
  const auto parts = static_cast<int64_t>((count + size - 1) / size);
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t c = 0; c < parts; ++c) {
    const size_t first = static_cast<size_t>(c) * size;
    fn(first, std::min(size, count - first));
  }
}

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_THREADS_H_
