// libFuzzer target: attn::Tokenizer::Load on arbitrary tokenizer.json, or
// vocab.json and merges.txt (fuzz_tokenizer.h's format), then, when it
// loads, Encode (with and without special tokens) of a few fixed texts and
// of the input's own bytes, Decode of every id they give and DecodeText of
// them all: each refusal is one non-empty line, each id is below
// vocab_size and decodes.
#include "tests/fuzz/fuzz_tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "attn/tokenizer.hpp"
#include "tests/fuzz/fuzz_util.h"

namespace {

void CheckRefusal(const attn::Status& status) {
  if (status.message().empty() ||
      status.message().find('\n') != std::string::npos) {
    std::abort();
  }
}

void EncodeAndDecode(const attn::Tokenizer& tokenizer, std::string_view text) {
  for (const bool special : {false, true}) {
    const auto ids = tokenizer.Encode(text, special);
    if (!ids.ok()) return CheckRefusal(ids.status());
    for (const int64_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
      const auto bytes = tokenizer.Decode(id);
      if (!bytes.ok()) CheckRefusal(bytes.status());
    }
    const auto decoded = tokenizer.DecodeText(*ids);
    if (!decoded.ok()) CheckRefusal(decoded.status());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = attn::fuzz::ScratchDir();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!attn::fuzz::WriteTokenizerFiles(bytes, dir)) std::abort();
  attn::TokenizerOptions options;
  options.max_memory_bytes = 256 << 20;
  const auto tokenizer = attn::Tokenizer::Load(dir, options);
  if (!tokenizer.ok()) {
    CheckRefusal(tokenizer.status());
    return 0;
  }
  for (const std::string_view text :
       {std::string_view("Hello world, it's 2026!"),
        std::string_view(" \t\n  spaces\r\n"),
        std::string_view(
            "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xff\xfe")}) {
    EncodeAndDecode(**tokenizer, text);
  }
  EncodeAndDecode(**tokenizer, bytes);
  (void)(*tokenizer)->Decode(-1);
  (void)(*tokenizer)->Decode((*tokenizer)->vocab_size());
  return 0;
}
