// Safetensors reading (validated up front, tensors copied out of the open
// file with pread, F16 and BF16 widened to float) and atomic writing.
#include "attn/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <unordered_map>
#include <utility>

#include "engine/io/json_limits.h"
#include "engine/io/safetensors_writer.h"
#include "engine/runtime/limits.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

using nlohmann::json;

// Limits checked before anything is allocated for a tensor.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // as the reference reader
constexpr size_t kMaxTensors = 1u << 16;
constexpr size_t kMaxRank = 8;

// What parsing a header holds at its peak, measured: the text, the lexer's
// copy of its longest string, the DOM's strings and the metadata's copy
// (4 bytes a header byte: a 95 MB metadata string peaks near 380 MB), and
// per tensor entry or metadata key its DOM and map nodes and the tensor's
// record (about 800 bytes measured; a header of 65536 one-byte tensors
// peaks near 54 MB).
constexpr uint64_t kParseBytesPerHeaderByte = 4;
constexpr uint64_t kParseBytesPerEntry = 1024;

// The header of `where`, `len` bytes of `entries` tensors and metadata
// keys, parsed beside `held` bytes, must fit `cap`.
Status CheckParseFits(const std::string& where, uint64_t len, uint64_t entries,
                      uint64_t held, uint64_t cap) {
  const uint64_t need = AddSat(MulSat(len, kParseBytesPerHeaderByte),
                               MulSat(entries, kParseBytesPerEntry));
  return CheckMemory(
      "parsing the header of " + where + " (" + std::to_string(len) + " bytes" +
          (entries
               ? ", " + std::to_string(entries) + " tensors and metadata keys"
               : std::string()) +
          (held ? ") beside " + BytesString(held) + " held" : std::string(")")),
      AddSat(held, need), cap);
}

