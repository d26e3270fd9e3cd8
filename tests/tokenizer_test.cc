// GPT-2's BPE tokenizer (engine/tokenizer/gpt2_bpe.h): pre-tokenization against
// the splits Python's `regex` module gives for GPT-2's pattern, merge order,
// byte round trips, both file layouts, and each way the files can be bad.
// The vocabularies are small ones the tests write; no real one is needed.
#include "attn/tokenizer.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/tokenizer/gpt2_bpe.h"
#include "nlohmann/json.hpp"
#include "tests/temp_dir.h"

namespace attn::tokenizer {
namespace {

using test::TempDir;

// ---------------------------------------------------------------------------
// Pre-tokenization.

struct SplitCase {
  std::string text;
  std::vector<std::string> pieces;
};

// Each expectation is regex.findall(PAT, text) from Python's `regex` module
// with GPT-2's pattern (the one in gpt2_bpe.h).
const SplitCase kRegexSplits[] = {
    {"Hello world", {"Hello", " world"}},
    {"I'm", {"I", "'m"}},
    {"they'll've", {"they", "'ll", "'ve"}},
    // A run of spaces leaves its last to the word after it.
    {"  two spaces", {" ", " two", " spaces"}},
    // One space before a non-space is no \s+(?!\S) match: \s+ takes it.
    {"tabs\t\tand\nnewlines\n\n",
     {"tabs", "\t", "\t", "and", "\n", "newlines", "\n\n"}},
    {"abc123def", {"abc", "123", "def"}},
    {"héllo wörld", {"héllo", " wörld"}},
    {"你好世界", {"你好世界"}},
    {"hi 👋🏽 there", {"hi", " 👋🏽", " there"}},
    {"wait!!!? ok", {"wait", "!!!?", " ok"}},
    {"end   ", {"end", "   "}},
    // Contractions are case-sensitive and match even before more letters.
    {"It's 'sa 'S", {"It", "'s", " '", "sa", " '", "S"}},
    {" \t x", {" \t", " x"}},
    // Only U+0020 joins the word after it; other spaces stand alone.
    {"a\u00a0b\u3000 c", {"a", "\u00a0", "b", "\u3000", " c"}},
    {"x\u2028\u2028y", {"x", "\u2028", "\u2028", "y"}},
    {"1,234.5 %", {"1", ",", "234", ".", "5", " %"}},
    {" ", {" "}},
    // Arabic-Indic digits (Nd), a Roman numeral (Nl).
    {"١٢ Ⅷx", {"١٢", " Ⅷ", "x"}},
    // U+001C is isspace() in Python but not White_Space, so not \s.
    {"a\034b", {"a", "\034", "b"}},
    // A combining mark (Mn) is neither letter nor number.
    {"e\u0301", {"e", "\u0301"}},
    {"", {}},
};

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> pieces;
  for (const std::string_view piece : SplitGpt2Pieces(text)) {
    pieces.emplace_back(piece);
  }
  return pieces;
}

TEST(Gpt2SplitTest, MatchesPythonRegexOnGpt2Pattern) {
  for (const SplitCase& c : kRegexSplits) {
    EXPECT_EQ(Split(c.text), c.pieces) << "text: " << c.text;
  }
}

// Python's str holds no invalid UTF-8, so these are by hand: each bad byte
// is one code point of the punctuation class.
TEST(Gpt2SplitTest, InvalidUtf8BytesArePunctuation) {
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(Split("a\377\376b c"), (Pieces{"a", "\377\376", "b", " c"}));
  // Overlong '/', then a surrogate: every byte its own code point.
  EXPECT_EQ(Split("x \xc0\xafy"), (Pieces{"x", " \xc0\xaf", "y"}));
  EXPECT_EQ(Split("\xed\xa0\x80!"), (Pieces{"\xed\xa0\x80!"}));
  // A sequence cut short by the end, or by an ASCII letter.
  EXPECT_EQ(Split("ok \xe4\xbd"), (Pieces{"ok", " \xe4\xbd"}));
  EXPECT_EQ(Split("\344\275a"), (Pieces{"\344\275", "a"}));
}

// ---------------------------------------------------------------------------
// Small vocabularies, written the way either layout has them.

// GPT-2's bytes_to_unicode, written out again from encoder.py rather than
// taken from the code under test.
std::string ByteChar(int b) {
  const bool printable =
      (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    cp = 0x100;
    for (int k = 0; k < b; ++k) {
      const bool p =
          (k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE;
      cp += p ? 0 : 1;
    }
  }
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)),
          static_cast<char>(0x80 | (cp & 0x3F))};
}

