// GPT-2's byte-level BPE (see gpt2_bpe.h), after OpenAI's encoder.py. The
// pre-tokenization regex is a hand-written scanner over code points: this
// one fixed pattern needs no regex engine (tokenizer.json's patterns run on
// Oniguruma, in hf_tokenizer.cc).
#include "engine/tokenizer/gpt2_bpe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "attn/attn.hpp"
#include "engine/tokenizer/bpe_merge.h"
#include "engine/tokenizer/text_util.h"
#include "nlohmann/json.hpp"

namespace attn::tokenizer {
namespace {

// What loading holds, measured: a token costs about 145 bytes in the two
// tables (id -> token, token -> id) and their buckets, plus two copies of
// a token longer than 15 bytes (its length and about 24); a merge about 64
// in its table. Checked before each file is parsed, from its text: every
// token is followed by one ':' (so the colons bound the tokens), its
// bytes by the text's, and a merge takes a line.
constexpr uint64_t kBytesPerToken = 192 + 2 * 24;
constexpr uint64_t kBytesPerMerge = 64;
constexpr char32_t kInvalid = kInvalidCodePoint;

// ---------------------------------------------------------------------------
// Code points and the pattern's classes.

enum class Class { kLetter, kNumber, kSpace, kOther };

Class Classify(char32_t cp) {
  if (IsLetter(cp)) return Class::kLetter;
  if (IsNumber(cp)) return Class::kNumber;
  if (IsSpace(cp)) return Class::kSpace;
  return Class::kOther;  // also kInvalid: above every range
}

struct CodePoint {
  char32_t value;
  Class cls;
  size_t offset;  // of its first byte in the text
};

std::vector<CodePoint> CodePoints(std::string_view text) {
  std::vector<CodePoint> cps;
  size_t len;
  for (size_t i = 0; i < text.size(); i += len) {
    const char32_t cp = DecodeUtf8(text, i, &len);
    cps.push_back({cp, Classify(cp), i});
  }
  return cps;
}

// ---------------------------------------------------------------------------
// The pattern's alternatives: each returns how many code points it matches
// at cps[i], 0 for none.

// 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, ASCII apostrophe only).
size_t MatchContraction(const std::vector<CodePoint>& cps, size_t i) {
  if (cps[i].value != '\'' || i + 1 == cps.size()) return 0;
  const char32_t a = cps[i + 1].value;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 == cps.size()) return 0;
  const char32_t b = cps[i + 2].value;
  const bool two = (a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
                   (a == 'l' && b == 'l');
  return two ? 3 : 0;
}

// " ?X+" for X one of \p{L}, \p{N}, [^\s\p{L}\p{N}]. The space is U+0020
// only; when X does not follow it the regex backs off to X+ at the space,
// which fails, as a space is in none of these classes.
size_t MatchRun(const std::vector<CodePoint>& cps, size_t i, Class cls) {
  size_t j = i;
  if (cps[j].value == ' ' && j + 1 < cps.size() && cps[j + 1].cls == cls) ++j;
  if (cps[j].cls != cls) return 0;
  while (j < cps.size() && cps[j].cls == cls) ++j;
  return j - i;
}

// \s+(?!\S)|\s+: a run of spaces, less its last one when a non-space
// follows (that one goes with the next piece, e.g. " world"), unless the
// run is a single space, which the second alternative then takes whole.
size_t MatchSpaces(const std::vector<CodePoint>& cps, size_t i) {
  if (cps[i].cls != Class::kSpace) return 0;
  size_t j = i;
  while (j < cps.size() && cps[j].cls == Class::kSpace) ++j;
  if (j == cps.size() || j - i == 1) return j - i;
  return j - i - 1;
}

// The alternatives in the regex's order, the first that matches winning.
// Every code point is in one of the four classes, so some alternative
// matches at least one.
size_t MatchPiece(const std::vector<CodePoint>& cps, size_t i) {
  for (const size_t n :
       {MatchContraction(cps, i), MatchRun(cps, i, Class::kLetter),
        MatchRun(cps, i, Class::kNumber), MatchRun(cps, i, Class::kOther)}) {
    if (n > 0) return n;
  }
  return MatchSpaces(cps, i);
}

std::string EncodeUtf8(char32_t cp) {
  std::string out;
  AppendUtf8(cp, &out);
  return out;
}

struct Vocab {
  std::unordered_map<std::string, int32_t> ids;
  std::unordered_map<int32_t, std::string> tokens;
  int64_t size = 0;  // one past the largest id
};

// Builds a Vocab straight from the parser's events: a flat object of token
// -> id and nothing else, so no DOM, no recursion, and a token named twice
// is caught (nlohmann's DOM would keep the last).
class VocabReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  Vocab vocab;
  std::string problem;

