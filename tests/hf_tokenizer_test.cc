// Hugging Face tokenizer.json behind attn::Tokenizer, on small files the
// tests write: the file's own regex (\p{L}, (?i:...), look-ahead) cutting
// pieces before the merges, SentencePiece's byte fallback and <unk>, added
// tokens with lstrip/rstrip, NFC, the post-processor, decoding and the
// decode stream, and one-line refusals of what is not implemented. The
// real vocabularies are checked by tests/tokenizers/check_real.sh.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/tokenizer.hpp"
#include "engine/tokenizer/text_util.h"
#include "nlohmann/json.hpp"
#include "tests/temp_dir.h"

namespace attn {
namespace {

using Json = nlohmann::json;
using test::TempDir;
using Ids = std::vector<int64_t>;

// GPT-2's spelling of a byte string (a space is "Ġ").
std::string Spell(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    tokenizer::AppendUtf8(tokenizer::ByteChar(static_cast<unsigned char>(c)),
                          &out);
  }
  return out;
}

// A byte-level BPE: the 256 bytes as ids 0..255, then each merge's join.
Json ByteLevelJson(
    const std::string& pattern,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b)
    vocab[Spell(std::string(1, static_cast<char>(b)))] = b;
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(Spell(a + b))) {
      vocab[Spell(a + b)] = static_cast<int>(vocab.size());
    }
    merge_list.push_back(Spell(a) + " " + Spell(b));
  }
  return {{"added_tokens", Json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", pattern}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"use_regex", false}}}}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", merge_list},
            {"ignore_merges", false}}}};
}

std::shared_ptr<const Tokenizer> LoadJson(const TempDir& dir, const Json& json,
                                          const Json& config = nullptr) {
  dir.Write("tokenizer.json", json.dump());
  if (!config.is_null()) dir.Write("tokenizer_config.json", config.dump());
  auto loaded = Tokenizer::Load(dir.path());
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  return loaded.ok() ? *loaded : nullptr;
}

// The id `tokens` gives `text` in the vocabulary of ByteLevelJson.
int64_t IdOf(const Json& json, const std::string& bytes) {
  return json["model"]["vocab"][Spell(bytes)].get<int64_t>();
}

constexpr char kPattern[] = R"((?i:'s|'t)|\p{L}+| ?\p{L}+|\s+(?!\S)|\s+|.)";

TEST(HfTokenizerTest, TheFilesRegexCutsPiecesBeforeMerging) {
  // "T '" ranks first but crosses a piece boundary, so it never joins.
  const Json json = ByteLevelJson(
      kPattern, {{"T", "'"}, {"'", "S"}, {"a", "b"}, {" ", "ab"}, {" ", " "}});
  TempDir dir;
  const auto t = LoadJson(dir, json);
  ASSERT_TRUE(t);
  EXPECT_STREQ(t->kind(), "byte-level-bpe");
  // (?i:'s) takes "'S"; " ?\p{L}+" takes " ab".
  EXPECT_EQ(*t->Encode("IT'S ab"),
            (Ids{'I', 'T', IdOf(json, "'S"), IdOf(json, " ab")}));
  // \s+(?!\S) leaves the last space to " b": the two never merge.
  EXPECT_EQ(*t->Encode("a  b"), (Ids{'a', ' ', ' ', 'b'}));
  EXPECT_EQ(*t->Encode("a   "), (Ids{'a', IdOf(json, "  "), ' '}));
  // \p{L} is Unicode's: "é" stays in the word's piece, so "a b" still
  // splits there but "ab" inside "éab" joins.
  EXPECT_EQ(*t->Encode("\xc3\xa9"
                       "ab"),
            (Ids{0xc3, 0xa9, IdOf(json, "ab")}));
  EXPECT_EQ(*t->DecodeText(*t->Encode("IT'S ab  x\xf0\x9f\x98\x80")),
            "IT'S ab  x\xf0\x9f\x98\x80");
}

