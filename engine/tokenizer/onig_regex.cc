// Oniguruma behind Regex (see onig_regex.h).
#include "engine/tokenizer/onig_regex.h"

#include <oniguruma.h>

#include <mutex>

#include "engine/tokenizer/text_util.h"

namespace attn::tokenizer {
namespace {

const auto* Bytes(std::string_view text) {
  return reinterpret_cast<const OnigUChar*>(text.data());
}

std::string OnigMessage(int code, OnigErrorInfo* info) {
  OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int length = onig_error_code_to_str(message, code, info);
  return std::string(reinterpret_cast<const char*>(message),
                     length > 0 ? static_cast<size_t>(length) : 0);
}

// One region per thread, reused by every search it runs.
struct RegionHolder {
  OnigRegion* region = onig_region_new();
  ~RegionHolder() { onig_region_free(region, 1); }
};

}  // namespace

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  regex_t* compiled = nullptr;
  OnigErrorInfo info;
  const int code = onig_new(&compiled, Bytes(pattern),
                            Bytes(pattern) + pattern.size(), ONIG_OPTION_NONE,
                            ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (code != ONIG_NORMAL) {
    return InvalidArgument("pattern " + QuoteText(pattern) +
                           " does not compile: " + OnigMessage(code, &info));
  }
  return std::unique_ptr<Regex>(new Regex(compiled));
}

Regex::~Regex() { onig_free(static_cast<regex_t*>(compiled_)); }

Status Regex::FindAll(std::string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches) const {
  thread_local RegionHolder holder;
  auto* regex = static_cast<regex_t*>(compiled_);
  const OnigUChar* begin = Bytes(text);
  const OnigUChar* end = begin + text.size();
  size_t from = 0;
  bool matched_before = false;
  size_t last_match_end = 0;
  while (from <= text.size()) {
    const int found = onig_search(regex, begin, end, begin + from, end,
                                  holder.region, ONIG_OPTION_NONE);
    if (found == ONIG_MISMATCH) break;
    if (found < 0) {
      return InvalidArgument("the pre-tokenizer pattern gave up on " +
                             QuoteText(text.substr(from)) + ": " +
                             OnigMessage(found, nullptr));
    }
    const auto start = static_cast<size_t>(holder.region->beg[0]);
    const auto stop = static_cast<size_t>(holder.region->end[0]);
    if (start == stop && matched_before && last_match_end == stop) {
      if (from == text.size()) break;
      size_t len;
      DecodeUtf8(text, from, &len);
      from += len;
      continue;
    }
    matches->emplace_back(start, stop);
    from = stop;
    matched_before = true;
    last_match_end = stop;
  }
  return {};
}

}  // namespace attn::tokenizer
