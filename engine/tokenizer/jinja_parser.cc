#include "engine/tokenizer/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

namespace attn::jinja {
namespace {

ExprPtr MakeExpr(Expr::Kind kind, Position at, std::string name = {}) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->at = at;
  expr->name = std::move(name);
  return expr;
}

std::string Describe(const Token& token) {
  switch (token.kind) {
    case Token::Kind::kText:
      return "template text";
    case Token::Kind::kBlockBegin:
      return "'{%'";
    case Token::Kind::kBlockEnd:
      return "'%}'";
    case Token::Kind::kVarBegin:
      return "'{{'";
    case Token::Kind::kVarEnd:
      return "'}}'";
    case Token::Kind::kString:
      return "a string";
    case Token::Kind::kEnd:
      return "the end of the template";
    default:
      return "'" + token.text + "'";
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, ParseLimits limits)
      : tokens_(tokens), limits_(limits) {}

  Result<Body> ParseTemplate() {
    Body body;
    ATTN_RETURN_IF_ERROR(ParseBody({}, &body, nullptr));
    return body;
  }

 private:
  // Counts one level of nesting for as long as it lives.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(i_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& token = Peek();
    if (i_ < tokens_.size() - 1) ++i_;
    return token;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  Status Unexpected(const std::string& wanted) const {
    return ErrorAt(Peek().at,
                   "expected " + wanted + ", found " + Describe(Peek()));
  }
  Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return {};
    return Unexpected("'" + std::string(op) + "'");
  }
  Status ExpectBlockEnd() {
    if (Peek().kind != Token::Kind::kBlockEnd) return Unexpected("'%}'");
    Next();
    return {};
  }
  Result<std::string> ExpectName() {
    if (Peek().kind != Token::Kind::kName) return Unexpected("a name");
    return Next().text;
  }
  Status CheckDepth() const {
    if (depth_ <= limits_.max_depth) return {};
    return ErrorAt(
        Peek().at,
        "nested deeper than " + std::to_string(limits_.max_depth) + " levels");
  }

  Status ParseBody(std::initializer_list<std::string_view> end_tags, Body* body,
                   std::string* found_end);
  Status ParseStatement(Body* body);
  Result<std::unique_ptr<Stmt>> ParseIf(Position at);
  Result<std::unique_ptr<Stmt>> ParseFor(Position at);
  Result<std::unique_ptr<Stmt>> ParseSet(Position at);
  Result<std::unique_ptr<Stmt>> ParseMacro(Position at);
  Status ParseClosedBody(std::string_view opener, Position at,
                         std::initializer_list<std::string_view> end_tags,
                         Body* body, std::string* found_end);

  Result<ExprPtr> ParseExpression(bool with_condition = true);
  Result<ExprPtr> ParseTupleOrExpression();
  Result<ExprPtr> ParseOr();
  Result<ExprPtr> ParseAnd();
  Result<ExprPtr> ParseNot();
  Result<ExprPtr> ParseCompare();
  Result<ExprPtr> ParseBinaryLevel(int level);
  Result<ExprPtr> ParseUnary(bool with_filter);
  Result<ExprPtr> ParsePrimary();
  Result<ExprPtr> ParseSequence(Expr::Kind kind, std::string_view close);
  Result<ExprPtr> ParseDict();
  Result<ExprPtr> ParsePostfix(ExprPtr node);
  Result<ExprPtr> ParseSubscript(ExprPtr node);
  Result<ExprPtr> ParseFilterExpr(ExprPtr node);
  Result<ExprPtr> ParseFilter(ExprPtr node);
  Result<ExprPtr> ParseTest(ExprPtr node);
  Status ParseCallArgs(Expr* call);