  bool null() override { return NotAnId(); }
  bool boolean(bool) override { return NotAnId(); }
  bool number_integer(number_integer_t v) override { return Id(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return Id(v < static_cast<uint64_t>(kMaxId) ? static_cast<int64_t>(v)
                                                : kMaxId);
  }
  bool number_float(number_float_t, const string_t&) override {
    return NotAnId();
  }
  bool string(string_t&) override { return NotAnId(); }
  bool binary(binary_t&) override { return NotAnId(); }
  bool start_object(std::size_t) override {
    if (open_) return Fail("nests an object; want token -> id");
    open_ = true;
    return true;
  }
  bool key(string_t& token) override;
  bool end_object() override { return true; }
  bool start_array(std::size_t) override {
    return Fail("holds an array; want an object of token -> id");
  }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& e) override;

 private:
  bool Fail(std::string what) {
    if (problem.empty()) problem = std::move(what);
    return false;
  }
  bool NotAnId();
  bool Id(int64_t id);

  bool open_ = false;
  std::string key_;
};

bool VocabReader::key(string_t& token) {
  if (token.empty()) return Fail("has an empty token");
  if (vocab.ids.count(token))
    return Fail("names token " + QuoteText(token) + " twice");
  key_ = token;
  return true;
}

bool VocabReader::parse_error(std::size_t, const std::string&,
                              const nlohmann::detail::exception& e) {
  // Keep nlohmann's reason, not its "[json.exception.parse_error.101] ".
  const std::string message = e.what();
  const size_t tag_end = message.find("] ");
  // Its reason quotes the whole token last read, megabytes for a string
  // left open: cut to a line.
  const std::string reason =
      tag_end == std::string::npos ? message : message.substr(tag_end + 2);
  return Fail("is not valid JSON: " + Clip(reason, 160));
}

bool VocabReader::NotAnId() {
  if (!open_) return Fail("is not a JSON object of token -> id");
  return Fail("gives token " + QuoteText(key_) + " a value that is not an id");
}

bool VocabReader::Id(int64_t id) {
  if (!open_) return NotAnId();
  if (id < 0 || id >= kMaxId) {
    return Fail("gives token " + QuoteText(key_) + " id " +
                (id < 0 ? std::to_string(id) : "2^24 or more") +
                ", want 0 to 2^24 - 1");
  }
  const auto [slot, fresh] = vocab.tokens.emplace(id, key_);
  if (!fresh) {
    return Fail("gives id " + std::to_string(id) + " to both " +
                QuoteText(slot->second) + " and " + QuoteText(key_));
  }
  vocab.ids.emplace(key_, static_cast<int32_t>(id));
  vocab.size = std::max(vocab.size, id + 1);
  return true;
}

Result<Vocab> ParseVocab(const std::string& text, const std::string& path) {
  VocabReader reader;
  if (!nlohmann::json::sax_parse(text, &reader) || !reader.problem.empty()) {
    return InvalidArgument(
        Quote(path) + " " +
        (reader.problem.empty() ? "is not valid JSON" : reader.problem));
  }
  if (reader.vocab.ids.empty()) {
    return InvalidArgument(Quote(path) + " has no tokens");
  }
  return std::move(reader.vocab);
}

}  // namespace

// ---------------------------------------------------------------------------
// Gpt2Tokenizer.