TEST(HfTokenizerTest, BareByteLevelRunsGpt2sPatternAndIgnoreMergesKeepsWords) {
  Json json = ByteLevelJson(kPattern, {{"h", "i"}, {" ", "hi"}});
  json["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  json["model"]["vocab"][Spell(" xyz")] = 400;  // no merge makes it
  json["model"]["ignore_merges"] = true;
  TempDir dir;
  const auto t = LoadJson(dir, json);
  ASSERT_TRUE(t);
  // add_prefix_space: "hi" is " hi"; GPT-2's 's splits "it's".
  EXPECT_EQ(*t->Encode("hi it's"),
            (Ids{IdOf(json, " hi"), ' ', 'i', 't', '\'', 's'}));
  EXPECT_EQ(*t->Encode("xyz"), (Ids{400}));
  EXPECT_EQ(*t->Encode("xy"), (Ids{' ', 'x', 'y'}));
  EXPECT_EQ(*t->Encode("a xyz"), (Ids{' ', 'a', 400}));
}

// A SentencePiece-style BPE as Llama 2's: "▁" for spaces, byte fallback.
Json SentencePieceJson() {
  const std::string bar = "\xe2\x96\x81";
  Json vocab = {{"<unk>", 0},  {"<s>", 1},    {"</s>", 2},    {bar, 3},
                {"h", 4},      {"i", 5},      {bar + "h", 6}, {bar + "hi", 7},
                {"<0xE4>", 8}, {"<0xB8>", 9}, {"<0xAD>", 10}, {"<mask>", 11}};
  Json added = Json::array();
  for (const char* name : {"<unk>", "<s>", "</s>"}) {
    added.push_back({{"id", vocab[name]},
                     {"content", name},
                     {"special", true},
                     {"normalized", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false}});
  }
  return {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", bar}},
          {{"type", "Replace"},
           {"pattern", {{"String", " "}}},
           {"content", bar}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"},
           {"pattern", {{"String", bar}}},
           {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges", {bar + " h", Json::array({bar + "h", "i"})}}}}};
}

TEST(HfTokenizerTest, SentencePieceBytesFallBackAndUnknownsFuse) {
  TempDir dir;
  const Json config = {{"bos_token", "<s>"},
                       {"eos_token", {{"content", "</s>"}}},
                       {"add_bos_token", true},
                       {"chat_template",
                        {{{"name", "tool_use"}, {"template", "T"}},
                         {{"name", "default"}, {"template", "D"}}}}};
  dir.Write("generation_config.json", R"({"eos_token_id": [2, 7]})");
  const auto t = LoadJson(dir, SentencePieceJson(), config);
  ASSERT_TRUE(t);
  EXPECT_STREQ(t->kind(), "sentencepiece-bpe");
  // 中 has its bytes; "é" and "ü" have none, and fuse into one <unk>.
  EXPECT_EQ(*t->Encode("hi \xe4\xb8\xad"), (Ids{7, 3, 8, 9, 10}));
  EXPECT_EQ(*t->Encode("hi \xe4\xb8\xad", true), (Ids{1, 7, 3, 8, 9, 10}));
  EXPECT_EQ(*t->Encode("\xc3\xa9\xc3\xbch"), (Ids{3, 0, 4}));
  // <s> in the text is the token; the stretch after it gets its own "▁".
  EXPECT_EQ(*t->Encode("hi<s>hi"), (Ids{7, 1, 7}));
  EXPECT_EQ(*t->DecodeText({1, 7, 3, 8, 9, 10}), "<s> hi \xe4\xb8\xad");
  EXPECT_EQ(*t->DecodeText({7, 3, 8, 9}), "hi \xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(*t->Decode(7), " hi");
  EXPECT_EQ(*t->Decode(8), "\xe4");
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_ids(), (Ids{2, 7}));
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->eos_token(), "</s>");
  EXPECT_EQ(t->chat_template(), "D");
}

TEST(HfTokenizerTest, DecodeStreamHoldsBackUnfinishedCharacters) {
  TempDir dir;
  const auto t = LoadJson(dir, SentencePieceJson());
  ASSERT_TRUE(t);
  DecodeStream stream(t);
  std::string text;
  for (const int64_t id : {7, 3, 8, 9}) {
    const Result<std::string> step = stream.Next(id);
    ASSERT_TRUE(step.ok()) << step.status().message();
    text += *step;
  }
  EXPECT_EQ(text, "hi ");  // 中 is two bytes in: held back
  EXPECT_FALSE(stream.Next(99).ok());
  EXPECT_EQ(*stream.Next(10), "\xe4\xb8\xad");
  EXPECT_EQ(*stream.Next(7), " hi");
  EXPECT_EQ(*stream.Next(8), "");
  EXPECT_EQ(stream.Finish(), "\xef\xbf\xbd");
}

TEST(HfTokenizerTest, AddedTokensStripSpacesAndMatchLongestFirst) {
  Json json = ByteLevelJson(kPattern, {});
  const auto add = [&](const char* content, int id, bool lstrip, bool rstrip) {
    json["added_tokens"].push_back({{"id", id},
                                    {"content", content},
                                    {"special", true},
                                    {"normalized", false},
                                    {"lstrip", lstrip},
                                    {"rstrip", rstrip},
                                    {"single_word", false}});
  };
  add("<m>", 300, true, false);
  add("<mm>", 301, false, true);
  add("<m", 302, false, false);
  TempDir dir;
  const auto t = LoadJson(dir, json);
  ASSERT_TRUE(t);
  EXPECT_EQ(*t->Encode("a  <m> b"), (Ids{'a', 300, ' ', 'b'}));
  EXPECT_EQ(*t->Encode("a <mm>  b"), (Ids{'a', ' ', 301, 'b'}));
  EXPECT_EQ(*t->Encode("<mx"), (Ids{302, 'x'}));
  EXPECT_EQ(*t->DecodeText({'a', 300, 301}), "a<m><mm>");
}

TEST(HfTokenizerTest, NfcComposesBeforeTheModel) {
  Json json = ByteLevelJson(kPattern, {{"\xc3", "\xa9"}});
  json["normalizer"] = {{"type", "NFC"}};
  TempDir dir;
  const auto t = LoadJson(dir, json);
  ASSERT_TRUE(t);
  // "e" + U+0301 is "é" after NFC.
  EXPECT_EQ(*t->Encode("e\xcc\x81"), (Ids{IdOf(json, "\xc3\xa9")}));
  // Bytes outside UTF-8 pass through NFC and the regex as their own.
  EXPECT_EQ(*t->Encode("a\xff"), (Ids{'a', 0xff}));
}

// SmolLM2's ChatML template, through the tokenizer: the rendered prompt,
// the variables passed beside the messages, and one-line refusals.
TEST(HfTokenizerTest, ChatTemplateRendersTheConversation) {
  const TempDir dir;
  const Json config = {
      {"chat_template",
       "{% for message in messages %}{% if loop.first and messages[0]['role'] "
       "!= 'system' %}{{ '<|im_start|>system\nYou are " +
           std::string("{{") +
           "name}}.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
           "message['role'] + '\n' + message['content'] + '<|im_end|>' + "
           "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
           "'<|im_start|>assistant\n' }}{% endif %}"}};
  const auto t = LoadJson(dir, ByteLevelJson(kPattern, {}), config);
  ASSERT_NE(t, nullptr);
  const std::string messages = R"([{"role": "user", "content": "Hi"}])";
  EXPECT_EQ(*t->ApplyChatTemplate(messages, true),
            "<|im_start|>system\nYou are {{name}}.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      *t->ApplyChatTemplate(
          R"([{"role": "system", "content": "S"}, {"role": "user",
                    "content": "Hi"}])",
          false),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(t->ApplyChatTemplate("[1", true)
                .status()
                .message()
                .find("the messages is not valid JSON: parse error at line 1, "
                      "column 3"),
            0u);
  EXPECT_EQ(t->ApplyChatTemplate(messages, true, "[]").status().message(),
            "the variables is a JSON array, want a JSON object");
  const TempDir plain;
  const auto none = LoadJson(plain, ByteLevelJson(kPattern, {}));
  ASSERT_NE(none, nullptr);
  EXPECT_NE(none->ApplyChatTemplate(messages, true)
                .status()
                .message()
                .find("the tokenizer has no chat_template"),
            std::string::npos);
}

