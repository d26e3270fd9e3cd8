// Pieces the tokenizers share: UTF-8 decoding and Unicode classes, GPT-2's
// byte <-> character table, one-line quoting for messages, and reading a
// tokenizer file under a memory budget.
#ifndef ATTN_ENGINE_TOKENIZER_TEXT_UTIL_H_
#define ATTN_ENGINE_TOKENIZER_TEXT_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attn/status.hpp"

namespace attn::tokenizer {

// The largest tokenizer file read, and one past the largest id.
constexpr uint64_t kMaxFileBytes = uint64_t{64} << 20;
constexpr int64_t kMaxId = int64_t{1} << 24;

// A byte that does not start a valid UTF-8 sequence.
constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

// The code point starting at s[i] and its length in *len; kInvalidCodePoint
// with length 1 where no valid sequence starts (overlong forms, surrogates,
// values above U+10FFFF, cut short), so that every byte belongs to one.
char32_t DecodeUtf8(std::string_view s, size_t i, size_t* len);

// `cp`'s UTF-8 bytes appended to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// Unicode classes as Python's `regex` module and Rust see them: \p{L},
// \p{N}, and White_Space (\s, char::is_whitespace). kInvalidCodePoint is in
// none.
bool IsLetter(char32_t cp);
bool IsNumber(char32_t cp);
bool IsSpace(char32_t cp);

// `text` with each maximal invalid UTF-8 sequence replaced by U+FFFD, as
// Rust's String::from_utf8_lossy does.
std::string Utf8Lossy(std::string_view text);

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other
// 68 for U+0100 onwards in byte order. CharByte is its inverse, -1 for a
// character outside the table.
char32_t ByteChar(int byte);
int CharByte(char32_t cp);

// Two lower-case hex digits.
std::string Hex(unsigned char byte);

// `text` with control bytes and bytes outside valid UTF-8 escaped as \xNN,
// cut after `max_bytes` on a character boundary with "...": one line.
std::string Clip(std::string_view text, size_t max_bytes);

// `text` in single quotes for a one-line message: control bytes and bytes
// outside valid UTF-8 escaped as \xNN, cut after `max_bytes` with "...".
std::string Quote(std::string_view text, size_t max_bytes = SIZE_MAX);

// Quote() cut at 40 bytes, for file contents and text to encode.
std::string QuoteText(std::string_view text);

// The memory a tokenizer loads under: `held` bytes so far (the caller's,
// then the texts and tables read), against `cap`.
struct LoadBudget {
  uint64_t cap = 0, held = 0;

  // `what` of `path` needing `need` more bytes must fit beside `held`:
  // kOutOfMemory otherwise, one line naming the file, the need and the cap.
  Status Check(const std::string& path, const std::string& what,
               uint64_t need) const;
};

// The whole of `path`, a regular file of at most kMaxFileBytes whose bytes
// fit `budget`. Opening never blocks (a FIFO is refused, not waited on) and
// reading stops at the cap (a file growing under us cannot exhaust memory).
Result<std::string> ReadSmallFile(const std::string& path,
                                  const LoadBudget& budget);

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_TEXT_UTIL_H_
