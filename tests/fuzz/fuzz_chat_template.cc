// libFuzzer target: the input bytes as a chat template, rendered with a
// fixed conversation (system, user, an assistant tool call, a tool result,
// tools, special tokens) under tight limits: each render gives text or a
// one-line, non-empty refusal; never a crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/tokenizer/jinja.h"

namespace {

const nlohmann::ordered_json& Variables() {
  static const auto* variables =
      new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? \u00e9\ud83d\ude00"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1",
        "type": "function", "function": {"name": "get_weather",
        "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "22.5"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is 22.5."}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type":
      "string"}}, "required": ["city"]}}}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
    "date_string": "26 Jul 2024"})"));
  return *variables;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  attn::tokenizer::ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 200'000;
  limits.now = [] { return std::time_t{1721995200}; };
  const auto rendered =
      attn::tokenizer::RenderChatTemplate(source, Variables(), limits);
  if (rendered.ok()) return rendered->size() > limits.max_output_bytes;
  const std::string& message = rendered.status().message();
  if (message.empty() || message.find('\n') != std::string::npos) {
    std::abort();
  }
  return 0;
}
