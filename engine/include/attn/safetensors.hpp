/* attn/safetensors.hpp: read and write safetensors files.
 * Reading maps the file and validates the whole header before any tensor is
 * handed out; writing goes to a temporary file renamed into place. */
#ifndef ATTN_SAFETENSORS_HPP_
#define ATTN_SAFETENSORS_HPP_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attn/export.h"
#include "attn/status.hpp"

namespace attn {

// One tensor of a safetensors file. `data` points into the mapped file and
// may be unaligned: copy it out (ReadF32) rather than casting it.
struct TensorInfo {
  std::string name;
  std::string dtype;  // as spelled in the file: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;
  size_t size_bytes = 0;
};

// Shape as "[2, 6, 3]", for messages.
ATTN_API std::string ShapeString(const std::vector<int64_t>& shape);

class ATTN_API SafetensorsFile {
 public:
  // Maps and validates `path`: header length, JSON, dtypes, shapes against
  // byte ranges, offsets in bounds, no overlaps, holes or trailing bytes,
  // string-valued metadata.
  static Result<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const;
  const std::vector<TensorInfo>& tensors() const;
  const std::map<std::string, std::string>& metadata() const;
  // Null when there is no tensor of that name.
  const TensorInfo* Find(const std::string& name) const;
  // Copies tensor `name` out as float; fails, naming the tensor, when it is
  // missing or not F32.
  Result<std::vector<float>> ReadF32(const std::string& name) const;

 private:
  struct ATTN_NO_EXPORT Impl;
  ATTN_NO_EXPORT explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A tensor to write: F32, row-major.
struct F32Tensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes `tensors` to `path` atomically: to a temporary file in the same
// directory, renamed over `path` only once everything is written and synced.
ATTN_API Status
WriteSafetensors(const std::string& path, const std::vector<F32Tensor>& tensors,
                 const std::map<std::string, std::string>& metadata = {});

}  // namespace attn

#endif  // ATTN_SAFETENSORS_HPP_
