// AlignedBuffer: an owned, 64-byte aligned, uninitialised byte buffer.
#ifndef ATTN_ENGINE_BUFFER_H_
#define ATTN_ENGINE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "attn/status.hpp"

namespace attn {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;

  // Fails with kOutOfMemory rather than throwing.
  static Result<AlignedBuffer> Allocate(size_t bytes) {
    AlignedBuffer buffer;
    if (bytes == 0) return buffer;
    if (bytes > SIZE_MAX - 63) {
      return OutOfMemory("cannot allocate " + std::to_string(bytes) +
                         " bytes of working memory");
    }
    const size_t rounded = (bytes + 63) / 64 * 64;
    buffer.data_.reset(static_cast<char*>(std::aligned_alloc(64, rounded)));
    if (!buffer.data_) {
      return OutOfMemory("cannot allocate " + std::to_string(bytes) +
                         " bytes of working memory");
    }
    buffer.size_ = bytes;
    return buffer;
  }

  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

}  // namespace attn

#endif  // ATTN_ENGINE_BUFFER_H_