namespace {

struct MergeLine {
  int32_t first, second, merged;
};

// The ids of a merge line's two tokens and of their join.
Result<MergeLine> ParseMergeLine(
    std::string_view line,
    const std::unordered_map<std::string, int32_t>& ids) {
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos ||
      space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return InvalidArgument("is " + QuoteText(line) +
                           ", want two tokens separated by one space");
  }
  const std::string tokens[] = {
      std::string(line.substr(0, space)), std::string(line.substr(space + 1)),
      std::string(line.substr(0, space)) + std::string(line.substr(space + 1))};
  int32_t found[3];
  for (int k = 0; k < 3; ++k) {
    const auto it = ids.find(tokens[k]);
    if (it == ids.end()) {
      return InvalidArgument(std::string(k < 2 ? "names " : "makes ") +
                             QuoteText(tokens[k]) +
                             ", a token the vocabulary lacks");
    }
    found[k] = it->second;
  }
  return MergeLine{found[0], found[1], found[2]};
}

struct Layout {
  const char* vocab;
  const char* merges;
};

// Which layout `dir` holds, going by its vocabulary file.
Result<Layout> FindLayout(const std::string& dir) {
  const std::string want =
      "want vocab.json + merges.txt (Hugging Face) or encoder.json + "
      "vocab.bpe (OpenAI)";
  const std::string what = "tokenizer directory " + Quote(dir);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return IoError(what + " cannot be read: " + strerror(errno) + "; " + want);
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument(what + " is not a directory; " + want);
  }
  for (const Layout layout : {Layout{"vocab.json", "merges.txt"},
                              Layout{"encoder.json", "vocab.bpe"}}) {
    // lstat: a dangling link still picks its layout, and then a clear error.
    if (lstat((dir + "/" + layout.vocab).c_str(), &st) == 0) return layout;
  }
  return InvalidArgument(what + " holds neither vocabulary file; " + want);
}

}  // namespace

std::vector<std::string_view> SplitGpt2Pieces(std::string_view text) {
  const std::vector<CodePoint> cps = CodePoints(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t next = i + MatchPiece(cps, i);
    const size_t end = next < cps.size() ? cps[next].offset : text.size();
    pieces.push_back(text.substr(cps[i].offset, end - cps[i].offset));
    i = next;
  }
  return pieces;
}

Gpt2Tokenizer::Gpt2Tokenizer(
    const std::unordered_map<std::string, int32_t>& ids, Tokens tokens,
    int64_t vocab_size, Merges merges)
    : tokens_(std::move(tokens)),
      vocab_size_(vocab_size),
      merges_(std::move(merges)) {
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(EncodeUtf8(ByteChar(b)));
    byte_ids_[b] = it == ids.end() ? -1 : it->second;
  }
}

Result<Gpt2Tokenizer> Gpt2Tokenizer::Load(const std::string& dir,
                                          uint64_t max_memory,
                                          uint64_t held_bytes) {
  ATTN_ASSIGN_OR_RETURN(const Layout layout, FindLayout(dir));
  const std::string vocab_path = dir + "/" + layout.vocab;
  const std::string merges_path = dir + "/" + layout.merges;
  LoadBudget budget{max_memory ? max_memory : DefaultMaxMemoryBytes(),
                    held_bytes};
  // Each file's text, then its tables, charged before they are made; what
  // one holds stays held while the next is read.
  ATTN_ASSIGN_OR_RETURN(const std::string vocab_text,
                        ReadSmallFile(vocab_path, budget));
  budget.held += vocab_text.size();
  const auto tokens = static_cast<uint64_t>(
      std::count(vocab_text.begin(), vocab_text.end(), ':'));
  const uint64_t tables = 2 * vocab_text.size() + tokens * kBytesPerToken;
  ATTN_RETURN_IF_ERROR(budget.Check(
      vocab_path, "up to " + std::to_string(tokens) + " tokens", tables));
  budget.held += tables;
  ATTN_ASSIGN_OR_RETURN(Vocab vocab, ParseVocab(vocab_text, vocab_path));
  ATTN_ASSIGN_OR_RETURN(const std::string merges_text,
                        ReadSmallFile(merges_path, budget));
  budget.held += merges_text.size();
  const auto lines = static_cast<uint64_t>(
      std::count(merges_text.begin(), merges_text.end(), '\n') + 1);
  ATTN_RETURN_IF_ERROR(
      budget.Check(merges_path, "up to " + std::to_string(lines) + " merges",
                   lines * kBytesPerMerge));
  ATTN_ASSIGN_OR_RETURN(Merges merges,
                        ParseMerges(merges_text, merges_path, vocab.ids));
  return Gpt2Tokenizer(vocab.ids, std::move(vocab.tokens), vocab.size,
                       std::move(merges));
}

