// HfTokenizer's tables, as hf_config.cc reads them from tokenizer.json and
// hf_tokenizer.cc runs them. Internal to those two files.
#ifndef ATTN_ENGINE_TOKENIZER_HF_IMPL_H_
#define ATTN_ENGINE_TOKENIZER_HF_IMPL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/bpe_merge.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/onig_regex.h"

namespace attn::tokenizer {

// Token text -> id in one open-addressing table over one buffer of keys:
// a lookup by string_view hashes once and allocates nothing.
class TokenIndex {
 public:
  void Reserve(size_t count);
  // False when `key` is there already.
  bool Insert(std::string_view key, int32_t id);
  // The id of `key`, or -1.
  int32_t Find(std::string_view key) const;
  uint64_t memory_bytes() const {
    return keys_.capacity() + slots_.capacity() * sizeof(Slot);
  }

 private:
  struct Slot {
    uint32_t offset, length;
    int32_t id;  // -1: empty
    uint32_t hash;
  };
  void Grow(size_t slots);
  std::string keys_;
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

// Added tokens' texts, matched leftmost-longest as the Aho-Corasick
// automaton of `tokenizers` matches them.
class AddedTokenMatcher {
 public:
  void Add(std::string_view content, int32_t token);  // index into tokens
  bool empty() const { return nodes_.size() <= 1; }
  // The longest content starting at text[at]: its token index and length
  // in *length, or -1.
  int32_t LongestAt(std::string_view text, size_t at, size_t* length) const;
  bool MayStart(unsigned char byte) const { return starts_[byte]; }

 private:
  struct Node {
    int32_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, int32_t> edges_;  // node << 8 | byte -> node
  std::array<bool, 256> starts_{};
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
};

struct NormalizerStep {
  enum class Kind { kNfc, kPrepend, kReplace } kind = Kind::kNfc;
  std::string pattern, content;  // Replace's pattern; Prepend's content
};

enum class SplitBehavior {
  kRemoved,
  kIsolated,
  kMergedWithPrevious,
  kMergedWithNext,
  kContiguous
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // Split {Regex}, ByteLevel's use_regex
  std::string literal;                 // Split {String}; Metaspace's "▁"
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  enum class Prepend { kFirst, kAlways, kNever } prepend = Prepend::kAlways;
  bool split = true;  // Metaspace
};

struct DecoderStep {
  enum class Kind {
    kReplace,
    kByteFallback,
    kFuse,
    kStrip,
    kByteLevel,
    kMetaspace
  } kind = Kind::kFuse;
  std::string pattern, content;  // Replace; Strip's and Metaspace's char
  size_t start = 0, stop = 0;    // Strip
  bool prepend_first = true;     // Metaspace: prepend_scheme is not never
};

struct HfTokenizer::Impl {
  bool byte_level = false;
  int64_t vocab_size = 0;
  // Every id's token as tokenizer.json spells it (added tokens' content
  // for theirs), in one buffer; an id no token has is empty with `known`
  // false.
  std::string token_text;
  struct Span {
    uint32_t offset, length;
    bool known;
  };
  std::vector<Span> tokens;
  // The model: tokens in the pieces' alphabet (byte-level: raw bytes),
  // each byte's or each ASCII character's id (-1: none), byte fallback.
  TokenIndex vocab;
  BpeMerges merges;
  std::array<int32_t, 256> unit_ids{};
  std::array<int32_t, 256> byte_fallback_ids{};  // <0xNN>; -1: none
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  // SentencePiece vocabularies: a "▁" after a character outside this set
  // starts a word no merge can cross (no token holds that character and
  // "▁" in a row), so long pieces are merged word by word, and cached.
  bool split_words = false;
  std::vector<std::string> glued_before_space;
  int32_t unk_id = -1;

  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher, normalized_matcher;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
  bool has_decoder = false;
  // The post-processor's single-sequence template: ids, -1 for the text.
  std::vector<int32_t> template_ids;
  bool has_template = false;
  SpecialTokens special;
  uint64_t instance = 0;  // tells the per-thread piece caches apart

  std::string_view Token(int32_t id) const {
    return {token_text.data() + tokens[id].offset, tokens[id].length};
  }
};

// `text` through the normalizers (hf_tokenizer.cc), appended to `out`.
void Normalize(const HfTokenizer::Impl& impl, std::string_view text,
               std::string* out);

// Fills `impl` from `dir`'s files (hf_config.cc).
Status ReadHfTokenizer(const std::string& dir, uint64_t max_memory,
                       uint64_t held_bytes, HfTokenizer::Impl* impl);

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_HF_IMPL_H_
