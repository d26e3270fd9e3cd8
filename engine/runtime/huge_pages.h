// Buffers that are read as streams (weights, KV caches) on 2 MiB pages.
// A decode step reads every weight once: on 4 KiB pages that is a TLB miss
// every 64 cache lines, and the hardware prefetchers restart at every page.
// Measured on a Zen 4, huge pages read 19% faster at one thread. Linux gives
// them to a region that asks (madvise) when transparent huge pages are in
// `madvise` or `always` mode; elsewhere nothing changes.
// Header-only, so that the benches allocate as the engine does.
#ifndef ATTN_ENGINE_RUNTIME_HUGE_PAGES_H_
#define ATTN_ENGINE_RUNTIME_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace attn {

constexpr size_t kHugePageBytes = size_t{2} << 20;

// The alignment of a buffer of `bytes`: a huge page from one huge page on
// (so that every whole huge page of it can be one), else a cache line.
inline size_t StreamAlignment(size_t bytes) {
  return bytes >= kHugePageBytes ? kHugePageBytes : 64;
}

// Asks for huge pages on the whole huge pages within [p, p + bytes); the
// rest keeps small pages. Best on fresh memory: pages already faulted in
// stay small until khugepaged merges them.
inline void AdviseHugePages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kHugePageBytes - 1) / kHugePageBytes;
  const uintptr_t end = (begin + bytes) / kHugePageBytes;
  if (end > first) {
    (void)madvise(reinterpret_cast<void*>(first * kHugePageBytes),
                  (end - first) * kHugePageBytes, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)bytes;
#endif
}

// `bytes` (> 0) of uninitialised memory aligned by StreamAlignment, huge
// pages asked for; null when out of memory. Free with std::free.
inline void* AllocateStreamed(size_t bytes) {
  const size_t align = StreamAlignment(bytes);
  if (bytes > SIZE_MAX - (align - 1)) return nullptr;
  // aligned_alloc wants a multiple of the alignment (AddressSanitizer
  // enforces it).
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (p != nullptr) AdviseHugePages(p, bytes);
  return p;
}

// std::allocator's counterpart for a model's vectors of weights:
// AllocateStreamed's memory, so that they sit on huge pages too (on small
// pages, filling one faults every 4 KiB: seconds a gigabyte under some
// hypervisors).
template <class T>
struct StreamedAllocator {
  using value_type = T;
  StreamedAllocator() = default;
  template <class U>
  StreamedAllocator(const StreamedAllocator<U>&) noexcept {}  // NOLINT
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    void* p = AllocateStreamed(n > 0 ? n * sizeof(T) : 1);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  friend bool operator==(const StreamedAllocator&, const StreamedAllocator&) {
    return true;
  }
  friend bool operator!=(const StreamedAllocator&, const StreamedAllocator&) {
    return false;
  }
};
template <class T>
using StreamedVector = std::vector<T, StreamedAllocator<T>>;

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_HUGE_PAGES_H_