size_t DTypeSize(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

// An open file descriptor, closed on destruction.
struct FileHandle {
  int fd = -1;
  FileHandle() = default;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle() {
    if (fd >= 0) close(fd);
  }
};

Status OpenRegularFile(const std::string& path, FileHandle* file,
                       uint64_t* size) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; S_ISREG below
  // refuses it.
  file->fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file->fd < 0) {
    return IoError("cannot open " + Quoted(path) + ": " + std::strerror(errno));
  }
  struct stat st;
  if (fstat(file->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return IoError(Quoted(path) + " is not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return {};
}

// Reads bytes [offset, offset + n) of the file into `dst`. A file that has
// shrunk since it was opened is an error naming `what`, not a signal.
Status ReadAt(const FileHandle& file, const std::string& path,
              const std::string& what, uint64_t offset, size_t n, void* dst) {
  auto* p = static_cast<unsigned char*>(dst);
  const uint64_t end = offset + n;
  while (n > 0) {
    const ssize_t got = pread(file.fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return IoError("cannot read " + what + " in " + Quoted(path) + ": " +
                     std::strerror(errno));
    }
    if (got == 0) {
      struct stat st;
      const std::string now = fstat(file.fd, &st) == 0
                                  ? std::to_string(st.st_size) + " bytes"
                                  : "shorter";
      return IoError(what + " in " + Quoted(path) + " ends at byte " +
                     std::to_string(end) + ", but the file is now " + now +
                     " (truncated since it was opened)");
    }
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return {};
}

float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Exact widenings: every F16 and BF16 value (subnormals, infinities and NaN
// payloads included) is a float.
float F32FromF16(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // infinity or NaN
    return FloatFromBits(sign | 0x7F800000u | mantissa << 13);
  }
  if (exponent != 0) {  // normal: rebias the exponent from 15 to 127
    return FloatFromBits(sign | (exponent + 112) << 23 | mantissa << 13);
  }
  // Zero or subnormal, mantissa * 2^-24: a normal float, exactly.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

float F32FromBF16(uint16_t h) { return FloatFromBits(uint32_t{h} << 16); }

// First pass over a header: the shared checks (syntax, duplicate keys in
// any object, which nlohmann's DOM keeps the last of silently) and this
// format's limits on tensors, nesting and array lengths, without building
// anything: linear time and memory bounded by the header, where nlohmann's
// callback parser is quadratic in the number of tensors.
class HeaderChecker : public JsonChecker {
 public:
  // The root, tensor entries and their arrays; narrower checks below.
  HeaderChecker() : JsonChecker(3) {}

  bool start_object(std::size_t n) override {
    // The root, then tensor entries and __metadata__: nothing deeper.
    if (depth() >= 2) {
      return Fail("nests objects deeper than a tensor entry");
    }
    return JsonChecker::start_object(n);
  }
  bool key(string_t& name) override {
    if (depth() == 1 && name != "__metadata__" && ++tensors_ > kMaxTensors) {
      return Fail("lists more than " + std::to_string(kMaxTensors) +
                  " tensors, the limit");
    }
    if (depth() == 1) root_key_ = name;
    // Bound the keys below the root too: a tensor entry has three known
    // fields, and __metadata__ at most kMaxTensors keys.
    if (depth() == 2 && root_key_ != "__metadata__" && name != "dtype" &&
        name != "shape" && name != "data_offsets") {
      return Fail("has unknown field " + Quoted(name) + " in tensor " +
                  Quoted(root_key_) + " (want dtype, shape, data_offsets)");
    }
    if (depth() == 2 && root_key_ == "__metadata__" && items() >= kMaxTensors) {
      return Fail("has more than " + std::to_string(kMaxTensors) +
                  " metadata keys, the limit");
    }
    if (depth() == 2 && root_key_ == "__metadata__") ++metadata_keys_;
    return JsonChecker::key(name);
  }
  // Tensor entries and metadata keys so far.
  size_t entries() const { return tensors_ + metadata_keys_; }
  bool start_array(std::size_t n) override {
    // shape and data_offsets hold numbers only.
    if (depth() >= 3) return Fail("nests arrays inside arrays");
    return JsonChecker::start_array(n);
  }

 private:
  // Counts a value (or container) placed in the innermost array.
  bool Value() override {
    if (!JsonChecker::Value()) return false;
    if (in_array() && items() > kMaxRank) {
      return Fail("has an array of more than " + std::to_string(kMaxRank) +
                  " items (the rank limit)");
    }
    return true;
  }
  std::string root_key_;  // the tensor (or __metadata__) being read
  size_t tensors_ = 0;
  size_t metadata_keys_ = 0;
};

// The memory cap a header's parse is checked against, and what the caller
// holds beside it.
struct ParseBudget {
  uint64_t cap = 0;  // resolved: never 0
  uint64_t held = 0;
};

// Checks the header (HeaderChecker), and what its DOM needs against the
// budget, then parses it.
Status ParseHeader(const std::string& where, const char* begin, const char* end,
                   const ParseBudget& budget, json* header) {
  if (begin == end || *begin != '{') {
    return InvalidArgument("header of " + where +
                           " does not start with '{' (want a JSON object)");
  }
  HeaderChecker checker;
  if (!json::sax_parse(begin, end, &checker) || !checker.problem().empty()) {
    return InvalidArgument(
        "header of " + where + " " +
        (checker.problem().empty() ? "is not valid JSON" : checker.problem()));
  }
  ATTN_RETURN_IF_ERROR(CheckParseFits(where, uint64_t(end - begin),
                                      checker.entries(), budget.held,
                                      budget.cap));
  try {
    *header = json::parse(begin, end);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("header of " + where +
                       " needs more memory than there is");
  } catch (const json::exception& e) {
    return InvalidArgument("header of " + where +
                           " is not valid JSON: " + e.what());
  }
  if (!header->is_object()) {
    return InvalidArgument("header of " + where +
                           " is not a JSON object of tensors");
  }
  return {};
}

// Reads a non-negative integer that fits in uint64_t (JSON floats refused).
bool AsCount(const json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  *out = value.get<uint64_t>();
  return true;
}

// Reads and parses the header: its 8-byte length (checked against the limit,
// the file's size and the budget), then the JSON (ParseHeader).
Status ReadHeader(const FileHandle& file, const std::string& path,
                  uint64_t file_size, const ParseBudget& budget, json* header,
                  uint64_t* header_len) {
  const std::string where = Quoted(path);
  if (file_size < 8) {
    return InvalidArgument(where + " is " + std::to_string(file_size) +
                           " bytes: not a safetensors file (want an 8-byte "
                           "header length, then a JSON header)");
  }
  unsigned char len_bytes[8];
  ATTN_RETURN_IF_ERROR(ReadAt(file, path, "header length", 0, 8, len_bytes));
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = len << 8 | len_bytes[i];
  if (len > kMaxHeaderBytes) {
    return InvalidArgument("header length " + std::to_string(len) + " of " +
                           where + " is over the limit of " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (len > file_size - 8) {
    return InvalidArgument("header length " + std::to_string(len) + " of " +
                           where + " runs past the end of the file (" +
                           std::to_string(file_size) + " bytes)");
  }
  // Before the text is read: what its bytes alone will need.
  ATTN_RETURN_IF_ERROR(CheckParseFits(where, len, 0, budget.held, budget.cap));
  std::string text;
  try {
    text.resize(len);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("header of " + where + " (" + std::to_string(len) +
                       " bytes) needs more memory than there is");
  }
  ATTN_RETURN_IF_ERROR(ReadAt(file, path, "header", 8, len, text.data()));
  *header_len = len;
  return ParseHeader(where, text.data(), text.data() + text.size(), budget,
                     header);
}

// Creates a new file beside `path` for writing, named into `tmp`, with mode
// 0666 less the umask, as a plain create gets: the kernel applies the umask,
// which mkstemp's 0600 would need us to read, and reading it means setting
// it, under other threads. O_EXCL makes the name ours. The name is short
// whatever `path`'s is, so any name that fits a directory works. -1 and
// errno on error.
int CreateBeside(const std::string& path, std::string* tmp) {
  static std::atomic<unsigned> counter{0};
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "" : path.substr(0, slash + 1);
  for (int attempt = 0; attempt < 100; ++attempt) {
    *tmp = dir + ".attn-" + std::to_string(getpid()) + "-" +
           std::to_string(counter++) + ".tmp";
    const int fd =
        open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;  // errno is EEXIST
}

// Tensor `name` of `file`, when ReadF32 can read it: F32, F16 or BF16.
Result<const TensorInfo*> FindFloat(const SafetensorsFile& file,
                                    const std::string& name) {
  const TensorInfo* t = file.Find(name);
  if (!t) {
    return InvalidArgument("tensor " + Quoted(name) + " is missing from " +
                           Quoted(file.path()));
  }
  if (t->dtype != "F32" && t->dtype != "F16" && t->dtype != "BF16") {
    return InvalidArgument("tensor " + Quoted(name) + " in " +
                           Quoted(file.path()) + " has dtype " + t->dtype +
                           ", want F32, F16 or BF16");
  }
  return t;
}

// Tensor `name` of `file`, when ReadI64 can read it: I64 or I32.
Result<const TensorInfo*> FindInteger(const SafetensorsFile& file,
                                      const std::string& name) {
  const TensorInfo* t = file.Find(name);
  if (!t) {
    return InvalidArgument("tensor " + Quoted(name) + " is missing from " +
                           Quoted(file.path()));
  }
  if (t->dtype != "I64" && t->dtype != "I32") {
    return InvalidArgument("tensor " + Quoted(name) + " in " +
                           Quoted(file.path()) + " has dtype " + t->dtype +
                           ", want I64 or I32");
  }
  return t;
}

// Where the tensors' bytes lie in the file.
struct DataSection {
  uint64_t begin = 0, size = 0;
};

// The header's "__metadata__": an object of strings.
Status ReadMetadata(const json& entry, const std::string& where,
                    std::map<std::string, std::string>& metadata) {
  if (!entry.is_object()) {
    return InvalidArgument("__metadata__ of " + where +
                           " is not a JSON object");
  }
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      return InvalidArgument("__metadata__ key " + Quoted(key) + " of " +
                             where + " is " + value.type_name() +
                             ", want a string");
    }
    metadata[key] = value.get<std::string>();
  }
  return {};
}

// A tensor's shape into info->shape, and the bytes it needs at `elem` bytes
// an element; `tensor` names it in messages.
Result<uint64_t> ReadShape(const json& shape, size_t elem,
                           const std::string& tensor, TensorInfo* info) {
  if (!shape.is_array() || shape.size() > kMaxRank) {
    return InvalidArgument(tensor + " has shape " + shape.dump() +
                           ", want an array of at most " +
                           std::to_string(kMaxRank) + " sizes");
  }
  uint64_t bytes_wanted = elem;
  for (const json& dim : shape) {
    uint64_t size = 0;
    if (!AsCount(dim, &size) || size > (uint64_t{1} << 48)) {
      return InvalidArgument(tensor + " has shape " + shape.dump() +
                             ", want non-negative integers");
    }
    if (size != 0 && bytes_wanted > UINT64_MAX / size) {
      return InvalidArgument(tensor + " has shape " + shape.dump() +
                             " whose byte size overflows");
    }
    bytes_wanted *= size;
    info->shape.push_back(static_cast<int64_t>(size));
  }
  return bytes_wanted;
}

// One tensor's header entry into *info, and its byte range in the data
// section into *range, checked against `data` and its dtype and shape.
Status ReadEntry(const std::string& name, const json& entry,
                 const std::string& where, const DataSection& data,
                 TensorInfo* info, std::pair<uint64_t, uint64_t>* range) {
  const std::string tensor = "tensor " + Quoted(name) + " in " + where;
  if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") ||
      !entry.contains("shape") || !entry.contains("data_offsets")) {
    return InvalidArgument(tensor +
                           " must have exactly dtype, shape, data_offsets");
  }
  info->name = name;
  const json& dtype = entry["dtype"];
  const size_t elem =
      dtype.is_string() ? DTypeSize(dtype.get<std::string>()) : 0;
  if (elem == 0) {
    return InvalidArgument(tensor + " has unknown dtype " + dtype.dump());
  }
  info->dtype = dtype.get<std::string>();
  ATTN_ASSIGN_OR_RETURN(const uint64_t bytes_wanted,
                        ReadShape(entry["shape"], elem, tensor, info));
  const json& offsets = entry["data_offsets"];
  uint64_t begin = 0, end = 0;
  if (!offsets.is_array() || offsets.size() != 2 ||
      !AsCount(offsets[0], &begin) || !AsCount(offsets[1], &end)) {
    return InvalidArgument(tensor + " has data_offsets " + offsets.dump() +
                           ", want [begin, end] as non-negative integers");
  }
  if (begin > end || end > data.size) {
    return InvalidArgument(tensor + " has data_offsets " + offsets.dump() +
                           " outside the data section of " +
                           std::to_string(data.size) + " bytes");
  }
  if (end - begin != bytes_wanted) {
    return InvalidArgument(tensor + " spans " + std::to_string(end - begin) +
                           " bytes, but " + info->dtype + " " +
                           ShapeString(info->shape) + " needs " +
                           std::to_string(bytes_wanted));
  }
  info->offset = data.begin + begin;
  info->size_bytes = static_cast<size_t>(end - begin);
  info->num_elements = info->size_bytes / elem;
  *range = {begin, end};
  return {};
}

// The tensors must tile the data section exactly: no overlap, hole or
// trailing byte.
Status CheckTiling(std::vector<std::pair<uint64_t, uint64_t>> ranges,
                   const std::string& where, uint64_t data_size) {
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin < covered) {
      return InvalidArgument("tensors in " + where + " overlap at byte " +
                             std::to_string(begin) + " of the data section");
    }
    if (begin > covered) {
      return InvalidArgument("data section of " + where + " has a hole at " +
                             "bytes [" + std::to_string(covered) + ", " +
                             std::to_string(begin) + ")");
    }
    covered = end;
  }
  if (covered != data_size) {
    return InvalidArgument("data section of " + where + " has " +
                           std::to_string(data_size - covered) +
                           " trailing bytes that no tensor covers");
  }
  return {};
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

struct SafetensorsFile::Impl {
  std::string path;
  FileHandle file;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> index;  // name -> tensors[i]
  std::map<std::string, std::string> metadata;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept =
    default;
SafetensorsFile::~SafetensorsFile() = default;

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path,
                                              uint64_t max_memory_bytes,
                                              uint64_t held_bytes) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  uint64_t file_size = 0;
  ATTN_RETURN_IF_ERROR(OpenRegularFile(path, &impl->file, &file_size));
  json header;
  uint64_t header_len = 0;
  const ParseBudget budget{ResolveMaxMemory(max_memory_bytes), held_bytes};
  ATTN_RETURN_IF_ERROR(
      ReadHeader(impl->file, path, file_size, budget, &header, &header_len));
  const std::string where = Quoted(path);
  const DataSection data{8 + header_len, file_size - (8 + header_len)};
  if (header.size() - header.count("__metadata__") > kMaxTensors) {
    return InvalidArgument(where + " lists " + std::to_string(header.size()) +
                           " tensors, over the limit of " +
                           std::to_string(kMaxTensors));
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end), bytes
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      ATTN_RETURN_IF_ERROR(ReadMetadata(entry, where, impl->metadata));
      continue;
    }
    TensorInfo info;
    ranges.emplace_back();
    ATTN_RETURN_IF_ERROR(
        ReadEntry(name, entry, where, data, &info, &ranges.back()));
    impl->index.emplace(info.name, impl->tensors.size());
    impl->tensors.push_back(std::move(info));
  }
  ATTN_RETURN_IF_ERROR(CheckTiling(std::move(ranges), where, data.size));
  return SafetensorsFile(std::move(impl));
}