// ids 0-255: the bytes; then the merges' tokens from 256; "<|endoftext|>"
// at 300, leaving ids 263-299 without a token.
const std::vector<std::string> kMerges = {
    "b c",    // 256 "bc"
    "a b",    // 257 "ab"
    "a a",    // 258 "aa"
    "Ġ w",    // 259 " w"
    "Ġw o",   // 260 " wo"
    "aa aa",  // 261 "aaaa"
    "Ã ©",    // 262 "é" (0xC3 0xA9)
};
constexpr int64_t kEndOfText = 300;

nlohmann::json VocabJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  int64_t id = 256;
  for (const std::string& merge : kMerges) {
    const size_t space = merge.find(' ');
    vocab[merge.substr(0, space) + merge.substr(space + 1)] = id++;
  }
  vocab["<|endoftext|>"] = kEndOfText;
  return vocab;
}

std::string MergesText(const std::vector<std::string>& merges) {
  std::string text = "#version: 0.2\n";
  for (const std::string& merge : merges) text += merge + "\n";
  return text;
}

// Writes the test vocabulary as Hugging Face or OpenAI name it.
void WriteTokenizer(const TempDir& dir, bool openai,
                    const nlohmann::json& vocab = VocabJson(),
                    const std::vector<std::string>& merges = kMerges) {
  dir.Write(openai ? "encoder.json" : "vocab.json", vocab.dump());
  dir.Write(openai ? "vocab.bpe" : "merges.txt", MergesText(merges));
}

Gpt2Tokenizer LoadOrDie(const TempDir& dir) {
  Result<Gpt2Tokenizer> tokenizer = Gpt2Tokenizer::Load(dir.path());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return std::move(tokenizer).value();
}

std::vector<int64_t> EncodeOrDie(const Gpt2Tokenizer& tokenizer,
                                 const std::string& text) {
  Result<std::vector<int64_t>> ids = tokenizer.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  return ids.ok() ? *ids : std::vector<int64_t>{};
}

using Ids = std::vector<int64_t>;

// ---------------------------------------------------------------------------
// Encoding and decoding.

TEST(Gpt2TokenizerTest, MergesLowestRankFirstNotLeftToRight) {
  TempDir dir;
  WriteTokenizer(dir, false);
  const Gpt2Tokenizer tokenizer = LoadOrDie(dir);
  // "b c" outranks "a b": a|bc, where left to right would give ab|c.
  EXPECT_EQ(EncodeOrDie(tokenizer, "abc"), (Ids{'a', 256}));
  EXPECT_EQ(EncodeOrDie(tokenizer, "abab"), (Ids{257, 257}));
  // Every "a a" joins, left to right without overlap, before "aa aa".
  EXPECT_EQ(EncodeOrDie(tokenizer, "aaaaa"), (Ids{261, 'a'}));
  EXPECT_EQ(EncodeOrDie(tokenizer, "aaa"), (Ids{258, 'a'}));
  // A space is Ġ inside the piece it starts; merges never cross pieces.
  EXPECT_EQ(EncodeOrDie(tokenizer, "Hi wow"), (Ids{'H', 'i', 260, 'w'}));
  EXPECT_EQ(EncodeOrDie(tokenizer, "wow"), (Ids{'w', 'o', 'w'}));
  EXPECT_EQ(EncodeOrDie(tokenizer, "héllo"), (Ids{'h', 262, 'l', 'l', 'o'}));
  EXPECT_EQ(EncodeOrDie(tokenizer, ""), Ids{});
}

