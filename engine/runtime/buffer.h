// AlignedBuffer: an owned, 64-byte aligned (from 2 MiB on: 2 MiB aligned, on
// huge pages where Linux allows), uninitialised byte buffer; and
// Workspace: the buffers of one plan, checked against the memory cap as one
// request before any of them is allocated.
#ifndef ATTN_ENGINE_RUNTIME_BUFFER_H_
#define ATTN_ENGINE_RUNTIME_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/status.hpp"
#include "engine/runtime/huge_pages.h"
#include "engine/runtime/limits.h"

namespace attn {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // A moved-from buffer is empty: no data and size 0.
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  // Fails with kOutOfMemory rather than throwing. A buffer of a huge page
  // or more starts on one and asks for huge pages (engine/huge_pages.h).
  static Result<AlignedBuffer> Allocate(size_t bytes) {
    AlignedBuffer buffer;
    if (bytes == 0) return buffer;
    buffer.data_.reset(static_cast<char*>(AllocateStreamed(bytes)));
    if (!buffer.data_) {
      return OutOfMemory("cannot allocate " + std::to_string(bytes) +
                         " bytes of working memory");
    }
    buffer.size_ = bytes;
    return buffer;
  }

  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

  // Zeroes the buffer, faulting every page in now (a cache of hundreds of
  // MB on huge pages: hundreds of faults, not a hundred thousand).
  void ZeroAllPages() {
    if (size_ == 0) return;
    std::memset(data_.get(), 0, size_);
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

// Usage: Add every buffer a plan needs, then Allocate once. A failed check
// or allocation leaves every listed buffer empty.
class Workspace {
 public:
  void Add(AlignedBuffer* buffer, size_t bytes) {
    wants_.push_back({buffer, bytes});
  }
  // Bytes of the buffers listed so far.
  uint64_t bytes() const {
    uint64_t total = 0;
    for (const Want& want : wants_) total = AddSat(total, want.bytes);
    return total;
  }
  // Checks `held` + bytes() against `cap` (an error naming `what`), then
  // allocates every listed buffer.
  Status Allocate(const std::string& what, uint64_t held, uint64_t cap) {
    ATTN_RETURN_IF_ERROR(CheckMemory(what, AddSat(held, bytes()), cap));
    for (const Want& want : wants_) {
      Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(want.bytes);
      if (!buffer.ok()) {
        for (const Want& w : wants_) *w.buffer = AlignedBuffer();
        return buffer.status();
      }
      *want.buffer = std::move(buffer).value();
    }
    return {};
  }

 private:
  struct Want {
    AlignedBuffer* buffer;
    size_t bytes;
  };
  std::vector<Want> wants_;
};

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_BUFFER_H_
