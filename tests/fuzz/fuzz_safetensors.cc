// libFuzzer target: SafetensorsFile::Open on arbitrary bytes. A file that
// opens must be consistent: sizes matching dtype x shape, every F32, F16 and
// BF16 tensor readable as floats (ASan checks the bounds).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "attn/safetensors.hpp"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static attn::fuzz::MemFile file("fuzz_safetensors");
  file.Set(data, size);
  attn::Result<attn::SafetensorsFile> opened =
      attn::SafetensorsFile::Open(file.path());
  if (!opened.ok()) {
    if (opened.status().message().empty()) std::abort();
    return 0;
  }
  unsigned sum = 0;
  for (const attn::TensorInfo& t : opened->tensors()) {
    uint64_t elems = 1;
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      elems *= static_cast<uint64_t>(d);
    }
    if (elems != t.num_elements) std::abort();
    if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") {
      auto values = opened->ReadF32(t.name);
      if (!values.ok() || values->size() != elems) std::abort();
    }
    if (opened->Find(t.name) == nullptr) std::abort();
  }
  for (const auto& [key, value] : opened->metadata()) sum += key.size();
  return static_cast<int>(sum & 0);
}