// The public Tokenizer is this tokenizer, loaded once and shared: threads
// encoding at once get its ids.
TEST(Gpt2TokenizerTest, PublicTokenizerServesThreadsWithTheSameIds) {
  TempDir dir;
  WriteTokenizer(dir, false);
  const Gpt2Tokenizer internal = LoadOrDie(dir);
  Result<std::shared_ptr<const Tokenizer>> shared = Tokenizer::Load(dir.path());
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  const Tokenizer& tokenizer = **shared;
  EXPECT_EQ(tokenizer.vocab_size(), internal.vocab_size());
  EXPECT_EQ(tokenizer.memory_bytes(), internal.memory_bytes());
  const std::string texts[] = {"abc abab", "Hi wow", "h\xc3\xa9llo aaaaa"};
  std::vector<Ids> got(3);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { got[i] = *tokenizer.Encode(texts[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i], EncodeOrDie(internal, texts[i])) << texts[i];
  }
  EXPECT_EQ(*tokenizer.Decode(259), " w");
  EXPECT_FALSE(tokenizer.Decode(-1).ok());
}

TEST(Gpt2TokenizerTest, DecodeReturnsEachTokensBytes) {
  TempDir dir;
  WriteTokenizer(dir, false);
  const Gpt2Tokenizer tokenizer = LoadOrDie(dir);
  EXPECT_EQ(tokenizer.vocab_size(), kEndOfText + 1);
  EXPECT_EQ(*tokenizer.Decode(259), " w");
  EXPECT_EQ(*tokenizer.Decode(262), "é");
  EXPECT_EQ(*tokenizer.Decode(0), std::string(1, '\0'));
  EXPECT_EQ(*tokenizer.Decode(0xA0), "\xa0");
  EXPECT_EQ(*tokenizer.Decode(kEndOfText), "<|endoftext|>");
}

TEST(Gpt2TokenizerTest, RoundTripsAnyBytes) {
  TempDir dir;
  WriteTokenizer(dir, false);
  const Gpt2Tokenizer tokenizer = LoadOrDie(dir);
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  for (const std::string& text :
       {std::string("Hello wow, it's aaaaab!"),
        std::string("héllo wörld 你好世界 👋🏽\u2028\u3000 end  "),
        std::string("tabs\t\tand\nnewlines\n\n"),
        std::string("bad \xff\xfe utf-8 \xc3"), all_bytes}) {
    std::string decoded;
    for (const int64_t id : EncodeOrDie(tokenizer, text)) {
      decoded += *tokenizer.Decode(id);
    }
    EXPECT_EQ(decoded, text);
  }
}

TEST(Gpt2TokenizerTest, BothFileLayoutsGiveTheSameIds) {
  TempDir hugging_face, openai;
  WriteTokenizer(hugging_face, false);
  WriteTokenizer(openai, true);
  // Only OpenAI's names there: nothing else to load by mistake.
  EXPECT_EQ(openai.Files().size(), 2u);
  const Gpt2Tokenizer a = LoadOrDie(hugging_face), b = LoadOrDie(openai);
  for (const std::string text : {"abc aaaaa wow", "héllo I'm 123"}) {
    EXPECT_EQ(EncodeOrDie(a, text), EncodeOrDie(b, text));
  }
  EXPECT_EQ(EncodeOrDie(b, " wow abc"), (Ids{260, 'w', ' ', 'a', 256}));
}

TEST(Gpt2TokenizerTest, RepeatedPairTakesItsLaterRank) {
  TempDir dir;
  // "a b" again after "b c": now it outranks nothing, as in encoder.py.
  std::vector<std::string> merges = {"a b", "b c", "a b"};
  nlohmann::json vocab = VocabJson();
  WriteTokenizer(dir, false, vocab, merges);
  EXPECT_EQ(EncodeOrDie(LoadOrDie(dir), "abc"), (Ids{'a', 256}));
  merges.pop_back();
  WriteTokenizer(dir, false, vocab, merges);
  EXPECT_EQ(EncodeOrDie(LoadOrDie(dir), "abc"), (Ids{257, 'c'}));
}

