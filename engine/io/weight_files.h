// A model's weights as one set of tensors: a safetensors file, or the shards
// a Hugging Face index (model.safetensors.index.json) names, each kept open
// and read in place, tensor by tensor.
#ifndef ATTN_ENGINE_IO_WEIGHT_FILES_H_
#define ATTN_ENGINE_IO_WEIGHT_FILES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "attn/safetensors.hpp"
#include "attn/status.hpp"
#include "engine/runtime/huge_pages.h"
#include "hwy/base.h"

namespace attn {

class WeightFiles {
 public:
  // An index's weight_map: tensor name -> shard file name.
  using WeightMap = std::map<std::string, std::string>;

  // Opens `path`: a safetensors file, an index (a name ending in
  // ".index.json") and every shard its weight_map names, from the index's
  // folder, or a model's folder (WeightsInFolder). Refused in one line naming
  // the index and the shard or tensor: a shard name that is not a plain file
  // name, a shard that is missing or unreadable, a tensor present in two
  // shards, a tensor the index places in a shard that does not hold it, or one
  // a shard holds that the index does not place there. Headers parse within
  // `max_memory_bytes` (0: DefaultMaxMemoryBytes()), as SafetensorsFile::Open.
  static Result<WeightFiles> Open(const std::string& path,
                                  uint64_t max_memory_bytes = 0);
  // The tensors of one file already open.
  static WeightFiles Of(std::shared_ptr<const SafetensorsFile> file);

  // The file or index opened.
  const std::string& path() const { return path_; }
  // Every tensor, shard by shard.
  const std::vector<const TensorInfo*>& tensors() const { return tensors_; }
  // Null when no shard holds `name`.
  const TensorInfo* Find(const std::string& name) const;
  // The file holding tensor `name`, for messages; path() when none does.
  const std::string& FileOf(const std::string& name) const;
  // The first file: its metadata is the model's.
  const SafetensorsFile& first() const { return *shards_.front(); }
  // As SafetensorsFile::ReadF32, from the shard holding `name`, into a
  // vector on huge pages.
  Result<StreamedVector<float>> ReadF32(const std::string& name) const;
  // A BF16 tensor's values as stored, into a vector on huge pages (no fp32
  // copy); another dtype is refused naming it.
  Result<StreamedVector<hwy::bfloat16_t>> ReadBF16(
      const std::string& name) const;
  // As SafetensorsFile::ReadBytes, from the shard holding `name`.
  Status ReadBytes(const std::string& name, uint64_t offset, size_t size,
                   void* out) const;

 private:
  struct Entry {
    const TensorInfo* info;
    size_t shard;
  };
  // The shard holding `name`, or an error naming it.
  Result<const SafetensorsFile*> ShardOf(const std::string& name) const;
  // Adds shard `s`'s tensors, each in no shard before it.
  Status Index(size_t s);
  // Each tensor is in the shard the index places it in, and the index
  // places none elsewhere.
  Status CheckPlaces(const WeightMap& weight_map) const;

  std::string path_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::vector<const TensorInfo*> tensors_;
  std::unordered_map<std::string, Entry> by_name_;
};

// SafetensorsFile::ReadF32 into a vector on huge pages.
Result<StreamedVector<float>> ReadStreamed(const SafetensorsFile& file,
                                           const std::string& name);

// Where a model folder keeps its weights: model.safetensors.index.json when
// present, else model.safetensors; empty when it has neither.
std::string WeightsInFolder(const std::string& dir);

}  // namespace attn

#endif  // ATTN_ENGINE_IO_WEIGHT_FILES_H_
