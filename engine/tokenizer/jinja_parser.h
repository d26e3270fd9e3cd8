// The syntax tree of a chat template and the parser that builds it from
// tokens. Everything outside the supported subset is refused here, naming
// the line and column, so rendering never silently differs from Jinja2.
#ifndef ATTN_ENGINE_TOKENIZER_JINJA_PARSER_H_
#define ATTN_ENGINE_TOKENIZER_JINJA_PARSER_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/status.hpp"
#include "engine/tokenizer/jinja_lexer.h"
#include "engine/tokenizer/jinja_value.h"

namespace attn::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args: items
    kTuple,      // args: items
    kDict,       // args: key, value, key, value...
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], null parts omitted
    kCall,       // args[0](args[1...], kwargs)
    kFilter,     // args[0] | name(args[1...], kwargs)
    kTest,       // args[0] is [not] name(args[1...])
    kUnary,      // name args[0]: "-", "+", "not"
    kBinary,     // args[0] name args[1]: arithmetic, "~", comparisons, in
    kAnd,
    kOr,
    kCondition,  // args[0] if args[1] else args[2] (null: undefined)
  };
  Kind kind;
  Position at;
  std::string name;
  Value literal;
  bool negated = false;  // "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (a null condition is else)
    kFor,       // targets in expr [if filter]: body else else_body
    kSet,       // targets (or targets[0].attribute) = expr
    kSetBlock,  // targets[0] = rendered body
    kMacro,     // name(params) body
    kBreak,
    kContinue,
  };
  Kind kind;
  Position at;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
};

struct ParseLimits {
  int max_depth = 64;  // nesting of blocks and of expressions
};

// The statements of a template. Unknown tags, filters and tests, unclosed
// blocks and syntax errors fail with the place and what was expected.
Result<Body> Parse(const std::vector<Token>& tokens, ParseLimits limits);

// Whether a filter or test of that name is supported (jinja_builtins.cc).
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

}  // namespace attn::jinja

#endif  // ATTN_ENGINE_TOKENIZER_JINJA_PARSER_H_
