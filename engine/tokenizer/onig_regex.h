// A tokenizer.json pattern compiled by Oniguruma, the regex engine Hugging
// Face's tokenizers runs them on, so that \p{L}, (?i:...) and look-ahead
// mean what they mean there.
#ifndef ATTN_ENGINE_TOKENIZER_ONIG_REGEX_H_
#define ATTN_ENGINE_TOKENIZER_ONIG_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/status.hpp"

namespace attn::tokenizer {

class Regex {
 public:
  // `pattern` in Oniguruma's default (Ruby) syntax on UTF-8; the reason
  // Oniguruma gives when it does not compile.
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The [begin, end) byte ranges of the non-overlapping matches in valid
  // UTF-8 `text`, left to right, appended to `matches`; an empty match
  // right after the previous match is skipped, as the onig crate's
  // find_iter does. Fails when Oniguruma gives up (its retry limit).
  Status FindAll(std::string_view text,
                 std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  explicit Regex(void* compiled) : compiled_(compiled) {}
  void* compiled_;  // regex_t*: oniguruma.h stays out of this header
};

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_ONIG_REGEX_H_
