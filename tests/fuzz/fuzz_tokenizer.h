// The tokenizer fuzzer's input format, shared with fuzz_regression_test:
// bytes starting with kTokenizerJsonTag are, after it, tokenizer.json;
// otherwise the bytes up to the first NUL are vocab.json, the rest
// merges.txt (no NUL: all vocab.json, merges.txt empty). Writes the files
// into `dir`, removing the other layout's.
#ifndef ATTN_TESTS_FUZZ_FUZZ_TOKENIZER_H_
#define ATTN_TESTS_FUZZ_FUZZ_TOKENIZER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace attn::fuzz {

constexpr std::string_view kTokenizerJsonTag("TJ\0", 3);

inline bool WriteFile(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  // An empty view may hold a null pointer, which fwrite must not get.
  const bool written = text.empty() || std::fwrite(text.data(), 1, text.size(),
                                                   f) == text.size();
  return std::fclose(f) == 0 && written;
}

inline bool WriteTokenizerFiles(std::string_view bytes,
                                const std::string& dir) {
  if (bytes.substr(0, kTokenizerJsonTag.size()) == kTokenizerJsonTag) {
    std::remove((dir + "/vocab.json").c_str());
    std::remove((dir + "/merges.txt").c_str());
    return WriteFile(dir + "/tokenizer.json",
                     bytes.substr(kTokenizerJsonTag.size()));
  }
  std::remove((dir + "/tokenizer.json").c_str());
  const size_t nul = bytes.find('\0');
  const std::string_view vocab = bytes.substr(0, nul);
  const std::string_view merges = nul == std::string_view::npos
                                      ? std::string_view()
                                      : bytes.substr(nul + 1);
  return WriteFile(dir + "/vocab.json", vocab) &&
         WriteFile(dir + "/merges.txt", merges);
}

}  // namespace attn::fuzz

#endif  // ATTN_TESTS_FUZZ_FUZZ_TOKENIZER_H_