  const std::vector<Token>& tokens_;
  ParseLimits limits_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

// Statements up to a {% tag %} named in `end_tags` (its name is consumed,
// stored in *found_end) or, with no end tags, up to the end.
Status Parser::ParseBody(std::initializer_list<std::string_view> end_tags,
                         Body* body, std::string* found_end) {
  DepthGuard guard(&depth_);
  ATTN_RETURN_IF_ERROR(CheckDepth());
  for (;;) {
    const Token& token = Peek();
    switch (token.kind) {
      case Token::Kind::kText: {
        auto text = std::make_unique<Stmt>();
        text->kind = Stmt::Kind::kText;
        text->at = token.at;
        text->text = Next().text;
        body->push_back(std::move(text));
        break;
      }
      case Token::Kind::kVarBegin: {
        auto output = std::make_unique<Stmt>();
        output->kind = Stmt::Kind::kOutput;
        output->at = Next().at;
        ATTN_ASSIGN_OR_RETURN(output->expr, ParseTupleOrExpression());
        if (Peek().kind != Token::Kind::kVarEnd) return Unexpected("'}}'");
        Next();
        body->push_back(std::move(output));
        break;
      }
      case Token::Kind::kBlockBegin: {
        const std::string& tag = Peek(1).text;
        if (Peek(1).kind == Token::Kind::kName &&
            std::find(end_tags.begin(), end_tags.end(), tag) !=
                end_tags.end()) {
          Next();
          *found_end = Next().text;
          return {};
        }
        ATTN_RETURN_IF_ERROR(ParseStatement(body));
        break;
      }
      case Token::Kind::kEnd:  // ParseClosedBody names the open block
        return {};
      default:
        return Unexpected("template text or a tag");
    }
  }
}

// A body closed by one of `end_tags`; reaching the end first names the
// unclosed opener.
Status Parser::ParseClosedBody(std::string_view opener, Position at,
                               std::initializer_list<std::string_view> end_tags,
                               Body* body, std::string* found_end) {
  ATTN_RETURN_IF_ERROR(ParseBody(end_tags, body, found_end));
  if (!found_end->empty()) return {};
  return ErrorAt(at, "unclosed {% " + std::string(opener) + " %}: no {% " +
                         std::string(*(end_tags.end() - 1)) + " %}");
}

Status Parser::ParseStatement(Body* body) {
  const Position at = Next().at;  // {%
  ATTN_ASSIGN_OR_RETURN(const std::string tag, ExpectName());
  std::unique_ptr<Stmt> stmt;
  if (tag == "if") {
    ATTN_ASSIGN_OR_RETURN(stmt, ParseIf(at));
  } else if (tag == "for") {
    ATTN_ASSIGN_OR_RETURN(stmt, ParseFor(at));
  } else if (tag == "set") {
    ATTN_ASSIGN_OR_RETURN(stmt, ParseSet(at));
  } else if (tag == "macro") {
    ATTN_ASSIGN_OR_RETURN(stmt, ParseMacro(at));
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return ErrorAt(at, tag + " outside a for loop");
    stmt = std::make_unique<Stmt>();
    stmt->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    stmt->at = at;
    ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (tag == "generation") {
    // transformers' assistant-mask marker: renders its body unchanged.
    ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ATTN_RETURN_IF_ERROR(
        ParseClosedBody("generation", at, {"endgeneration"}, body, &end));
    return ExpectBlockEnd();
  } else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
    return ErrorAt(at, "unexpected {% " + tag + " %}");
  } else {
    return ErrorAt(at, "unsupported tag '" + tag + "'");
  }
  body->push_back(std::move(stmt));
  return {};
}

Result<std::unique_ptr<Stmt>> Parser::ParseIf(Position at) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = Stmt::Kind::kIf;
  stmt->at = at;
  ATTN_ASSIGN_OR_RETURN(ExprPtr condition, ParseTupleOrExpression());
  ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  for (;;) {
    Body body;
    std::string end;
    ATTN_RETURN_IF_ERROR(
        ParseClosedBody("if", at, {"elif", "else", "endif"}, &body, &end));
    stmt->branches.emplace_back(std::move(condition), std::move(body));
    if (end == "elif") {
      ATTN_ASSIGN_OR_RETURN(condition, ParseTupleOrExpression());
      ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
      continue;
    }
    ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "endif") return stmt;
    Body else_body;
    ATTN_RETURN_IF_ERROR(
        ParseClosedBody("if", at, {"endif"}, &else_body, &end));
    stmt->branches.emplace_back(nullptr, std::move(else_body));
    ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }
}

