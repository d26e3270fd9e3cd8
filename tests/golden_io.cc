// golden_io.h through attn::SafetensorsFile.
#include "golden_io.h"

#include <algorithm>
#include <cstdio>

#include "attn/safetensors.hpp"

namespace {

bool Refuse(const char* path, const char* name, const char* why) {
  std::fprintf(stderr, "golden_io: '%s' of '%s': %s\n", name, path, why);
  return false;
}

bool Read(const char* path, const char* name, int64_t* out, size_t capacity,
          int64_t* shape, int* rank) {
  auto file = attn::SafetensorsFile::Open(path);
  if (!file.ok()) return Refuse(path, name, file.status().message().c_str());
  const attn::TensorInfo* t = file->Find(name);
  if (!t) return Refuse(path, name, "missing");
  if (t->num_elements > capacity || t->shape.size() > 8) {
    return Refuse(path, name, "larger than the buffer");
  }
  auto ids = file->ReadI64(name);
  if (!ids.ok()) return Refuse(path, name, ids.status().message().c_str());
  std::copy(ids->begin(), ids->end(), out);
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
