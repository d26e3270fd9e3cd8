// golden_io.h: the header through attn::SafetensorsFile, which validates it;
// a tensor's bytes straight from the file.
#include "golden_io.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "attn/safetensors.hpp"

namespace {

bool Refuse(const char* path, const char* name, const char* why) {
  std::fprintf(stderr, "golden_io: '%s' of '%s': %s\n", name, path, why);
  return false;
}

// Widens `n` little-endian integers of `width` bytes into out.
void Widen(const std::vector<char>& bytes, size_t width, size_t n,
           int64_t* out) {
  for (size_t i = 0; i < n; ++i) {
    if (width == 8) {
      std::memcpy(&out[i], &bytes[i * 8], 8);
    } else {
      int32_t v = 0;
      std::memcpy(&v, &bytes[i * 4], 4);
      out[i] = v;
    }
  }
}

bool Read(const char* path, const char* name, int64_t* out, size_t capacity,
          int64_t* shape, int* rank) {
  auto file = attn::SafetensorsFile::Open(path);
  if (!file.ok()) return Refuse(path, name, file.status().message().c_str());
  const attn::TensorInfo* t = file->Find(name);
  if (!t) return Refuse(path, name, "missing");
  if (t->dtype != "I64" && t->dtype != "I32") {
    return Refuse(path, name, "not I64 or I32");
  }
  if (t->num_elements > capacity || t->shape.size() > 8) {
    return Refuse(path, name, "larger than the buffer");
  }
  std::vector<char> bytes(t->size_bytes);
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t->offset));
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return Refuse(path, name, "truncated");
  }
  Widen(bytes, t->dtype == "I64" ? 8 : 4, t->num_elements, out);
  std::copy(t->shape.begin(), t->shape.end(), shape);
  *rank = static_cast<int>(t->shape.size());
  return true;
}

}  // namespace

extern "C" int ReadGoldenIds(const char* path, const char* name, int64_t* out,
                             size_t capacity, int64_t* shape, int* rank) {
  return Read(path, name, out, capacity, shape, rank) ? 1 : 0;
}

extern "C" int ReadGoldenMetadata(const char* path, const char* key, char* out,
                                  size_t capacity) {
  auto file = attn::SafetensorsFile::Open(path);
  if (!file.ok()) return Refuse(path, key, file.status().message().c_str());
  const auto found = file->metadata().find(key);
  if (found == file->metadata().end() || capacity == 0) {
    return Refuse(path, key, "no such metadata");
  }
  std::snprintf(out, capacity, "%s", found->second.c_str());
  return 1;
}