const std::string& SafetensorsFile::path() const { return impl_->path; }
const std::vector<TensorInfo>& SafetensorsFile::tensors() const {
  return impl_->tensors;
}
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  // Hashed: a graph of n nodes looks up O(n) names.
  const auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

Result<std::vector<float>> SafetensorsFile::ReadF32(
    const std::string& name) const {
  Result<const TensorInfo*> t = FindFloat(*this, name);
  if (!t.ok()) return t.status();
  std::vector<float> values;
  try {
    values.resize((*t)->num_elements);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate " + std::to_string((*t)->num_elements) +
                       " floats for tensor " + Quoted(name));
  }
  ATTN_RETURN_IF_ERROR(ReadF32(name, values.data(), values.size()));
  return values;
}

Status SafetensorsFile::ReadF32(const std::string& name, float* out,
                                size_t capacity) const {
  Result<const TensorInfo*> found = FindFloat(*this, name);
  if (!found.ok()) return found.status();
  const TensorInfo* t = *found;
  const std::string tensor = "tensor " + Quoted(name);
  const std::string where = " in " + Quoted(impl_->path);
  if (t->num_elements > capacity) {
    return InvalidArgument(tensor + " " + ShapeString(t->shape) + where +
                           " has " + std::to_string(t->num_elements) +
                           " elements, but capacity is " +
                           std::to_string(capacity));
  }
  if (t->dtype == "F32") {  // little-endian, as on every host we build for
    return ReadAt(impl_->file, impl_->path, tensor, t->offset, t->size_bytes,
                  out);
  }
  float (*const widen)(uint16_t) = t->dtype == "F16" ? F32FromF16 : F32FromBF16;
  // Widened a chunk at a time, so no copy of the whole tensor is made.
  unsigned char chunk[1 << 14];
  for (size_t done = 0; done < t->num_elements;) {
    const size_t n = std::min(t->num_elements - done, sizeof chunk / 2);
    ATTN_RETURN_IF_ERROR(ReadAt(impl_->file, impl_->path, tensor,
                                t->offset + 2 * done, 2 * n, chunk));
    for (size_t i = 0; i < n; ++i) {
      out[done + i] =
          widen(static_cast<uint16_t>(chunk[2 * i] | chunk[2 * i + 1] << 8));
    }
    done += n;
  }
  return {};
}

