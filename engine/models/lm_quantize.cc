// QuantizeModel (attn/lm.hpp): a model's file rewritten with its linears in
// q8_0 or q4_0 blocks (engine/io/quantized_tensors.h), one matrix at a
// time, into a folder that appears whole or not at all.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "attn/lm.hpp"
#include "engine/io/json_limits.h"
#include "engine/io/quantized_tensors.h"
#include "engine/io/safetensors_writer.h"
#include "engine/models/lm_family.h"
#include "engine/models/lm_model.h"
#include "engine/ops/linear.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/limits.h"
#include "engine/runtime/threads.h"

namespace attn {
namespace lm {
namespace {

namespace fs = std::filesystem;

// Files beside the weights that a model folder is read or published with.
constexpr const char* kSideFiles[] = {"config.json",
                                      "generation_config.json",
                                      "tokenizer.json",
                                      "tokenizer_config.json",
                                      "special_tokens_map.json",
                                      "added_tokens.json",
                                      "vocab.json",
                                      "merges.txt",
                                      "tokenizer.model",
                                      "chat_template.jinja",
                                      "chat_template.json",
                                      "LICENSE",
                                      "LICENSE.txt",
                                      "USE_POLICY.md",
                                      "NOTICE",
                                      "README.md"};

constexpr size_t kCopyChunk = size_t{16} << 20;

// A linear's weight as the file holds it: GPT-2's c_attn holds three
// roles' rows (q, k, v), every other one role's.
struct Matrix {
  std::vector<Role> roles;
  int64_t layer = 0, rows = 0, cols = 0;
};

// The file's linears by tensor name.
std::map<std::string, Matrix> MatricesOf(const FileModel& file) {
  std::map<std::string, Matrix> matrices;
  for (size_t r = 0; r < kNumRoles; ++r) {
    const auto role = static_cast<Role>(r);
    if (!IsLinearWeight(role) || !file.weights.has(role, 0)) continue;
    const int64_t layers = role == Role::kHead ? 1 : file.config.num_layers;
    const auto [out, in] = LinearShape(file.config, role);
    for (int64_t l = 0; l < layers; ++l) {
      Matrix& m = matrices[file.weights.name(role, l)];
      m.roles.push_back(role);  // in Role's order: c_attn's q, k, v
      m.layer = l;
      m.rows += out;
      m.cols = in;
    }
  }
  return matrices;
}

// `m` quantized: each role's rows as the loader reads them, then blocked.
Status AppendMatrix(const FileModel& file, const Matrix& m,
                    kernels::QuantType quant, int num_threads,
                    SafetensorsWriter& out) {
  const auto cols = static_cast<size_t>(m.cols);
  const size_t row_bytes = kernels::QuantRowsBytes(quant, 1, cols);
  ATTN_ASSIGN_OR_RETURN(
      AlignedBuffer blocks,
      AlignedBuffer::Allocate(row_bytes * static_cast<size_t>(m.rows)));
  auto* at = static_cast<char*>(blocks.data());
  const int64_t rows = m.rows / static_cast<int64_t>(m.roles.size());
  for (const Role role : m.roles) {
    ATTN_ASSIGN_OR_RETURN(const StreamedVector<float> values,
                          file.weights.fetch(role, m.layer, rows, m.cols));
    if (kernels::QuantizeRows(quant, values.data(), static_cast<size_t>(rows),
                              cols, at,
                              num_threads) < static_cast<size_t>(rows)) {
      return ops::NotFiniteToQuantize(Quoted(file.weights.name(role, m.layer)));
    }
    at += row_bytes * static_cast<size_t>(rows);
  }
  return AppendQuantized(out, quant, blocks.data(), m.rows, m.cols);
}

// What QuantizeModel returns once `stop` asks it to.
Status Stopped() { return Cancelled("quantizing stopped: asked to"); }

// Tensor `t` of `files` as stored, a chunk at a time, asking `stop` before
// each.
Status AppendCopy(const WeightFiles& files, const TensorInfo& t,
                  const std::function<bool()>& stop, std::vector<char>& chunk,
                  SafetensorsWriter& out) {
  for (size_t done = 0; done < t.size_bytes;) {
    if (stop && stop()) return Stopped();
    const size_t n = std::min(kCopyChunk, t.size_bytes - done);
    chunk.resize(n);
    ATTN_RETURN_IF_ERROR(files.ReadBytes(t.name, done, n, chunk.data()));
    ATTN_RETURN_IF_ERROR(out.Append(chunk.data(), n));
    done += n;
  }
  return {};
}

Status WriteWeights(const FileModel& file, kernels::QuantType quant,
                    int num_threads, const std::function<bool()>& stop,
                    const std::string& path) {
  const std::map<std::string, Matrix> matrices = MatricesOf(file);
  std::vector<TensorSpec> specs;
  for (const TensorInfo* t : file.files->tensors()) {
    const auto m = matrices.find(t->name);
    if (m == matrices.end()) {
      specs.push_back({t->name, t->dtype, t->shape});
      continue;
    }
    for (TensorSpec& spec :
         QuantizedSpecs(t->name, quant, m->second.rows, m->second.cols)) {
      specs.push_back(std::move(spec));
    }
  }
  std::map<std::string, std::string> metadata = QuantizationMetadata(quant);
  metadata.insert(file.files->first().metadata().begin(),
                  file.files->first().metadata().end());
  ATTN_ASSIGN_OR_RETURN(SafetensorsWriter out,
                        SafetensorsWriter::Create(path, specs, metadata));
  std::vector<char> chunk;
  for (const TensorInfo* t : file.files->tensors()) {
    const auto m = matrices.find(t->name);
    if (stop && stop()) return Stopped();
    ATTN_RETURN_IF_ERROR(
        m == matrices.end()
            ? AppendCopy(*file.files, *t, stop, chunk, out)
            : AppendMatrix(file, m->second, quant, num_threads, out));
  }
  return out.Finish();
}

// The most one matrix holds while it is quantized: its values as read and
// in nn.Linear's form (a Conv1D's are transposed), and its blocks.
uint64_t PeakBytes(const FileModel& file, kernels::QuantType quant) {
  uint64_t peak = kCopyChunk;
  for (const auto& [name, m] : MatricesOf(file)) {
    const auto rows = static_cast<uint64_t>(m.rows);
    const auto cols = static_cast<uint64_t>(m.cols);
    peak = std::max(peak, AddSat(MulSat(rows, cols * 2 * sizeof(float)),
                                 kernels::QuantRowsBytes(quant, rows, cols)));
  }
  return peak;
}

// The folder of the configuration and tokenizer beside `path`.
std::string FolderOf(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

Status CopySideFiles(const std::string& from, const std::string& to) {
  for (const char* name : kSideFiles) {
    const fs::path source = fs::path(from) / name;
    std::error_code ec;
    if (!fs::is_regular_file(source, ec)) continue;
    if (!fs::copy_file(source, fs::path(to) / name, ec)) {
      return IoError("cannot copy " + Quoted(source.string()) + " into " +
                     Quoted(to) + ": " + ec.message());
    }
  }
  return {};
}

Status OutputExists(const std::string& output) {
  return InvalidArgument("output " + Quoted(output) +
                         " exists; want a new folder's name");
}

// A folder made beside `output`, removed again unless moved there.
class PartialFolder {
 public:
  // Named for this process, made as mkdir makes one (the umask applies).
  // The name keeps 32 bytes of output's at most: a name has at most 255.
  static Result<PartialFolder> Create(const std::string& output) {
    const fs::path out(output);
    const std::string base = out.filename().string().substr(0, 32);
    for (int attempt = 0;; ++attempt) {
      std::string path = (out.parent_path() / base).string() + ".partial-" +
                         std::to_string(getpid()) + "-" +
                         std::to_string(attempt);
      if (mkdir(path.c_str(), 0777) == 0) return PartialFolder(std::move(path));
      if (errno != EEXIST || attempt == 100) {
        return IoError(
            "cannot create a folder beside " + Quoted(output) + ": " +
            std::error_code(errno, std::generic_category()).message());
      }
    }
  }
  PartialFolder(PartialFolder&& other) noexcept
      : path_(std::exchange(other.path_, "")) {}
  PartialFolder& operator=(PartialFolder&&) = delete;
  ~PartialFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  // Renames it to `output`, which must not exist (not even empty, nor made
  // meanwhile: the rename does not replace).
  Status MoveTo(const std::string& output) {
    if (renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, output.c_str(),
                  RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) return OutputExists(output);
      return IoError("cannot rename " + Quoted(path_) + " to " +
                     Quoted(output) + ": " + std::strerror(errno));
    }
    path_.clear();
    return {};
  }

 private:
  explicit PartialFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace
}  // namespace lm

Status QuantizeModel(const std::string& path, const std::string& output_name,
                     DType dtype, const LmOptions& options,
                     const std::function<bool()>& stop) {
  const std::optional<kernels::QuantType> quant = ops::QuantTypeOf(dtype);
  if (!quant) {
    return InvalidArgument(std::string("dtype ") + DTypeName(dtype) +
                           " is not a quantized type: want q8_0 or q4_0");
  }
  std::error_code ec;
  if (output_name.empty()) {
    return InvalidArgument("output is empty; want a new folder's name");
  }
  // "new/" names the folder "new", as mkdir takes it.
  std::string output = output_name;
  while (output.size() > 1 && output.back() == '/') output.pop_back();
  if (std::filesystem::exists(output, ec)) return lm::OutputExists(output);
  ATTN_ASSIGN_OR_RETURN(const lm::FileModel file,
                        lm::OpenModelFile(path, options));
  if (file.weights.quant) {
    return InvalidArgument(Quoted(path) + " holds " +
                           kernels::QuantName(*file.weights.quant) +
                           " weights already: want an F32, F16 or BF16 "
                           "checkpoint");
  }
  ATTN_RETURN_IF_ERROR(lm::CheckSizes(file.config));
  ATTN_RETURN_IF_ERROR(lm::CheckQuantizable(file.config, dtype));
  ATTN_ASSIGN_OR_RETURN(const int num_threads, ResolveNumThreads(options));
  ATTN_RETURN_IF_ERROR(CheckMemory("quantizing the largest matrix",
                                   lm::PeakBytes(file, *quant),
                                   ResolveMaxMemory(options.max_memory_bytes)));
  ATTN_ASSIGN_OR_RETURN(lm::PartialFolder partial,
                        lm::PartialFolder::Create(output));
  ATTN_RETURN_IF_ERROR(lm::WriteWeights(file, *quant, num_threads, stop,
                                        partial.path() + "/model.safetensors"));
  ATTN_RETURN_IF_ERROR(
      lm::CopySideFiles(lm::FolderOf(file.files->path()), partial.path()));
  // Once more after the weights' fsync, which may take long: a stop asked
  // meanwhile leaves nothing.
  if (stop && stop()) return lm::Stopped();
  return partial.MoveTo(output);
}

}  // namespace attn
