// WeightFiles: one safetensors file or an index's shards as one set of
// tensors.
#include "engine/io/weight_files.h"

#include <filesystem>
#include <set>
#include <utility>

#include "engine/io/json_limits.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

constexpr uint64_t kMaxIndexBytes = 64u << 20;
constexpr int kMaxIndexDepth = 8;
constexpr size_t kMaxShards = 4096;  // each holds a file open

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// An index's weight_map: tensor name -> shard file name, each a plain file
// name in the index's folder: no '/', '\\' or NUL, not "." or ".." (a
// symlink there is followed: Hugging Face's cache links its blobs so).
Result<WeightFiles::WeightMap> ReadWeightMap(const std::string& path) {
  ATTN_ASSIGN_OR_RETURN(
      const std::string text,
      ReadRegularFile(path, kMaxIndexBytes, "index " + Quoted(path)));
  ATTN_ASSIGN_OR_RETURN(const nlohmann::json j,
                        ParseCheckedJson(text, kMaxIndexDepth, Quoted(path)));
  if (!j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return InvalidArgument(Quoted(path) +
                           " has no 'weight_map' object, want the shard of "
                           "each tensor (model.safetensors.index.json)");
  }
  WeightFiles::WeightMap weight_map;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    const bool plain = shard.is_string() && !shard.get<std::string>().empty() &&
                       shard.get<std::string>().find_first_of(
                           std::string("/\\\0", 3)) == std::string::npos &&
                       shard != "." && shard != "..";
    if (!plain) {
      return InvalidArgument(Quoted(path) + ": 'weight_map' gives tensor " +
                             Quoted(name) + " the shard " + shard.dump() +
                             ", want a file name in the index's folder");
    }
    weight_map.emplace(name, shard.get<std::string>());
  }
  if (weight_map.empty()) {
    return InvalidArgument(Quoted(path) + ": 'weight_map' names no tensor");
  }
  return weight_map;
}

}  // namespace

std::string WeightsInFolder(const std::string& dir) {
  std::error_code error;
  for (const char* name :
       {"model.safetensors.index.json", "model.safetensors"}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (std::filesystem::exists(path, error)) return path;
  }
  return "";
}

WeightFiles WeightFiles::Of(std::shared_ptr<const SafetensorsFile> file) {
  WeightFiles files;
  files.path_ = file->path();
  files.shards_.push_back(std::move(file));
  // One file's tensors have distinct names (SafetensorsFile::Open).
  (void)files.Index(0);
  return files;
}

Result<WeightFiles> WeightFiles::Open(const std::string& path,
                                      uint64_t max_memory_bytes) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    const std::string weights = WeightsInFolder(path);
    if (weights.empty()) {
      return InvalidArgument("folder " + Quoted(path) +
                             " holds neither model.safetensors.index.json "
                             "nor model.safetensors");
    }
    return Open(weights, max_memory_bytes);
  }
  WeightFiles files;
  files.path_ = path;
  if (!EndsWith(path, ".index.json")) {
    ATTN_ASSIGN_OR_RETURN(SafetensorsFile file,
                          SafetensorsFile::Open(path, max_memory_bytes));
    return Of(std::make_shared<const SafetensorsFile>(std::move(file)));
  }
  ATTN_ASSIGN_OR_RETURN(const auto weight_map, ReadWeightMap(path));
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);
  if (shard_names.size() > kMaxShards) {
    return InvalidArgument(
        Quoted(path) + " names " + std::to_string(shard_names.size()) +
        " shards, want at most " + std::to_string(kMaxShards));
  }
  for (const std::string& shard : shard_names) {
    const std::string shard_path = FolderOf(path) + shard;
    std::error_code error;
    if (!std::filesystem::exists(shard_path, error)) {
      return InvalidArgument(Quoted(path) + " names shard " + Quoted(shard) +
                             ", which is missing from its folder");
    }
    ATTN_ASSIGN_OR_RETURN(SafetensorsFile file,
                          SafetensorsFile::Open(shard_path, max_memory_bytes));
    files.shards_.push_back(
        std::make_shared<const SafetensorsFile>(std::move(file)));
    ATTN_RETURN_IF_ERROR(files.Index(files.shards_.size() - 1));
  }
  ATTN_RETURN_IF_ERROR(files.CheckPlaces(weight_map));
  return files;
}