Status SafetensorsFile::ReadBytes(const std::string& name, uint64_t offset,
                                  size_t size, void* out) const {
  const TensorInfo* t = Find(name);
  const std::string tensor = "tensor " + Quoted(name);
  if (!t) {
    return InvalidArgument(tensor + " is missing from " + Quoted(impl_->path));
  }
  if (offset > t->size_bytes || size > t->size_bytes - offset) {
    return InvalidArgument(tensor + " in " + Quoted(impl_->path) + " has " +
                           std::to_string(t->size_bytes) + " bytes, want " +
                           std::to_string(offset + size) + " or more");
  }
  return ReadAt(impl_->file, impl_->path, tensor, t->offset + offset, size,
                out);
}

Result<std::vector<int64_t>> SafetensorsFile::ReadI64(
    const std::string& name) const {
  Result<const TensorInfo*> found = FindInteger(*this, name);
  if (!found.ok()) return found.status();
  const TensorInfo* t = *found;
  const std::string tensor = "tensor " + Quoted(name);
  std::vector<int64_t> values;
  try {
    values.resize(t->num_elements);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate " + std::to_string(t->num_elements) +
                       " integers for " + tensor);
  }
  // Little-endian, as on every host we build for. I32 is read into the
  // back half of the buffer, then widened front to back, which never
  // overwrites a value not yet widened.
  const size_t element_size = t->dtype == "I64" ? 8 : 4;
  char* bytes = reinterpret_cast<char*>(values.data());
  char* read_to = bytes + (8 - element_size) * t->num_elements;
  ATTN_RETURN_IF_ERROR(ReadAt(impl_->file, impl_->path, tensor, t->offset,
                              t->size_bytes, read_to));
  if (element_size == 8) return values;
  for (size_t i = 0; i < t->num_elements; ++i) {
    int32_t narrow;
    std::memcpy(&narrow, read_to + 4 * i, 4);
    values[i] = narrow;
  }
  return values;
}

