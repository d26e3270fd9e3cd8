// Memory limits: the cap a model or a session may ask for (MhaOptions::
// max_memory_bytes, `--max-memory`) and overflow-safe byte arithmetic, so a
// request is checked against the cap before anything is allocated.
#ifndef ATTN_ENGINE_RUNTIME_LIMITS_H_
#define ATTN_ENGINE_RUNTIME_LIMITS_H_

#include <cstdint>
#include <limits>
#include <string>

#include "attn/status.hpp"

namespace attn {

// a * b and a + b, saturating at UINT64_MAX instead of wrapping.
inline uint64_t MulSat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max()
                                          : r;
}
inline uint64_t AddSat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max()
                                          : r;
}

// `requested`, or DefaultMaxMemoryBytes() when it is 0.
uint64_t ResolveMaxMemory(uint64_t requested);

// "1.50 GiB", for messages.
std::string BytesString(uint64_t bytes);

// OutOfMemory naming `what` when `need` is over `cap`, else OK.
Status CheckMemory(const std::string& what, uint64_t need, uint64_t cap);

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_LIMITS_H_
