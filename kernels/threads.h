// The team-size guard every OpenMP region and oneDNN call runs under.
#ifndef ATTN_KERNELS_THREADS_H_
#define ATTN_KERNELS_THREADS_H_

#include <omp.h>

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

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_THREADS_H_