// raise_exception's message reaches the caller, with the template's place.
TEST(HfTokenizerTest, ChatTemplateErrorsNameTheirPlace) {
  const TempDir dir;
  const Json config = {
      {"chat_template",
       "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation "
       "roles must start with user') }}{% endif %}ok"}};
  const auto t = LoadJson(dir, ByteLevelJson(kPattern, {}), config);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->ApplyChatTemplate(R"([{"role": "user", "content": ""}])", true),
            "ok");
  const std::string message =
      t->ApplyChatTemplate(R"([{"role": "assistant", "content": ""}])", true)
          .status()
          .message();
  EXPECT_NE(message.find("raise_exception: Conversation roles must start with "
                         "user"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("1:"), std::string::npos) << message;
}

TEST(HfTokenizerTest, TokenizerJsonWinsOverVocabJson) {
  TempDir dir;
  dir.Write("vocab.json", R"({"a": 0})");
  dir.Write("merges.txt", "");
  const auto t = LoadJson(dir, ByteLevelJson(kPattern, {}));
  ASSERT_TRUE(t);
  EXPECT_STREQ(t->kind(), "byte-level-bpe");
  EXPECT_EQ(t->vocab_size(), 256);
}

struct BadCase {
  const char* pointer;  // JSON pointer into the byte-level file
  Json value;
  const char* message;
};

