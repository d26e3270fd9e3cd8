// Renders Hugging Face chat templates (tokenizer_config.json's
// "chat_template") byte for byte as transformers' apply_chat_template does:
// Jinja2 in an immutable sandbox with trim_blocks and lstrip_blocks, the
// loop controls, and transformers' tojson, raise_exception and
// strftime_now. The Jinja subset it takes is listed in engine/README.md.
#ifndef ATTN_ENGINE_TOKENIZER_JINJA_H_
#define ATTN_ENGINE_TOKENIZER_JINJA_H_

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "attn/status.hpp"

namespace attn::tokenizer {

// Bounds against hostile templates: nesting when parsing, macro call depth,
// output (and any one value) size, and work done while rendering.
struct ChatTemplateLimits {
  int max_nesting = 64;
  int max_call_depth = 64;
  size_t max_output_bytes = size_t{16} << 20;
  int64_t max_steps = 10'000'000;
  // strftime_now's clock; null means the system's, in local time.
  std::function<std::time_t()> now;
};

// Renders `chat_template` with `variables`: messages (a JSON array of
// {"role", "content", ...}), add_generation_prompt, bos_token, eos_token and
// any others the template reads (tools, date_string...), or null for none. As
// apply_chat_template, add_generation_prompt defaults to false and tools
// and documents to none. Objects keep their key order (tojson prints it),
// so build `variables` as an ordered_json; a plain json converts, sorted.
// Fails with one line naming the template's line:column and what failed:
// syntax outside the supported subset, an undefined value used, a
// raise_exception() call ("raise_exception: <its message>"), a limit.
Result<std::string> RenderChatTemplate(std::string_view chat_template,
                                       const nlohmann::ordered_json& variables,
                                       const ChatTemplateLimits& limits = {});

}  // namespace attn::tokenizer

#endif  // ATTN_ENGINE_TOKENIZER_JINJA_H_