Result<std::unique_ptr<Stmt>> Parser::ParseFor(Position at) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = Stmt::Kind::kFor;
  stmt->at = at;
  const bool parenthesized = SkipOp("(");
  do {
    ATTN_ASSIGN_OR_RETURN(std::string target, ExpectName());
    stmt->targets.push_back(std::move(target));
  } while (SkipOp(","));
  if (parenthesized) ATTN_RETURN_IF_ERROR(ExpectOp(")"));
  if (!SkipName("in")) return Unexpected("'in'");
  ATTN_ASSIGN_OR_RETURN(stmt->expr, ParseExpression(false));
  if (SkipName("if")) {
    ATTN_ASSIGN_OR_RETURN(stmt->filter, ParseExpression(false));
  }
  if (IsName("recursive")) {
    return ErrorAt(Peek().at, "unsupported: recursive for loops");
  }
  ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  ++loop_depth_;
  Status status =
      ParseClosedBody("for", at, {"else", "endfor"}, &stmt->body, &end);
  --loop_depth_;
  ATTN_RETURN_IF_ERROR(status);
  ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  if (end == "else") {
    ATTN_RETURN_IF_ERROR(
        ParseClosedBody("for", at, {"endfor"}, &stmt->else_body, &end));
    ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  }
  return stmt;
}

Result<std::unique_ptr<Stmt>> Parser::ParseSet(Position at) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = Stmt::Kind::kSet;
  stmt->at = at;
  ATTN_ASSIGN_OR_RETURN(std::string target, ExpectName());
  stmt->targets.push_back(std::move(target));
  if (SkipOp(".")) {
    ATTN_ASSIGN_OR_RETURN(stmt->attribute, ExpectName());
  } else {
    while (SkipOp(",")) {
      ATTN_ASSIGN_OR_RETURN(target, ExpectName());
      stmt->targets.push_back(std::move(target));
    }
  }
  if (Peek().kind == Token::Kind::kBlockEnd && stmt->targets.size() == 1 &&
      stmt->attribute.empty()) {
    Next();
    stmt->kind = Stmt::Kind::kSetBlock;
    std::string end;
    ATTN_RETURN_IF_ERROR(
        ParseClosedBody("set", at, {"endset"}, &stmt->body, &end));
    ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }
  ATTN_RETURN_IF_ERROR(ExpectOp("="));
  ATTN_ASSIGN_OR_RETURN(stmt->expr, ParseTupleOrExpression());
  ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

Result<std::unique_ptr<Stmt>> Parser::ParseMacro(Position at) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = Stmt::Kind::kMacro;
  stmt->at = at;
  ATTN_ASSIGN_OR_RETURN(stmt->text, ExpectName());
  ATTN_RETURN_IF_ERROR(ExpectOp("("));
  while (!SkipOp(")")) {
    if (!stmt->params.empty()) ATTN_RETURN_IF_ERROR(ExpectOp(","));
    if (SkipOp(")")) break;
    ATTN_ASSIGN_OR_RETURN(std::string name, ExpectName());
    ExprPtr default_value;
    if (SkipOp("=")) {
      ATTN_ASSIGN_OR_RETURN(default_value, ParseExpression());
    }
    stmt->params.emplace_back(std::move(name), std::move(default_value));
  }
  ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  const int outer_loops = loop_depth_;
  loop_depth_ = 0;  // a macro body cannot break its caller's loop
  std::string end;
  Status status = ParseClosedBody("macro", at, {"endmacro"}, &stmt->body, &end);
  loop_depth_ = outer_loops;
  ATTN_RETURN_IF_ERROR(status);
  ATTN_RETURN_IF_ERROR(ExpectBlockEnd());
  return stmt;
}