TEST(Gpt2TokenizerTest, PairsAStepMakesWaitForTheNextStep) {
  TempDir dir;
  nlohmann::json vocab = VocabJson();
  vocab["aba"] = 263;
  // "ab a" outranks "a b", which makes it: encoder.py joins every "a b"
  // first, so "abab" is ab|ab, not aba|b.
  WriteTokenizer(dir, false, vocab, {"ab a", "a b"});
  const Gpt2Tokenizer tokenizer = LoadOrDie(dir);
  EXPECT_EQ(EncodeOrDie(tokenizer, "abab"), (Ids{257, 257}));
  EXPECT_EQ(EncodeOrDie(tokenizer, "aba"), (Ids{263}));
}

TEST(Gpt2TokenizerTest, UnknownIdsAndBytesAreErrors) {
  TempDir dir;
  nlohmann::json vocab = VocabJson();
  vocab.erase("z");
  vocab["x€"] = 301;  // € is not in GPT-2's byte table
  WriteTokenizer(dir, false, vocab);
  const Gpt2Tokenizer tokenizer = LoadOrDie(dir);
  for (const int64_t id : {int64_t{-1}, int64_t{280}, int64_t{302}}) {
    const Result<std::string> bytes = tokenizer.Decode(id);
    ASSERT_FALSE(bytes.ok());
    EXPECT_NE(
        bytes.status().message().find("no token has id " + std::to_string(id)),
        std::string::npos);
  }
  const Result<std::string> euro = tokenizer.Decode(301);
  ASSERT_FALSE(euro.ok());
  EXPECT_NE(euro.status().message().find("outside GPT-2's byte table"),
            std::string::npos);
  const Result<Ids> ids = tokenizer.Encode("a fizz");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().message(),
            "cannot encode ' fizz': the vocabulary has no token for byte "
            "0x7a");
}

// ---------------------------------------------------------------------------
// Bad directories and files: one line each, naming the file.

// Load's message for `dir`, which must fail.
std::string LoadError(const std::string& dir) {
  const Result<Gpt2Tokenizer> tokenizer = Gpt2Tokenizer::Load(dir);
  EXPECT_FALSE(tokenizer.ok());
  if (tokenizer.ok()) return "";
  const std::string& message = tokenizer.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

::testing::AssertionResult Has(const std::string& text,
                               const std::string& part) {
  if (text.find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "'" << text << "' lacks '" << part << "'";
}

TEST(Gpt2TokenizerLoadTest, MissingFilesNameBothLayouts) {
  TempDir dir;
  const std::string missing = dir.Path("no-such-dir");
  for (const std::string& message :
       {LoadError(missing), LoadError(dir.path())}) {
    EXPECT_TRUE(Has(message, "vocab.json + merges.txt"));
    EXPECT_TRUE(Has(message, "encoder.json + vocab.bpe"));
  }
  EXPECT_TRUE(Has(LoadError(missing), "'" + missing + "' cannot be read"));
  dir.Write("vocab.json", VocabJson().dump());
  EXPECT_TRUE(Has(LoadError(dir.path()),
                  "'" + dir.Path("merges.txt") + "' cannot be opened"));
  EXPECT_TRUE(Has(LoadError(dir.Path("vocab.json")), "is not a directory"));
}

TEST(Gpt2TokenizerLoadTest, BadVocabularyJson) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"a": 1,)", "is not valid JSON: parse error at line 1, column 9"},
      {R"([1, 2])", "holds an array"},
      {R"("a")", "is not a JSON object of token -> id"},
      {R"({"a": {"b": 1}})", "nests an object"},
      {R"({"a": -1})", "gives token 'a' id -1"},
      {R"({"a": 16777216})", "gives token 'a' id 2^24 or more"},
      {R"({"a": 1.0})", "gives token 'a' a value that is not an id"},
      {R"({"a": "1"})", "gives token 'a' a value that is not an id"},
      {R"({"a": 0, "b": 0})", "gives id 0 to both 'a' and 'b'"},
      {R"({"a": 0, "a": 1})", "names token 'a' twice"},
      {R"({"": 0})", "has an empty token"},
      {R"({})", "has no tokens"},
  };
  for (const auto& [json, problem] : cases) {
    TempDir dir;
    dir.Write("merges.txt", "");
    const std::string path = dir.Write("vocab.json", json);
    EXPECT_TRUE(Has(LoadError(dir.path()), "'" + path + "' " + problem));
  }
}

