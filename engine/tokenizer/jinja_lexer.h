// Splits a Jinja template into text and tag tokens as Jinja2's lexer does
// with Hugging Face's settings (trim_blocks, lstrip_blocks): the whitespace
// rules are applied here, so the parser sees final text.
#ifndef ATTN_ENGINE_TOKENIZER_JINJA_LEXER_H_
#define ATTN_ENGINE_TOKENIZER_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "attn/status.hpp"

namespace attn::jinja {

// A place in the template, 1-based, for messages.
struct Position {
  int line = 1;
  int column = 1;
};

// "chat template LINE:COLUMN: what", one line.
Status ErrorAt(Position at, const std::string& what);

struct Token {
  enum class Kind {
    kText,        // template text, output as is
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kVarBegin,    // {{
    kVarEnd,      // }}
    kName,
    kString,  // text holds the unescaped value
    kInt,
    kFloat,
    kOperator,  // text holds it: "+", "//", "==", "(", ...
    kEnd,
  };
  Kind kind;
  std::string text;
  Position at;
};

// The tokens of `source`, ending with kEnd; comments are dropped and
// {% raw %} blocks become text. Fails on an unclosed tag, comment, string
// or raw block, or a character no token starts with.
Result<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace attn::jinja

#endif  // ATTN_ENGINE_TOKENIZER_JINJA_LEXER_H_
