// Shared by the fuzz targets: the input bytes as a file path (a memfd, no
// disk), and a scratch directory for outputs.
#ifndef ATTN_TESTS_FUZZ_FUZZ_UTIL_H_
#define ATTN_TESTS_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attn::fuzz {

// A file whose contents are replaced on each Set; path() opens it by name.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  void Set(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t w =
          pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) std::abort();
      done += static_cast<size_t>(w);
    }
  }
  void Set(const std::string& bytes) {
    Set(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// A private directory under /dev/shm (else /tmp) for output files.
inline std::string ScratchDir() {
  std::string pattern = access("/dev/shm", W_OK) == 0
                            ? "/dev/shm/attn-fuzz.XXXXXX"
                            : "/tmp/attn-fuzz.XXXXXX";
  if (!mkdtemp(pattern.data())) std::abort();
  return pattern;
}

}  // namespace attn::fuzz

#endif  // ATTN_TESTS_FUZZ_FUZZ_UTIL_H_
