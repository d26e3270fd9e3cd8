// Team-size resolution and scoping (see threads.h).
#include "engine/threads.h"

#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <string>

namespace attn {

int AffinityCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return omp_get_num_procs();
}

Result<int> ResolveNumThreads(int requested) {
  if (requested < 0) {
    return InvalidArgument("num_threads is " + std::to_string(requested) +
                           ", want 0 (default) or a positive count");
  }
  if (requested > 0) return requested;
  if (const char* env = std::getenv("ATTN_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (*end != '\0' || value <= 0 || value > 4096) {
      return InvalidArgument(std::string("ATTN_NUM_THREADS is '") + env +
                             "', want a positive integer");
    }
    return static_cast<int>(value);
  }
  return AffinityCores();
}

ThreadScope::ThreadScope(int num_threads)
    : saved_(omp_get_max_threads()),
      num_threads_(omp_in_parallel() ? 1 : num_threads) {
  omp_set_num_threads(num_threads_);
}

ThreadScope::~ThreadScope() { omp_set_num_threads(saved_); }

}  // namespace attn