TEST(HfTokenizerLoadTest, RefusesWhatIsNotImplementedInOneLine) {
  const BadCase cases[] = {
      {"/normalizer",
       {{"type", "NFKC"}},
       "normalizer.type is '\"NFKC\"', want one of NFC"},
      {"/model/type", "Unigram",
       "model.type is '\"Unigram\"', want one of BPE"},
      {"/pre_tokenizer/pretokenizers/0/pattern/Regex", "(",
       "pre_tokenizer.pretokenizers[0].pattern.Regex pattern '(' does not "
       "compile"},
      {"/pre_tokenizer/pretokenizers/0/behavior", "Sideways",
       "behavior is 'Sideways', want one of Removed"},
      {"/model/merges",
       {"a zz"},
       "model.merges[0] names 'zz', a token model.vocab lacks"},
      {"/model/merges",
       {"a b c"},
       "model.merges[0] is 'a b c', want two tokens"},
      {"/model/vocab/x", -1, "want an id from 0 to 2^24 - 1"},
      {"/model/vocab/x", 5, "gives id 5 to both"},
      {"/model/dropout", 0.1, "model.dropout is '0.1', want null"},
      {"/truncation", {{"max_length", 4}}, "truncation is"},
      {"/decoder", {{"type", "WordPiece"}}, "decoder.type is '\"WordPiece\"'"},
      {"/post_processor", {{"type", "BertProcessing"}}, "post_processor.type"},
  };
  for (const BadCase& c : cases) {
    Json json = ByteLevelJson(kPattern, {});
    json[Json::json_pointer(c.pointer)] = c.value;
    TempDir dir;
    dir.Write("tokenizer.json", json.dump());
    const auto loaded = Tokenizer::Load(dir.path());
    ASSERT_FALSE(loaded.ok()) << c.pointer;
    const std::string& message = loaded.status().message();
    EXPECT_NE(message.find("tokenizer.json': "), std::string::npos) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(HfTokenizerLoadTest, BadJsonConfigsAndTheMemoryCap) {
  TempDir dir;
  dir.Write("tokenizer.json", "{\"model\": ");
  auto loaded = Tokenizer::Load(dir.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("tokenizer.json"),
            std::string::npos);
  dir.Write("tokenizer.json", ByteLevelJson(kPattern, {}).dump());
  dir.Write("tokenizer_config.json", R"({"eos_token": "<nope>"})");
  loaded = Tokenizer::Load(dir.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(
                "tokenizer_config.json': eos_token is '<nope>', a token the "
                "vocabulary lacks"),
            std::string::npos)
      << loaded.status().message();
  dir.Write("tokenizer_config.json", "{}");
  TokenizerOptions options;
  options.max_memory_bytes = 16 << 10;
  loaded = Tokenizer::Load(dir.path(), options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kOutOfMemory);
  EXPECT_TRUE(Tokenizer::Load(dir.path()).ok());
}

}  // namespace
}  // namespace attn