struct SafetensorsWriter::Impl {
  std::string path, tmp;
  int fd = -1;
  int error = 0;  // errno of the first failed call
  uint64_t size = 0, written = 0;

  ~Impl() {
    if (fd >= 0) close(fd);
    if (!tmp.empty()) unlink(tmp.c_str());
  }
  bool Check(bool ok) {
    if (!ok && error == 0) error = errno ? errno : EIO;
    return ok && error == 0;
  }
  bool WriteAll(const void* p, size_t n) {
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  Status Failed() const {
    return IoError("cannot write " + Quoted(path) + ": " +
                   std::strerror(error));
  }
};

SafetensorsWriter::SafetensorsWriter(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&&) noexcept =
    default;
SafetensorsWriter::~SafetensorsWriter() = default;

namespace {

// The header of `tensors`, laid out one after another; their total bytes
// into `size`.
Result<std::string> HeaderOf(const std::vector<TensorSpec>& tensors,
                             const std::map<std::string, std::string>& metadata,
                             uint64_t* size) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const std::string tensor = "tensor " + Quoted(t.name);
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name)) {
      return InvalidArgument(tensor +
                             " cannot be written: want a unique, "
                             "non-empty name other than __metadata__");
    }
    uint64_t bytes = DTypeSize(t.dtype);
    if (bytes == 0) {
      return InvalidArgument(tensor + " has dtype " + Quoted(t.dtype) +
                             ", want one of safetensors' dtypes");
    }
    for (int64_t dim : t.shape) {
      const auto n = static_cast<uint64_t>(dim);
      if (dim < 0 || (n != 0 && bytes > (uint64_t{1} << 60) / n)) {
        return InvalidArgument(tensor + " has shape " + ShapeString(t.shape) +
                               ", want non-negative sizes of sane product");
      }
      bytes *= n;
    }
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  *size = offset;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8-aligned data section
  return text;
}

}  // namespace