uint64_t Gpt2Tokenizer::memory_bytes() const {
  // Nodes as kBytesPerToken and kBytesPerMerge measure them, a long
  // token's own copy, and the buckets.
  uint64_t bytes =
      tokens_.bucket_count() * sizeof(void*) + merges_.memory_bytes();
  for (const auto& [id, token] : tokens_) {
    bytes += kBytesPerToken / 2 + (token.size() > 15 ? token.capacity() : 0);
  }
  return bytes;
}

// Ranks count merge lines from 0. Blank lines name no pair and are skipped,
// and so are "#version" lines (as Hugging Face's tokenizers do, on any
// line); "\r\n" line ends are taken too.
Result<Gpt2Tokenizer::Merges> Gpt2Tokenizer::ParseMerges(
    std::string_view text, const std::string& path,
    const std::unordered_map<std::string, int32_t>& ids) {
  Merges merges;
  int32_t rank = 0;
  int64_t line_number = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // Lines ended by "\r" alone would make the file one "#version" line
    // and no merges, silently; no GPT-2 token holds a raw "\r".
    if (line.find('\r') != std::string_view::npos) {
      return InvalidArgument(Quote(path) + " line " +
                             std::to_string(line_number) +
                             " holds a carriage return, want lines ending in "
                             "\"\\n\" or \"\\r\\n\"");
    }
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const Result<MergeLine> merge = ParseMergeLine(line, ids);
    if (!merge.ok()) {
      return InvalidArgument(Quote(path) + " line " +
                             std::to_string(line_number) + " " +
                             merge.status().message());
    }
    // A pair listed twice keeps the later rank, as encoder.py's dict does.
    merges.Set(merge->first, merge->second, rank++, merge->merged);
  }
  return merges;
}

Result<std::vector<int64_t>> Gpt2Tokenizer::Encode(
    std::string_view text) const {
  std::vector<int64_t> ids;
  for (const std::string_view piece : SplitGpt2Pieces(text)) {
    ATTN_ASSIGN_OR_RETURN(const std::vector<int64_t> piece_ids,
                          EncodePiece(piece));
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

// The piece's bytes as GPT-2's characters, joined (JoinPairs).
Result<std::vector<int64_t>> Gpt2Tokenizer::EncodePiece(
    std::string_view piece) const {
  // Merges name known tokens only, so a byte whose character the
  // vocabulary lacks could never be joined into one it has.
  std::vector<int32_t> symbols;
  for (const char c : piece) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte_ids_[byte] < 0) {
      return InvalidArgument("cannot encode " + QuoteText(piece) +
                             ": the vocabulary has no token for byte 0x" +
                             Hex(byte));
    }
    symbols.push_back(byte_ids_[byte]);
  }
  BpeScratch scratch;
  JoinPairs(merges_, &symbols, &scratch);
  return std::vector<int64_t>(symbols.begin(), symbols.end());
}

Result<std::string> Gpt2Tokenizer::Decode(int64_t id) const {
  const auto it = id < 0 || id >= kMaxId
                      ? tokens_.end()
                      : tokens_.find(static_cast<int32_t>(id));
  if (it == tokens_.end()) {
    return InvalidArgument("no token has id " + std::to_string(id) + " (the " +
                           std::to_string(tokens_.size()) +
                           " tokens' ids are below " +
                           std::to_string(vocab_size()) + ")");
  }
  const std::string& token = it->second;
  std::string bytes;
  size_t len;
  for (size_t i = 0; i < token.size(); i += len) {
    const int byte = CharByte(DecodeUtf8(token, i, &len));
    if (byte < 0) {
      return InvalidArgument("token " + std::to_string(id) + " " +
                             QuoteText(token) +
                             " holds a character outside GPT-2's byte table");
    }
    bytes += static_cast<char>(byte);
  }
  return bytes;
}

}  // namespace attn::tokenizer