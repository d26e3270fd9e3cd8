// The tokenizer fuzzer's input format, shared with fuzz_regression_test:
// the bytes up to the first NUL are vocab.json, the rest merges.txt (no NUL:
// all vocab.json, merges.txt empty). Writes both into `dir`.
#ifndef ATTN_TESTS_FUZZ_FUZZ_TOKENIZER_H_
#define ATTN_TESTS_FUZZ_FUZZ_TOKENIZER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace attn::fuzz {

inline bool WriteTokenizerFiles(std::string_view bytes,
                                const std::string& dir) {
  const size_t nul = bytes.find('\0');
  const std::string_view vocab = bytes.substr(0, nul);
  const std::string_view merges = nul == std::string_view::npos
                                      ? std::string_view()
                                      : bytes.substr(nul + 1);
  for (const auto& [name, text] :
       {std::pair{"/vocab.json", vocab}, std::pair{"/merges.txt", merges}}) {
    std::FILE* f = std::fopen((dir + name).c_str(), "wb");
    if (!f) return false;
    // An empty view may hold a null pointer, which fwrite must not get.
    const bool written =
        text.empty() ||
        std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !written) return false;
  }
  return true;
}

}  // namespace attn::fuzz

#endif  // ATTN_TESTS_FUZZ_FUZZ_TOKENIZER_H_
