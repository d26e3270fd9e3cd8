// attn tokenize --messages and attn chat on a chat model's folder the test
// writes: a byte-level tokenizer.json with ChatML's special tokens and
// template, and a small Qwen2-shaped model of seeded random weights. The
// chat keeps its KV cache between turns; each reply must be what generate
// gives for the whole conversation rendered afresh.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "attn/safetensors.hpp"
#include "attn/tokenizer.hpp"
#include "engine/tokenizer/text_util.h"
#include "nlohmann/json.hpp"
#include "tests/chat_folder.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

using Json = nlohmann::json;

struct Outcome {
  int exit_code;
  std::string out, err;
};

class ChatCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::WriteChatFolder(model_.path()).ok());
  }

  // `attn args` with `input` on stdin, after shell commands `setup`.
  Outcome Attn(const std::string& args, const std::string& input = "",
               const std::string& setup = "") {
    scratch_.Write("stdin.txt", input);
    const std::string in = scratch_.path() + "/stdin.txt";
    const std::string out = scratch_.path() + "/stdout.txt";
    const std::string err = scratch_.path() + "/stderr.txt";
    const int status = std::system(
        (setup + ATTN_CLI + " " + args + " <" + in + " >" + out + " 2>" + err)
            .c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Read(out), Read(err)};
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // What generate prints for `conversation` rendered with the generation
  // prompt: the reply chat should give.
  std::string Expected(const Json& conversation) {
    auto tokenizer = Tokenizer::Load(model_.path());
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    const std::string prompt =
        *(*tokenizer)->ApplyChatTemplate(conversation.dump(), true);
    scratch_.Write("prompt.txt", prompt);
    // The prompt's trailing newline kept: $(...) alone would drop it.
    const Outcome gen = Attn("generate --model " + model_.path() +
                                 " --max-new-tokens 6 --prompt \"$p\"",
                             "",
                             "p=\"$(cat " + scratch_.path() +
                                 "/prompt.txt; printf x)\"; "
                                 "p=\"${p%x}\"; ");
    EXPECT_EQ(gen.exit_code, 0) << gen.err;
    return gen.out;
  }

  test::TempDir model_, scratch_;
};

TEST_F(ChatCliTest, TokenizeMessagesEncodesTheRenderedPrompt) {
  const Json messages = {{{"role", "user"}, {"content", "Hi"}}};
  scratch_.Write("messages.json", messages.dump());
  const Outcome outcome =
      Attn("tokenize --tokenizer " + model_.path() + " --messages " +
           scratch_.path() + "/messages.json");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  // <|im_start|> user \n H i <|im_end|> \n <|im_start|> assistant \n
  std::vector<int64_t> want = {256, 'u', 's', 'e',  'r', '\n',
                               'H', 'i', 257, '\n', 256};
  for (char c : std::string("assistant\n")) want.push_back(c);
  EXPECT_EQ(Json::parse(outcome.out).get<std::vector<int64_t>>(), want);
  scratch_.Write("bad.json", "{\"role\": \"user\"}");
  const Outcome bad = Attn("tokenize --tokenizer " + model_.path() +
                           " --messages " + scratch_.path() + "/bad.json");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("want a JSON array"), std::string::npos) << bad.err;
}

TEST_F(ChatCliTest, EachReplyIsWhatTheWholeConversationGives) {
  const Outcome chat = Attn(
      "chat --model " + model_.path() + " --max-new-tokens 6", "Hi\nMore\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  Json conversation = {{{"role", "user"}, {"content", "Hi"}}};
  const std::string first = Expected(conversation);
  ASSERT_EQ(chat.out.compare(0, first.size(), first), 0)
      << "chat: " << chat.out << "\ngenerate: " << first;
  auto tokenizer = Tokenizer::Load(model_.path());
  conversation.push_back(
      {{"role", "assistant"}, {"content", first.substr(0, first.size() - 1)}});
  conversation.push_back({{"role", "user"}, {"content", "More"}});
  EXPECT_EQ(chat.out.substr(first.size()), Expected(conversation));
}

TEST_F(ChatCliTest, AModelWithoutAChatTemplateIsRefused) {
  model_.Write("tokenizer_config.json", "{}");
  const Outcome chat = Attn("chat --model " + model_.path(), "Hi\n");
  EXPECT_EQ(chat.exit_code, 1);
  EXPECT_NE(chat.err.find("has no chat_template"), std::string::npos)
      << chat.err;
}

}  // namespace
}  // namespace attn