Result<SafetensorsWriter> SafetensorsWriter::Create(
    const std::string& path, const std::vector<TensorSpec>& tensors,
    const std::map<std::string, std::string>& metadata) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  ATTN_ASSIGN_OR_RETURN(const std::string header,
                        HeaderOf(tensors, metadata, &impl->size));
  impl->fd = CreateBeside(path, &impl->tmp);
  if (impl->fd < 0) {
    impl->tmp.clear();
    return IoError("cannot create a temporary file beside " + Quoted(path) +
                   ": " + std::strerror(errno));
  }
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) {
    len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  }
  if (!impl->Check(impl->WriteAll(len, 8) &&
                   impl->WriteAll(header.data(), header.size()))) {
    return impl->Failed();
  }
  return SafetensorsWriter(std::move(impl));
}

Status SafetensorsWriter::Append(const void* data, size_t size) {
  Impl& w = *impl_;
  if (size > w.size - w.written) {
    return InvalidArgument(
        "writing " + Quoted(w.path) + ": " + std::to_string(w.written + size) +
        " bytes of tensor data, want " + std::to_string(w.size));
  }
  if (!w.Check(w.WriteAll(data, size))) return w.Failed();
  w.written += size;
  return {};
}

Status SafetensorsWriter::Finish() {
  Impl& w = *impl_;
  if (w.written != w.size) {
    return InvalidArgument(
        "writing " + Quoted(w.path) + ": " + std::to_string(w.written) +
        " bytes of tensor data, want " + std::to_string(w.size));
  }
  w.Check(fsync(w.fd) == 0);
  w.Check(close(w.fd) == 0);
  w.fd = -1;
  if (!w.Check(w.error == 0 &&
               std::rename(w.tmp.c_str(), w.path.c_str()) == 0)) {
    return w.Failed();
  }
  w.tmp.clear();
  return {};
}

