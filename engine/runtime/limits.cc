// The default memory cap (half of what this machine or container may use)
// and the one-line refusal every limit check shares.
#include "engine/runtime/limits.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "attn/attn.hpp"

namespace attn {

uint64_t DefaultMaxMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  uint64_t total = pages > 0 && page_size > 0
                       ? MulSat(static_cast<uint64_t>(pages),
                                static_cast<uint64_t>(page_size))
                       : uint64_t{8} << 30;
  // A cgroup v2 limit (containers) is what this process may really use.
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  unsigned long long limit = 0;
  if (cgroup >> limit && limit > 0 && limit < total) total = limit;
  return total / 2;
}

uint64_t ResolveMaxMemory(uint64_t requested) {
  return requested != 0 ? requested : DefaultMaxMemoryBytes();
}

std::string BytesString(uint64_t bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB",
                                       "TiB",   "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", value, kUnits[unit]);
  return text;
}

Status CheckMemory(const std::string& what, uint64_t need, uint64_t cap) {
  if (need <= cap) return {};
  return OutOfMemory(what + " needs " +
                     (need == std::numeric_limits<uint64_t>::max()
                          ? std::string("more than 16 EiB")
                          : BytesString(need)) +
                     ", over the memory limit of " + BytesString(cap) +
                     " (raise it with --max-memory or the options' "
                     "max_memory_bytes)");
}

}  // namespace attn
