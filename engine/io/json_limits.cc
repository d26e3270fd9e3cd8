// Bounded reading and checked parsing of untrusted JSON (see json_limits.h).
#include "engine/io/json_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace attn {
namespace {

using nlohmann::json;

// Closes a descriptor on every return path.
struct FdCloser {
  int fd;
  ~FdCloser() { close(fd); }
};

}  // namespace

std::string Quoted(const std::string& text, size_t max_chars) {
  const bool cut = text.size() > max_chars;
  std::string out = "'";
  for (const char c : cut ? text.substr(0, max_chars) : text) {
    if (static_cast<unsigned char>(c) < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      out += std::string("\\x") + kHex[(c >> 4) & 0xf] + kHex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out + (cut ? "...'" : "'");
}

Result<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes,
                                    const std::string& what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; S_ISREG below
  // refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return IoError(what + " cannot be opened: " + std::strerror(errno));
  }
  const FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return IoError(what +
                   " is not a regular file (a directory, FIFO or device), "
                   "want a JSON file");
  }
  const std::string limit =
      "over the limit of " + std::to_string(max_bytes) + " bytes";
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return InvalidArgument(what + " is " + std::to_string(st.st_size) +
                           " bytes, " + limit);
  }
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return IoError(what + " cannot be read: " + std::strerror(errno));
    }
    if (n == 0) return text;
    // The file may have grown since fstat.
    if (text.size() + static_cast<size_t>(n) > max_bytes) {
      return InvalidArgument(what + " grew " + limit + " while being read");
    }
    text.append(chunk, static_cast<size_t>(n));
  }
}

bool JsonChecker::key(string_t& name) {
  if (!open_.back().keys.insert(name).second) {
    return Fail("names key " + Quoted(name) + " twice in one object");
  }
  return true;
}

bool JsonChecker::parse_error(std::size_t, const std::string&,
                              const nlohmann::detail::exception& e) {
  // Keep nlohmann's reason, not its "[json.exception.parse_error.101] ".
  const std::string message = e.what();
  const size_t tag_end = message.find("] ");
  return Fail("is not valid JSON: " + (tag_end == std::string::npos
                                           ? message
                                           : message.substr(tag_end + 2)));
}

bool JsonChecker::Value() {
  if (!open_.empty()) ++open_.back().items;
  return true;
}

bool JsonChecker::Fail(std::string what) {
  if (problem_.empty()) problem_ = std::move(what);
  return false;
}

bool JsonChecker::Enter(bool is_object) {
  if (!Value()) return false;
  if (open_.size() >= max_depth_) {
    return Fail("nests JSON deeper than " + std::to_string(max_depth_) +
                " levels, the limit");
  }
  open_.push_back({is_object, 0, {}});
  return true;
}

bool JsonChecker::Leave() {
  open_.pop_back();
  return true;
}

Result<json> ParseCheckedJson(const std::string& text, size_t max_depth,
                              const std::string& what) {
  JsonChecker checker(max_depth);
  if (!json::sax_parse(text, &checker) || !checker.problem().empty()) {
    return InvalidArgument(
        what + " " +
        (checker.problem().empty() ? "is not valid JSON" : checker.problem()));
  }
  try {
    return json::parse(text);
  } catch (const std::bad_alloc&) {
    return OutOfMemory(what + " needs more memory than there is");
  }
}

}  // namespace attn
