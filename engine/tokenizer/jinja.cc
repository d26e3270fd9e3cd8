#include "engine/tokenizer/jinja.h"

#include <utility>

#include "engine/tokenizer/jinja_eval.h"
#include "engine/tokenizer/jinja_lexer.h"
#include "engine/tokenizer/jinja_parser.h"

namespace attn::tokenizer {

namespace {

// Whether `json` nests at most `levels` arrays and objects deep.
bool NestsAtMost(const nlohmann::ordered_json& json, int levels) {
  if (!json.is_structured()) return true;
  if (levels == 0) return false;
  for (const auto& item : json) {
    if (!NestsAtMost(item, levels - 1)) return false;
  }
  return true;
}

}  // namespace

Result<std::string> RenderChatTemplate(std::string_view chat_template,
                                       const nlohmann::ordered_json& variables,
                                       const ChatTemplateLimits& limits) {
  if (!variables.is_object() && !variables.is_null()) {
    return InvalidArgument(
        "chat template variables must be a JSON object (or null), "
        "got " +
        std::string(variables.type_name()));
  }
  if (!NestsAtMost(variables, jinja::kMaxValueDepth)) {
    return InvalidArgument("chat template variables nest deeper than " +
                           std::to_string(jinja::kMaxValueDepth) + " levels");
  }
  ATTN_ASSIGN_OR_RETURN(const auto tokens, jinja::Tokenize(chat_template));
  jinja::ParseLimits parse_limits;
  parse_limits.max_depth = limits.max_nesting;
  ATTN_ASSIGN_OR_RETURN(const jinja::Body body,
                        jinja::Parse(tokens, parse_limits));
  jinja::RenderLimits render_limits;
  render_limits.max_output_bytes = limits.max_output_bytes;
  render_limits.max_call_depth = limits.max_call_depth;
  render_limits.max_steps = limits.max_steps;
  render_limits.now = limits.now;
  jinja::Dict globals = jinja::Globals(render_limits);
  // What apply_chat_template always passes.
  globals.Set("add_generation_prompt", jinja::Value::Bool(false));
  globals.Set("tools", jinja::Value::None());
  globals.Set("documents", jinja::Value::None());
  for (const auto& [name, value] : variables.items()) {
    globals.Set(name, jinja::Value::FromJson(value));
  }
  return jinja::Render(body, globals, render_limits);
}

}  // namespace attn::tokenizer
