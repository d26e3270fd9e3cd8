// Shared tokenizer pieces (see text_util.h).
#include "engine/tokenizer/text_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace attn::tokenizer {
namespace {

struct CodePointRange {
  char32_t first, last;
};
#include "engine/tokenizer/unicode_ranges.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], char32_t cp) {
  const auto* it =
      std::upper_bound(ranges, ranges + N, cp,
                       [](char32_t c, const auto& r) { return c < r.first; });
  return it != ranges && cp <= std::prev(it)->last;
}

// How many bytes from s[i] on form the longest start of a valid UTF-8
// sequence that is cut short or broken (at least 1): Unicode's "maximal
// subpart", which from_utf8_lossy replaces by one U+FFFD.
size_t InvalidRun(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t extra;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    extra = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    extra = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    extra = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t n = 1;
  for (; n <= extra && i + n < s.size(); ++n) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    if (b < (n == 1 ? lo : 0x80) || b > (n == 1 ? hi : 0xBF)) break;
  }
  return n;
}

struct FdCloser {
  int fd;
  ~FdCloser() { close(fd); }
};

}  // namespace

char32_t DecodeUtf8(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *len = 1;
  if (b0 < 0x80) return b0;
  size_t extra;
  char32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    extra = 1, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return kInvalidCodePoint;
  }
  if (s.size() - i <= extra) return kInvalidCodePoint;
  for (size_t k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return kInvalidCodePoint;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return kInvalidCodePoint;
  }
  *len = extra + 1;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsLetter(char32_t cp) { return InRanges(kLetterRanges, cp); }
bool IsNumber(char32_t cp) { return InRanges(kNumberRanges, cp); }
bool IsSpace(char32_t cp) { return InRanges(kSpaceRanges, cp); }

std::string Utf8Lossy(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t len;
  for (size_t i = 0; i < text.size(); i += len) {
    if (DecodeUtf8(text, i, &len) != kInvalidCodePoint) {
      out.append(text, i, len);
      continue;
    }
    len = InvalidRun(text, i);
    out += "\xEF\xBF\xBD";
  }
  return out;
}

char32_t ByteChar(int byte) {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> chars{};
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      chars[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return chars;
  }();
  return table[byte];
}

int CharByte(char32_t cp) {
  static const std::array<int16_t, 0x144> table = [] {
    std::array<int16_t, 0x144> bytes;
    bytes.fill(-1);
    for (int b = 0; b < 256; ++b) bytes[ByteChar(b)] = static_cast<int16_t>(b);
    return bytes;
  }();
  return cp < table.size() ? table[cp] : -1;
}

std::string Clip(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  for (size_t len = 0; i < text.size(); i += len) {
    const char32_t cp = DecodeUtf8(text, i, &len);
    if (i + len > max_bytes) break;
    if (cp == kInvalidCodePoint || cp < 0x20 || cp == 0x7F) {
      out += "\\x" + Hex(static_cast<unsigned char>(text[i]));
    } else {
      out.append(text, i, len);
    }
  }
  return i < text.size() ? out + "..." : out;
}

std::string Hex(unsigned char byte) {
  static const char kDigits[] = "0123456789abcdef";
  return {kDigits[byte >> 4], kDigits[byte & 0xF]};
}

std::string Quote(std::string_view text, size_t max_bytes) {
  return "'" + Clip(text, max_bytes) + "'";
}

std::string QuoteText(std::string_view text) {
  constexpr size_t kMaxBytes = 40;
  return Quote(text, kMaxBytes);
}

Status LoadBudget::Check(const std::string& path, const std::string& what,
                         uint64_t need) const {
  if (need <= cap && held <= cap - need) return {};
  return OutOfMemory(Quote(path) + " (" + what + ") needs " +
                     std::to_string(need) + " bytes to load beside " +
                     std::to_string(held) + " held, over the memory limit of " +
                     std::to_string(cap) +
                     " bytes (raise it with --max-memory or "
                     "TokenizerOptions::max_memory_bytes)");
}

Result<std::string> ReadSmallFile(const std::string& path,
                                  const LoadBudget& budget) {
  const std::string what = Quote(path);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return IoError(what + " cannot be opened: " + strerror(errno));
  const FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return IoError(what +
                   " is not a regular file (a directory, FIFO or device)");
  }
  const std::string limit = "the limit of " + std::to_string(kMaxFileBytes);
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    return InvalidArgument(what + " is " + std::to_string(st.st_size) +
                           " bytes, over " + limit);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  ATTN_RETURN_IF_ERROR(
      budget.Check(path, std::to_string(size) + " bytes of text", size));
  std::string text;
  text.reserve(size);  // one block of the size checked, not doublings
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(what + " cannot be read: " + strerror(errno));
    if (n == 0) return text;
    if (text.size() + static_cast<size_t>(n) > size) {
      // Grown since fstat: its new bytes must fit too.
      ATTN_RETURN_IF_ERROR(budget.Check(path, "grown while being read",
                                        text.size() + static_cast<size_t>(n)));
    }
    if (text.size() + static_cast<size_t>(n) > kMaxFileBytes) {
      return InvalidArgument(what + " grew over " + limit +
                             " bytes while being read");
    }
    text.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace attn::tokenizer