Status WriteSafetensors(const std::string& path,
                        const std::vector<F32Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  return WriteSafetensors(path, tensors, {}, metadata);
}

Status WriteSafetensors(const std::string& path,
                        const std::vector<F32Tensor>& f32_tensors,
                        const std::vector<I64Tensor>& i64_tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  std::vector<std::pair<const void*, size_t>> data;
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape,
                 const void* values, const char* dtype, size_t element_size) {
    specs.push_back({name, dtype, shape});
    uint64_t count = 1;  // checked against overflow by Create
    for (int64_t dim : shape) count *= static_cast<uint64_t>(dim);
    data.emplace_back(values, count * element_size);
  };
  for (const F32Tensor& t : f32_tensors) {
    add(t.name, t.shape, t.data, "F32", sizeof(float));
  }
  for (const I64Tensor& t : i64_tensors) {
    add(t.name, t.shape, t.data, "I64", sizeof(int64_t));
  }
  ATTN_ASSIGN_OR_RETURN(SafetensorsWriter writer,
                        SafetensorsWriter::Create(path, specs, metadata));
  for (size_t i = 0; i < specs.size(); ++i) {
    if (data[i].second != 0 && data[i].first == nullptr) {
      return InvalidArgument("tensor " + Quoted(specs[i].name) +
                             " has no data");
    }
    ATTN_RETURN_IF_ERROR(writer.Append(data[i].first, data[i].second));
  }
  return writer.Finish();
}

}  // namespace attn