// Whether every character of `s` is a lead byte and its continuation bytes.
bool IsUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t n = lead < 0x80           ? 1
                     : (lead >> 5) == 0x6  ? 2
                     : (lead >> 4) == 0xE  ? 3
                     : (lead >> 3) == 0x1E ? 4
                                           : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// A message stays one short line of UTF-8 whatever the file holds: JSON's
// parser quotes the whole token it read (a string left open: megabytes),
// and a cut must not split a character.
TEST(Gpt2TokenizerLoadTest, MessagesStayShortAndUtf8) {
  TempDir dir;
  dir.Write("merges.txt", "");
  dir.Write("vocab.json", "{\"" + std::string(100000, 'a'));
  const std::string open_string = LoadError(dir.path());
  EXPECT_TRUE(Has(open_string, "is not valid JSON: parse error"));
  EXPECT_LT(open_string.size(), 400u) << open_string.substr(0, 400);
  std::string long_token;
  for (int i = 0; i < 30; ++i) long_token += "\xC3\xA9";  // e acute
  dir.Write("vocab.json",
            "{\"" + long_token + "\": 0, \"" + long_token + "\": 1}");
  const std::string twice = LoadError(dir.path());
  EXPECT_TRUE(Has(twice, "...' twice"));
  EXPECT_TRUE(IsUtf8(twice)) << twice;
  // Bytes outside valid UTF-8 in a file are escaped, not copied.
  dir.Write("vocab.json", R"({"a": 0, "b": 1})");
  dir.Write("merges.txt", "#version: 0.2\n\xff b\n");
  const std::string invalid = LoadError(dir.path());
  EXPECT_TRUE(Has(invalid, "'\\xff'")) << invalid;
  EXPECT_TRUE(IsUtf8(invalid)) << invalid;
}

// Ids may have gaps: one id near 2^24 costs one token's memory, not 2^24
// strings (512 MiB).
TEST(Gpt2TokenizerLoadTest, SparseIdsCostTheirTokensOnly) {
  TempDir dir;
  dir.Write("merges.txt", "");
  dir.Write("vocab.json", R"({"a": 0, "hole": 16777215})");
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const Result<Gpt2Tokenizer> tokenizer = Gpt2Tokenizer::Load(dir.path());
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 << 10);  // KiB
  EXPECT_EQ(tokenizer->vocab_size(), int64_t{1} << 24);
  EXPECT_EQ(*tokenizer->Decode(0), "a");
  const Result<std::string> gap = tokenizer->Decode(5);
  ASSERT_FALSE(gap.ok());
  EXPECT_TRUE(Has(gap.status().message(), "no token has id 5"));
}

TEST(Gpt2TokenizerLoadTest, BadMergeLines) {
  const std::pair<std::string, std::string> cases[] = {
      {"a b c", "line 3 is 'a b c', want two tokens separated by one space"},
      {"ab", "line 3 is 'ab', want two"},
      {"a  b", "line 3 is 'a  b', want two"},
      {" a", "line 3 is ' a', want two"},
      {"a\tb", "line 3 is 'a\\x09b', want two"},
      {"a zz", "line 3 names 'zz', a token the vocabulary lacks"},
      {"a c", "line 3 makes 'ac', a token the vocabulary lacks"},
      {"a b\rb c", "line 3 holds a carriage return"},
  };
  for (const auto& [line, problem] : cases) {
    TempDir dir;
    dir.Write("encoder.json", VocabJson().dump());
    const std::string path =
        dir.Write("vocab.bpe", "#version: 0.2\r\nb c\r\n" + line + "\n");
    EXPECT_TRUE(Has(LoadError(dir.path()), "'" + path + "' " + problem));
  }
}

// A "#version" line is skipped wherever it is, as Hugging Face's tokenizers
// skip it: after a blank first line too.
TEST(Gpt2TokenizerLoadTest, VersionLinesAreSkippedOnAnyLine) {
  TempDir dir;
  dir.Write("encoder.json", VocabJson().dump());
  dir.Write("vocab.bpe", "\n#version: 0.2\nb c\n");
  const Result<Gpt2Tokenizer> tokenizer = Gpt2Tokenizer::Load(dir.path());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
}