Status WeightFiles::Index(size_t s) {
  const SafetensorsFile& shard = *shards_[s];
  for (const TensorInfo& t : shard.tensors()) {
    const auto [at, added] = by_name_.emplace(t.name, Entry{&t, s});
    if (!added) {
      return InvalidArgument("tensor " + Quoted(t.name) + " is in both " +
                             Quoted(shards_[at->second.shard]->path()) +
                             " and " + Quoted(shard.path()) +
                             ", want it in one shard");
    }
    tensors_.push_back(&t);
  }
  return {};
}

Status WeightFiles::CheckPlaces(const WeightMap& weight_map) const {
  const std::string folder = FolderOf(path_);
  for (const TensorInfo* t : tensors_) {
    const std::string& shard = FileOf(t->name);
    const auto placed = weight_map.find(t->name);
    if (placed == weight_map.end() || folder + placed->second != shard) {
      return InvalidArgument("tensor " + Quoted(t->name) + " is in " +
                             Quoted(shard) + ", but " + Quoted(path_) +
                             (placed == weight_map.end()
                                  ? " does not name it"
                                  : " places it in " + Quoted(placed->second)));
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    if (!by_name_.count(tensor)) {
      return InvalidArgument(Quoted(path_) + " places tensor " +
                             Quoted(tensor) + " in " + Quoted(shard) +
                             ", which does not hold it");
    }
  }
  return {};
}

const TensorInfo* WeightFiles::Find(const std::string& name) const {
  const auto at = by_name_.find(name);
  return at == by_name_.end() ? nullptr : at->second.info;
}

const std::string& WeightFiles::FileOf(const std::string& name) const {
  const auto at = by_name_.find(name);
  return at == by_name_.end() ? path_ : shards_[at->second.shard]->path();
}

Result<const SafetensorsFile*> WeightFiles::ShardOf(
    const std::string& name) const {
  const auto at = by_name_.find(name);
  if (at == by_name_.end()) {
    return InvalidArgument("tensor " + Quoted(name) + " is not in " +
                           Quoted(path_));
  }
  return shards_[at->second.shard].get();
}

Result<StreamedVector<float>> WeightFiles::ReadF32(
    const std::string& name) const {
  ATTN_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return ReadStreamed(*shard, name);
}

Result<StreamedVector<hwy::bfloat16_t>> WeightFiles::ReadBF16(
    const std::string& name) const {
  ATTN_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  const TensorInfo* t = shard->Find(name);
  if (t->dtype != "BF16") {
    return InvalidArgument("tensor " + Quoted(name) + " in " +
                           Quoted(shard->path()) + " has dtype " + t->dtype +
                           ", want BF16");
  }
  StreamedVector<hwy::bfloat16_t> values;
  try {
    values.resize(t->num_elements);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate " + std::to_string(t->num_elements) +
                       " bf16 values for tensor " + Quoted(name));
  }
  static_assert(sizeof(hwy::bfloat16_t) == 2, "BF16 is stored in 2 bytes");
  ATTN_RETURN_IF_ERROR(shard->ReadBytes(name, 0, t->size_bytes, values.data()));
  return values;
}

Status WeightFiles::ReadBytes(const std::string& name, uint64_t offset,
                              size_t size, void* out) const {
  ATTN_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->ReadBytes(name, offset, size, out);
}

Result<StreamedVector<float>> ReadStreamed(const SafetensorsFile& file,
                                           const std::string& name) {
  const TensorInfo* t = file.Find(name);
  // Not a float tensor: nothing to hold, ReadF32 names the dtype.
  const bool floats =
      t && (t->dtype == "F32" || t->dtype == "F16" || t->dtype == "BF16");
  StreamedVector<float> values;
  try {
    values.resize(floats ? t->num_elements : 0);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate " + std::to_string(t->num_elements) +
                       " floats for tensor " + Quoted(name));
  }
  ATTN_RETURN_IF_ERROR(file.ReadF32(name, values.data(), values.size()));
  return values;
}

}  // namespace attn
