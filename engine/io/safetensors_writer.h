// Writing a safetensors file a tensor at a time, so that no copy of the
// whole file is held: the header first, from every tensor's name, dtype and
// shape, then the tensors' bytes in that order. The file appears at its
// path, synced, only once all are written; until then it is a temporary
// file beside it, removed if the writer is dropped.
#ifndef ATTN_ENGINE_IO_SAFETENSORS_WRITER_H_
#define ATTN_ENGINE_IO_SAFETENSORS_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attn/status.hpp"

namespace attn {

struct TensorSpec {
  std::string name;
  std::string dtype;  // as safetensors spells it: "F32", "F16", "U8", ...
  std::vector<int64_t> shape;
};

class SafetensorsWriter {
 public:
  // Checks the specs (unique names other than __metadata__, known dtypes,
  // sizes of sane product), creates the temporary file and writes the
  // header.
  static Result<SafetensorsWriter> Create(
      const std::string& path, const std::vector<TensorSpec>& tensors,
      const std::map<std::string, std::string>& metadata);
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  ~SafetensorsWriter();

  // Bytes of the tensors' data, in the specs' order, in pieces of any size.
  Status Append(const void* data, size_t size);
  // Once every tensor's bytes are appended: syncs, then renames the file to
  // its path.
  Status Finish();

 private:
  struct Impl;
  explicit SafetensorsWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn

#endif  // ATTN_ENGINE_IO_SAFETENSORS_WRITER_H_