// Loading is charged against the memory cap before each thing is made:
// a file's text, then the vocabulary's tables (240 bytes a token, bounded
// by the text's colons, and twice the text), then the merges' (64 bytes a
// line), beside what the caller holds; each refusal is one line naming the
// file, what it needs and the cap.
TEST(Gpt2TokenizerLoadTest, FilesAreChargedAgainstTheMemoryCap) {
  TempDir dir;
  nlohmann::json vocab = VocabJson();
  for (int i = 0; i < 20000; ++i) vocab["t" + std::to_string(i)] = 400 + i;
  WriteTokenizer(dir, false, vocab);
  const std::string dumped = vocab.dump();
  const uint64_t text = dumped.size();
  // 20264 tokens, one of them ':' itself: 20265 colons.
  const auto colons =
      static_cast<uint64_t>(std::count(dumped.begin(), dumped.end(), ':'));
  ASSERT_EQ(colons, 20265u);
  const uint64_t tables = 2 * text + colons * 240;
  const auto error = [&](uint64_t cap, uint64_t held) {
    const Result<Gpt2Tokenizer> t = Gpt2Tokenizer::Load(dir.path(), cap, held);
    EXPECT_FALSE(t.ok());
    if (t.ok()) return std::string();
    EXPECT_EQ(t.status().code(), StatusCode::kOutOfMemory);
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
    return t.status().message();
  };
  const std::string json = "'" + dir.Path("vocab.json") + "' ";
  EXPECT_TRUE(Has(error(text - 1, 0), json + "(" + std::to_string(text) +
                                          " bytes of text) needs " +
                                          std::to_string(text) +
                                          " bytes to load beside 0 held, "
                                          "over the memory limit of " +
                                          std::to_string(text - 1) + " bytes"));
  EXPECT_TRUE(Has(error(text + tables - 1, 0),
                  json + "(up to 20265 tokens) needs " +
                      std::to_string(tables) + " bytes to load beside " +
                      std::to_string(text) + " held"));
  EXPECT_TRUE(Has(error(text + tables, 1), "(up to 20265 tokens)"));
  // Room for the vocabulary, not for the merges' text and table.
  const uint64_t merges = MergesText(kMerges).size();
  EXPECT_TRUE(Has(error(text + tables + merges, 0),
                  "'" + dir.Path("merges.txt") + "' (up to 9 merges) needs " +
                      std::to_string(9 * 64) + " bytes"));
  const Result<Gpt2Tokenizer> fits =
      Gpt2Tokenizer::Load(dir.path(), text + tables + merges + 9 * 64, 0);
  ASSERT_TRUE(fits.ok()) << fits.status().message();
  EXPECT_GT(fits->memory_bytes(), 20264u * 96);
  EXPECT_LT(fits->memory_bytes(), tables);
}

TEST(Gpt2TokenizerLoadTest, RefusesFifosDevicesAndHugeFilesWithoutHanging) {
  TempDir dir;
  WriteTokenizer(dir, false);
  const std::string merges = dir.Path("merges.txt");
  ASSERT_EQ(truncate(merges.c_str(), (off_t{64} << 20) + 1), 0);
  EXPECT_TRUE(
      Has(LoadError(dir.path()),
          "'" + merges + "' is 67108865 bytes, over the limit of 67108864"));
  const std::string vocab = dir.Path("vocab.json");
  ASSERT_EQ(unlink(vocab.c_str()), 0);
  ASSERT_EQ(mkfifo(vocab.c_str(), 0600), 0);
  EXPECT_TRUE(
      Has(LoadError(dir.path()), "'" + vocab + "' is not a regular file"));
  ASSERT_EQ(unlink(vocab.c_str()), 0);
  ASSERT_EQ(symlink("/dev/zero", vocab.c_str()), 0);
  EXPECT_TRUE(
      Has(LoadError(dir.path()), "'" + vocab + "' is not a regular file"));
}

}  // namespace
}  // namespace attn::tokenizer
