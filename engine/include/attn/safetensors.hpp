/* attn/safetensors.hpp: read and write safetensors files.
 * Reading validates the whole header before any tensor is handed out, then
 * copies each tensor out of the open file on request (never a mapping, whose
 * pages fault with SIGBUS once the file shrinks); writing goes to a
 * temporary file renamed into place. */
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

// One tensor of a safetensors file; read its values with ReadF32.
struct TensorInfo {
  std::string name;
  std::string dtype;  // as spelled in the file: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of its first byte in the file
  size_t size_bytes = 0;
  size_t num_elements = 0;  // product of `shape`: the floats ReadF32 gives
};

// Shape as "[2, 6, 3]", for messages.
ATTN_API std::string ShapeString(const std::vector<int64_t>& shape);

class ATTN_API SafetensorsFile {
 public:
  // Opens and validates `path`: header length, JSON, dtypes, shapes against
  // byte ranges, offsets in bounds, no overlaps, holes or trailing bytes,
  // string-valued metadata. The file stays open until destruction. What
  // parsing the header needs (4 bytes a header byte and 1 KiB a tensor or
  // metadata key), beside `held_bytes` the caller holds, is checked against
  // max_memory_bytes (0: DefaultMaxMemoryBytes()) before it is allocated:
  // kOutOfMemory, naming the file, when it does not fit.
  static Result<SafetensorsFile> Open(const std::string& path,
                                      uint64_t max_memory_bytes = 0,
                                      uint64_t held_bytes = 0);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const;
  const std::vector<TensorInfo>& tensors() const;
  const std::map<std::string, std::string>& metadata() const;
  // Null when there is no tensor of that name.
  const TensorInfo* Find(const std::string& name) const;
  // Copies tensor `name` out as float, widening F16 and BF16 exactly; fails,
  // naming the tensor and the file, when it is missing, of another dtype, or
  // no longer in the file (truncated since Open).
  Result<std::vector<float>> ReadF32(const std::string& name) const;
  // As above into out[0, num_elements); fails before reading anything when
  // the tensor has more than `capacity` elements. On failure `out` holds
  // unspecified values.
  Status ReadF32(const std::string& name, float* out, size_t capacity) const;
  // Copies integer tensor `name` out as int64 (token ids), widening I32;
  // fails, naming the tensor and the file, when it is missing, of another
  // dtype, or no longer in the file.
  Result<std::vector<int64_t>> ReadI64(const std::string& name) const;
  // Copies bytes [offset, offset + size) of tensor `name` as stored, any
  // dtype, into `out`; fails, naming the tensor and the file, when it is
  // missing, the range passes its end, or the file has shrunk.
  Status ReadBytes(const std::string& name, uint64_t offset, size_t size,
                   void* out) const;

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

// A tensor to write: I64, row-major (token ids).
struct I64Tensor {
  std::string name;
  std::vector<int64_t> shape;
  const int64_t* data = nullptr;
};

// Writes `tensors` to `path` atomically: to a temporary file in the same
// directory, renamed over `path` only once everything is written and synced.
ATTN_API Status
WriteSafetensors(const std::string& path, const std::vector<F32Tensor>& tensors,
                 const std::map<std::string, std::string>& metadata = {});
// As above, with F32 and I64 tensors (names unique across both).
ATTN_API Status WriteSafetensors(
    const std::string& path, const std::vector<F32Tensor>& f32_tensors,
    const std::vector<I64Tensor>& i64_tensors,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace attn

#endif  // ATTN_SAFETENSORS_HPP_
