// Chat templates (engine/tokenizer/jinja.h): real model templates against
// the outputs of transformers' own Jinja2 setup (tests/golden/chat, written
// by tools/make_chat_goldens.py), byte for byte; then each construct, the
// whitespace rules, Python's printing, and the refusals and limits.
#include "engine/tokenizer/jinja.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace attn::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

const std::string kChatDir =
    std::string(ATTN_SOURCE_DIR) + "/tests/golden/chat";

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return true;
}

Json ReadJson(const std::string& path) {
  std::string text;
  EXPECT_TRUE(ReadFile(path, &text)) << path;
  return Json::parse(text);
}

// ---------------------------------------------------------------------------
// Real templates against transformers' renderer.

// The variables make_chat_goldens.py passes: the template's tokens, then the
// conversation's own.
Json VariablesFor(const Json& tmpl, const Json& conversation) {
  Json variables = Json::object();
  for (const char* token : {"bos_token", "eos_token"}) {
    if (!tmpl[token].is_null()) variables[token] = tmpl[token];
  }
  for (const auto& [key, value] : conversation["variables"].items()) {
    variables[key] = value;
  }
  return variables;
}

TEST(ChatTemplateGoldenTest, EveryTemplateAndConversationMatchesJinja2) {
  const Json templates = ReadJson(kChatDir + "/templates.json");
  const Json conversations = ReadJson(kChatDir + "/conversations.json");
  ASSERT_GE(templates.size(), 12u);
  int outputs = 0;
  int errors = 0;
  for (const Json& tmpl : templates) {
    const std::string name = tmpl["name"].get<std::string>();
    std::string source;
    ASSERT_TRUE(ReadFile(kChatDir + "/templates/" + name + ".jinja", &source));
    for (const Json& conversation : conversations) {
      const std::string stem = kChatDir + "/expected/" + name + "." +
                               conversation["name"].get<std::string>();
      SCOPED_TRACE(stem);
      const auto rendered =
          RenderChatTemplate(source, VariablesFor(tmpl, conversation));
      std::string expected;
      if (ReadFile(stem + ".txt", &expected)) {
        ++outputs;
        ASSERT_TRUE(rendered.ok()) << rendered.status().message();
        EXPECT_EQ(*rendered, expected);
        continue;
      }
      ASSERT_TRUE(ReadFile(stem + ".error", &expected)) << "no golden";
      ++errors;
      ASSERT_FALSE(rendered.ok()) << *rendered;
      const std::string& message = rendered.status().message();
      EXPECT_EQ(message.find('\n'), std::string::npos);
      if (expected.rfind("raise_exception: ", 0) == 0) {
        EXPECT_EQ(message.substr(message.size() -
                                 std::min(message.size(), expected.size())),
                  expected);
      }
    }
  }
  EXPECT_GE(outputs, 90);
  EXPECT_GE(errors, 10);
}

}  // namespace
}  // namespace attn::tokenizer
