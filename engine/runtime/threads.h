// The one setting that decides the team size, for our OpenMP loops and for
// oneDNN's alike (see engine/README.md, "Threads").
#ifndef ATTN_ENGINE_RUNTIME_THREADS_H_
#define ATTN_ENGINE_RUNTIME_THREADS_H_

#include <string>

#include "attn/attn.hpp"
#include "attn/status.hpp"
#include "kernels/threads.h"

namespace attn {

// The number of cores this process may run on (its affinity mask).
int AffinityCores();

// What `attn tune --save` recorded: a JSON object whose "num_threads" is
// the recommended team size (other keys describe the sweep and are ignored).
struct TunedConfig {
  int num_threads = 0;
};

// Reads a tuned file. Each error is one line naming the file and the fault.
Result<TunedConfig> ReadTunedConfig(const std::string& path);

// `requested` when > 0, else ATTN_NUM_THREADS, else the tuned file
// `tuned_config` (when not empty), else the one named by ATTN_CONFIG, else
// AffinityCores(). A malformed ATTN_NUM_THREADS or tuned file is an error,
// not silently ignored.
Result<int> ResolveNumThreads(int requested,
                              const std::string& tuned_config = "");

// The team size `options` ask for (ResolveNumThreads).
Result<int> ResolveNumThreads(const ModelOptions& options);

// The team-size guard (kernels/threads.h): one for the kernels and the
// engine alike.
using kernels::ThreadScope;

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_THREADS_H_