Result<ExprPtr> Parser::ParseExpression(bool with_condition) {
  DepthGuard guard(&depth_);
  ATTN_RETURN_IF_ERROR(CheckDepth());
  ATTN_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (with_condition && IsName("if")) {
    auto condition = MakeExpr(Expr::Kind::kCondition, Next().at);
    condition->args.push_back(std::move(expr));
    ATTN_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    condition->args.push_back(std::move(test));
    ExprPtr otherwise;
    if (SkipName("else")) {
      ATTN_ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    condition->args.push_back(std::move(otherwise));
    expr = std::move(condition);
  }
  return expr;
}

// An expression, or a tuple of them written without parentheses: a, b.
Result<ExprPtr> Parser::ParseTupleOrExpression() {
  const Position at = Peek().at;
  ATTN_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
  if (!IsOp(",")) return first;
  auto tuple = MakeExpr(Expr::Kind::kTuple, at);
  tuple->args.push_back(std::move(first));
  while (SkipOp(",")) {
    if (Peek().kind == Token::Kind::kBlockEnd ||
        Peek().kind == Token::Kind::kVarEnd) {
      break;
    }
    ATTN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    tuple->args.push_back(std::move(item));
  }
  return tuple;
}

Result<ExprPtr> Parser::ParseOr() {
  ATTN_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    auto node = MakeExpr(Expr::Kind::kOr, Next().at);
    ATTN_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

Result<ExprPtr> Parser::ParseAnd() {
  ATTN_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    auto node = MakeExpr(Expr::Kind::kAnd, Next().at);
    ATTN_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

Result<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  DepthGuard guard(&depth_);
  ATTN_RETURN_IF_ERROR(CheckDepth());
  auto node = MakeExpr(Expr::Kind::kUnary, Next().at, "not");
  ATTN_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  node->args.push_back(std::move(operand));
  return node;
}

Result<ExprPtr> Parser::ParseCompare() {
  ATTN_ASSIGN_OR_RETURN(ExprPtr left, ParseBinaryLevel(0));
  static constexpr std::string_view kComparisons[] = {"==", "!=", "<",
                                                      ">",  "<=", ">="};
  std::string op;
  if (Peek().kind == Token::Kind::kOperator &&
      std::find(std::begin(kComparisons), std::end(kComparisons),
                Peek().text) != std::end(kComparisons)) {
    op = Peek().text;
  } else if (IsName("in")) {
    op = "in";
  } else if (IsName("not") && IsName("in", 1)) {
    op = "not in";
    Next();
  } else {
    return left;
  }
  auto node = MakeExpr(Expr::Kind::kBinary, Next().at, op);
  ATTN_ASSIGN_OR_RETURN(ExprPtr right, ParseBinaryLevel(0));
  node->args.push_back(std::move(left));
  node->args.push_back(std::move(right));
  if (Peek().kind == Token::Kind::kOperator &&
      std::find(std::begin(kComparisons), std::end(kComparisons),
                Peek().text) != std::end(kComparisons)) {
    return ErrorAt(Peek().at, "unsupported: chained comparison");
  }
  return node;
}

// Jinja2's arithmetic levels, loosest first: + -, then ~, then * / // %,
// then **; operands of the last are unary expressions.
Result<ExprPtr> Parser::ParseBinaryLevel(int level) {
  static const std::vector<std::vector<std::string_view>> kLevels = {
      {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == static_cast<int>(kLevels.size())) return ParseUnary(true);
  ATTN_ASSIGN_OR_RETURN(ExprPtr left, ParseBinaryLevel(level + 1));
  const auto& ops = kLevels[static_cast<size_t>(level)];
  while (Peek().kind == Token::Kind::kOperator &&
         std::find(ops.begin(), ops.end(), Peek().text) != ops.end()) {
    const Position at = Peek().at;
    auto node = MakeExpr(Expr::Kind::kBinary, at, Next().text);
    ATTN_ASSIGN_OR_RETURN(ExprPtr right, ParseBinaryLevel(level + 1));
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

Result<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(&depth_);
  ATTN_RETURN_IF_ERROR(CheckDepth());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Position at = Peek().at;
    node = MakeExpr(Expr::Kind::kUnary, at, Next().text);
    ATTN_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->args.push_back(std::move(operand));
  } else {
    ATTN_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ATTN_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) return ParseFilterExpr(std::move(node));
  return node;
}

Result<ExprPtr> Parser::ParsePrimary() {
  const Token& token = Peek();
  const Position at = token.at;
  if (token.kind == Token::Kind::kName) {
    const std::string name = Next().text;
    auto literal = MakeExpr(Expr::Kind::kLiteral, at);
    if (name == "true" || name == "True") {
      literal->literal = Value::Bool(true);
    } else if (name == "false" || name == "False") {
      literal->literal = Value::Bool(false);
    } else if (name == "none" || name == "None") {
      literal->literal = Value::None();
    } else {
      return MakeExpr(Expr::Kind::kName, at, name);
    }
    return literal;
  }
  if (token.kind == Token::Kind::kString) {
    std::string text;
    while (Peek().kind == Token::Kind::kString) text += Next().text;
    auto literal = MakeExpr(Expr::Kind::kLiteral, at);
    literal->literal = Value::String(std::move(text));
    return literal;
  }
  if (token.kind == Token::Kind::kInt || token.kind == Token::Kind::kFloat) {
    auto literal = MakeExpr(Expr::Kind::kLiteral, at);
    const std::string& digits = Next().text;
    errno = 0;
    const long long parsed = std::strtoll(digits.c_str(), nullptr, 10);
    if (token.kind == Token::Kind::kFloat) {
      literal->literal = Value::Float(std::strtod(digits.c_str(), nullptr));
    } else if (errno == ERANGE) {  // Python's ints have no bound; ours do
      return ErrorAt(at, "unsupported: an integer literal beyond 64 bits");
    } else {
      literal->literal = Value::Int(parsed);
    }
    return literal;
  }
  if (SkipOp("(")) {
    if (SkipOp(")")) return MakeExpr(Expr::Kind::kTuple, at);
    ATTN_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (SkipOp(")")) return first;
    ATTN_RETURN_IF_ERROR(ExpectOp(","));
    ATTN_ASSIGN_OR_RETURN(ExprPtr tuple,
                          ParseSequence(Expr::Kind::kTuple, ")"));
    tuple->args.insert(tuple->args.begin(), std::move(first));
    tuple->at = at;
    return tuple;
  }
  if (SkipOp("[")) return ParseSequence(Expr::Kind::kList, "]");
  if (SkipOp("{")) return ParseDict();
  return Unexpected("an expression");
}

// Items separated by commas (a trailing one allowed) up to `close`.
Result<ExprPtr> Parser::ParseSequence(Expr::Kind kind, std::string_view close) {
  auto sequence = MakeExpr(kind, Peek().at);
  while (!SkipOp(close)) {
    if (!sequence->args.empty()) {
      ATTN_RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp(close)) break;
    }
    ATTN_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    sequence->args.push_back(std::move(item));
  }
  return sequence;
}

Result<ExprPtr> Parser::ParseDict() {
  auto dict = MakeExpr(Expr::Kind::kDict, Peek().at);
  while (!SkipOp("}")) {
    if (!dict->args.empty()) {
      ATTN_RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp("}")) break;
    }
    ATTN_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    ATTN_RETURN_IF_ERROR(ExpectOp(":"));
    ATTN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    dict->args.push_back(std::move(key));
    dict->args.push_back(std::move(value));
  }
  return dict;
}

Result<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  for (;;) {
    if (IsOp(".")) {
      const Position at = Next().at;
      if (Peek().kind == Token::Kind::kInt) {
        auto item = MakeExpr(Expr::Kind::kItem, at);
        auto index = MakeExpr(Expr::Kind::kLiteral, Peek().at);
        index->literal = Value::Int(std::atoll(Next().text.c_str()));
        item->args.push_back(std::move(node));
        item->args.push_back(std::move(index));
        node = std::move(item);
        continue;
      }
      ATTN_ASSIGN_OR_RETURN(std::string name, ExpectName());
      auto attribute = MakeExpr(Expr::Kind::kAttribute, at, std::move(name));
      attribute->args.push_back(std::move(node));
      node = std::move(attribute);
    } else if (IsOp("[")) {
      ATTN_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, node->at);
      call->args.push_back(std::move(node));
      ATTN_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

// [index] or [start:stop:step] with any part left out.
Result<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Position at = Next().at;
  ExprPtr parts[3];
  if (!IsOp(":")) {
    ATTN_ASSIGN_OR_RETURN(parts[0], ParseExpression());
    if (SkipOp("]")) {
      auto item = MakeExpr(Expr::Kind::kItem, at);
      item->args.push_back(std::move(node));
      item->args.push_back(std::move(parts[0]));
      return item;
    }
  }
  ATTN_RETURN_IF_ERROR(ExpectOp(":"));
  if (!IsOp("]") && !IsOp(":")) {
    ATTN_ASSIGN_OR_RETURN(parts[1], ParseExpression());
  }
  if (SkipOp(":") && !IsOp("]")) {
    ATTN_ASSIGN_OR_RETURN(parts[2], ParseExpression());
  }
  ATTN_RETURN_IF_ERROR(ExpectOp("]"));
  auto slice = MakeExpr(Expr::Kind::kSlice, at);
  slice->args.push_back(std::move(node));
  for (ExprPtr& part : parts) slice->args.push_back(std::move(part));
  return slice;
}

Result<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  for (;;) {
    if (IsOp("|")) {
      ATTN_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (IsName("is")) {
      ATTN_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, Peek().at);
      call->args.push_back(std::move(node));
      ATTN_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseFilter(ExprPtr node) {
  Next();  // |
  const Position at = Peek().at;
  ATTN_ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (!IsKnownFilter(name)) return ErrorAt(at, "unknown filter '" + name + "'");
  auto filter = MakeExpr(Expr::Kind::kFilter, at, std::move(name));
  filter->args.push_back(std::move(node));
  if (IsOp("(")) ATTN_RETURN_IF_ERROR(ParseCallArgs(filter.get()));
  return filter;
}

Result<ExprPtr> Parser::ParseTest(ExprPtr node) {
  Next();  // is
  const bool negated = SkipName("not");
  const Position at = Peek().at;
  ATTN_ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (!IsKnownTest(name)) return ErrorAt(at, "unknown test '" + name + "'");
  auto test = MakeExpr(Expr::Kind::kTest, at, std::move(name));
  test->negated = negated;
  test->args.push_back(std::move(node));
  const Token::Kind next = Peek().kind;
  if (IsOp("(")) {
    ATTN_RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if ((next == Token::Kind::kName || next == Token::Kind::kString ||
              next == Token::Kind::kInt || next == Token::Kind::kFloat ||
              IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return ErrorAt(Peek().at, "tests cannot be chained");
    ATTN_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    ATTN_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  return test;
}

// (positional..., name=value...) after the callee or filter in call->args.
Status Parser::ParseCallArgs(Expr* call) {
  Next();  // (
  bool first = true;
  while (!SkipOp(")")) {
    if (!first) {
      ATTN_RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) {
      return ErrorAt(Peek().at, "unsupported: *args and **kwargs in calls");
    }
    if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
      std::string name = Next().text;
      Next();  // =
      ATTN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->kwargs.emplace_back(std::move(name), std::move(value));
      continue;
    }
    if (!call->kwargs.empty()) {
      return ErrorAt(Peek().at, "positional argument after keyword argument");
    }
    ATTN_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    call->args.push_back(std::move(value));
  }
  return {};
}

}  // namespace

Result<Body> Parse(const std::vector<Token>& tokens, ParseLimits limits) {
  return Parser(tokens, limits).ParseTemplate();
}

}  // namespace attn::jinja
