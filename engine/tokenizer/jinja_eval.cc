#include "engine/tokenizer/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

namespace attn::jinja {
namespace {

// Variables by name; a for-loop iteration and a macro call each get their
// own, so that {% set %} inside them does not leak out, as in Jinja2.
class Scope {
 public:
  explicit Scope(const Scope* parent, const Dict* globals = nullptr)
      : parent_(parent), globals_(globals) {}

  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent_) {
      const auto found = s->vars_.find(name);
      if (found != s->vars_.end()) return &found->second;
      if (s->globals_ != nullptr) {
        if (const Value* global = s->globals_->Find(name)) return global;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value value) {
    vars_[name] = std::move(value);
  }

 private:
  const Scope* parent_;
  const Dict* globals_;
  std::unordered_map<std::string, Value> vars_;
};

enum class Flow { kNormal, kBreak, kContinue };

// Prefixes a message with the place that failed, keeping its code;
// messages that already carry one pass through.
Status Locate(Position at, const Status& status) {
  if (status.ok() || status.message().rfind("chat template ", 0) == 0) {
    return status;
  }
  return {status.code(), ErrorAt(at, status.message()).message()};
}

Status At(const Expr& expr, const Status& status) {
  return Locate(expr.at, status);
}

Result<Value> At(const Expr& expr, Result<Value> result) {
  if (result.ok()) return result;
  return At(expr, result.status());
}

class Renderer {
 public:
  Renderer(const Dict& globals, const RenderLimits& limits)
      : budget_(limits), globals_(globals), root_(nullptr, &globals_) {}

  Result<std::string> Run(const Body& body) {
    Flow flow = Flow::kNormal;
    ATTN_RETURN_IF_ERROR(Exec(body, &root_, &flow));
    return std::move(out_);
  }

 private:
  Status Write(const std::string& text) {
    ATTN_RETURN_IF_ERROR(budget_.CheckSize(out_.size() + text.size()));
    ATTN_RETURN_IF_ERROR(budget_.Charge(text.size() / 64));
    out_ += text;
    return {};
  }

  Status Exec(const Body& body, Scope* scope, Flow* flow);
  Status ExecStmt(const Stmt& stmt, Scope* scope, Flow* flow);
  Status ExecIf(const Stmt& stmt, Scope* scope, Flow* flow);
  Status ExecFor(const Stmt& stmt, Scope* scope);
  Status ExecSet(const Stmt& stmt, Scope* scope);
  Status ExecSetBlock(const Stmt& stmt, Scope* scope);
  Status Assign(const Stmt& stmt, const std::vector<std::string>& targets,
                const Value& value, Scope* scope);
  Value MakeMacro(const Stmt& stmt);
  Result<Value> CallMacro(const Stmt& stmt, CallArgs& args);
  Result<std::string> Capture(const Body& body, Scope* scope);

  Result<Value> Eval(const Expr& expr, Scope* scope);
  Result<Value> EvalSequence(const Expr& expr, Scope* scope);
  Result<Value> EvalDict(const Expr& expr, Scope* scope);
  Result<Value> EvalSlice(const Expr& expr, Scope* scope);
  Result<CallArgs> EvalArgs(const Expr& expr, Scope* scope);
  Result<Value> EvalCall(const Expr& expr, Scope* scope);
  Result<Value> EvalFilter(const Expr& expr, Scope* scope);
  Result<Value> EvalTest(const Expr& expr, Scope* scope);
  Result<Value> EvalUnary(const Expr& expr, Scope* scope);
  Result<Value> EvalBinary(const Expr& expr, Scope* scope);
  Result<Value> Arithmetic(const std::string& op, const Value& a,
                           const Value& b);
  Result<Value> Add(const Value& a, const Value& b);
  Result<Value> Repeat(const Value& sequence, const Value& count);

  Budget budget_;
  const Dict& globals_;
  Scope root_;
  std::string out_;
  int call_depth_ = 0;
};

Status Renderer::Exec(const Body& body, Scope* scope, Flow* flow) {
  for (const auto& stmt : body) {
    ATTN_RETURN_IF_ERROR(Locate(stmt->at, ExecStmt(*stmt, scope, flow)));
    if (*flow != Flow::kNormal) return {};
  }
  return {};
}

Status Renderer::ExecStmt(const Stmt& stmt, Scope* scope, Flow* flow) {
  ATTN_RETURN_IF_ERROR(budget_.Charge(1));
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      return Write(stmt.text);
    case Stmt::Kind::kOutput: {
      ATTN_ASSIGN_OR_RETURN(const Value value, Eval(*stmt.expr, scope));
      if (value.type() == Value::Type::kCallable ||
          value.type() == Value::Type::kGenerator) {
        return ErrorAt(stmt.at, "unsupported: printing a " + value.TypeName() +
                                    " (Jinja2 prints its address)");
      }
      return Write(value.PyStr());
    }
    case Stmt::Kind::kIf:
      return ExecIf(stmt, scope, flow);
    case Stmt::Kind::kFor:
      return ExecFor(stmt, scope);
    case Stmt::Kind::kSet:
      return ExecSet(stmt, scope);
    case Stmt::Kind::kSetBlock:
      return ExecSetBlock(stmt, scope);
    case Stmt::Kind::kMacro:
      scope->Set(stmt.text, MakeMacro(stmt));
      return {};
    case Stmt::Kind::kBreak:
      *flow = Flow::kBreak;
      return {};
    case Stmt::Kind::kContinue:
      *flow = Flow::kContinue;
      return {};
  }
  return {};
}

Status Renderer::ExecIf(const Stmt& stmt, Scope* scope, Flow* flow) {
  for (const auto& [condition, body] : stmt.branches) {
    if (condition != nullptr) {
      ATTN_ASSIGN_OR_RETURN(const Value test, Eval(*condition, scope));
      if (!test.Truthy()) continue;
    }
    return Exec(body, scope, flow);
  }
  return {};
}

// loop.index, loop.first... for item `i` of `items`.
Value LoopObject(const List& items, size_t i) {
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t index = static_cast<int64_t>(i);
  Dict loop;
  loop.Set("index", Value::Int(index + 1));
  loop.Set("index0", Value::Int(index));
  loop.Set("revindex", Value::Int(n - index));
  loop.Set("revindex0", Value::Int(n - index - 1));
  loop.Set("first", Value::Bool(i == 0));
  loop.Set("last", Value::Bool(index == n - 1));
  loop.Set("length", Value::Int(n));
  loop.Set("depth", Value::Int(1));
  loop.Set("depth0", Value::Int(0));
  loop.Set("previtem", i > 0 ? items[i - 1]
                             : Value::Undefined("there is no previous item"));
  loop.Set("nextitem", index + 1 < n
                           ? items[i + 1]
                           : Value::Undefined("there is no next item"));
  return Value::MakeDict(std::move(loop));
}

Status Renderer::ExecFor(const Stmt& stmt, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value iterable, Eval(*stmt.expr, scope));
  auto all = Iterate(iterable);
  if (!all.ok()) return At(*stmt.expr, all.status());
  ATTN_RETURN_IF_ERROR(budget_.Charge(all->size()));
  List items;
  for (const Value& item : *all) {
    if (stmt.filter != nullptr) {
      Scope test_scope(scope);
      ATTN_RETURN_IF_ERROR(Assign(stmt, stmt.targets, item, &test_scope));
      ATTN_ASSIGN_OR_RETURN(const Value keep, Eval(*stmt.filter, &test_scope));
      if (!keep.Truthy()) continue;
    }
    items.push_back(item);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    ATTN_RETURN_IF_ERROR(budget_.Charge(1));
    Scope iteration(scope);
    iteration.Set("loop", LoopObject(items, i));
    ATTN_RETURN_IF_ERROR(Assign(stmt, stmt.targets, items[i], &iteration));
    Flow flow = Flow::kNormal;
    ATTN_RETURN_IF_ERROR(Exec(stmt.body, &iteration, &flow));
    if (flow == Flow::kBreak) break;
  }
  if (!items.empty()) return {};
  Flow flow = Flow::kNormal;
  return Exec(stmt.else_body, scope, &flow);
}

Status Renderer::Assign(const Stmt& stmt,
                        const std::vector<std::string>& targets,
                        const Value& value, Scope* scope) {
  if (targets.size() == 1) {
    scope->Set(targets[0], value);
    return {};
  }
  if (!value.is_sequence() && !value.is_string() && !value.is_iterator()) {
    return ErrorAt(stmt.at, "cannot unpack a " + value.TypeName() + " into " +
                                std::to_string(targets.size()) + " names");
  }
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  if (items.size() != targets.size()) {
    return ErrorAt(stmt.at, "cannot unpack " + std::to_string(items.size()) +
                                " values into " +
                                std::to_string(targets.size()) + " names");
  }
  for (size_t i = 0; i < items.size(); ++i) scope->Set(targets[i], items[i]);
  return {};
}

Status Renderer::ExecSet(const Stmt& stmt, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value value, Eval(*stmt.expr, scope));
  if (stmt.attribute.empty()) return Assign(stmt, stmt.targets, value, scope);
  const Value* target = scope->Find(stmt.targets[0]);
  if (target == nullptr || target->type() != Value::Type::kNamespace) {
    return ErrorAt(stmt.at, "cannot set '" + stmt.attribute + "' on " +
                                (target ? target->TypeName() : "undefined") +
                                " '" + stmt.targets[0] +
                                "': only on a namespace()");
  }
  // Namespaces are the only values that change, so these two keep every
  // value acyclic and its nesting bounded.
  if (value.ContainsNamespace()) {
    return ErrorAt(stmt.at, "unsupported: a namespace stored in a namespace");
  }
  if (value.depth() >= kMaxValueDepth) {
    return ErrorAt(stmt.at, "a value nested deeper than " +
                                std::to_string(kMaxValueDepth) + " levels");
  }
  Value shared = *target;  // namespaces share their dict between copies
  shared.mutable_dict().Set(stmt.attribute, value);
  return {};
}

// Renders `body` into a string instead of the output.
Result<std::string> Renderer::Capture(const Body& body, Scope* scope) {
  std::string outer = std::move(out_);
  out_.clear();
  Flow flow = Flow::kNormal;
  Status status = Exec(body, scope, &flow);
  std::string captured = std::move(out_);
  out_ = std::move(outer);
  ATTN_RETURN_IF_ERROR(status);
  return captured;
}

Status Renderer::ExecSetBlock(const Stmt& stmt, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, scope));
  scope->Set(stmt.targets[0], Value::String(std::move(text)));
  return {};
}

Value Renderer::MakeMacro(const Stmt& stmt) {
  return Value::Function(stmt.text, [this, &stmt](CallArgs& args) {
    return CallMacro(stmt, args);
  });
}

// Binds the arguments by position, then by name, then defaults; the body
// sees them and the template's top level, and renders to the result.
Result<Value> Renderer::CallMacro(const Stmt& stmt, CallArgs& args) {
  if (call_depth_ >= budget_.limits().max_call_depth) {
    return ErrorAt(stmt.at,
                   "macro calls nested deeper than " +
                       std::to_string(budget_.limits().max_call_depth));
  }
  if (args.positional.size() > stmt.params.size()) {
    return ErrorAt(stmt.at, "macro '" + stmt.text + "' takes " +
                                std::to_string(stmt.params.size()) +
                                " arguments");
  }
  Scope frame(&root_);
  for (size_t i = 0; i < stmt.params.size(); ++i) {
    const auto& [name, default_value] = stmt.params[i];
    Value value = Value::Undefined("'" + name + "' is undefined");
    if (default_value != nullptr) {
      ATTN_ASSIGN_OR_RETURN(value, Eval(*default_value, &frame));
    }
    if (i < args.positional.size()) value = args.positional[i];
    frame.Set(name, std::move(value));
  }
  for (auto& [name, value] : args.keyword) {
    bool known = false;
    for (const auto& param : stmt.params) known |= param.first == name;
    if (!known) {
      return ErrorAt(
          stmt.at, "macro '" + stmt.text + "' has no parameter '" + name + "'");
    }
    frame.Set(name, value);
  }
  ++call_depth_;
  auto text = Capture(stmt.body, &frame);
  --call_depth_;
  if (!text.ok()) return text.status();
  return Value::String(std::move(*text));
}

Result<Value> Renderer::Eval(const Expr& expr, Scope* scope) {
  ATTN_RETURN_IF_ERROR(budget_.Charge(1));
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kName: {
      const Value* found = scope->Find(expr.name);
      if (found != nullptr) return *found;
      return Value::Undefined("'" + expr.name + "' is undefined");
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
      return EvalSequence(expr, scope);
    case Expr::Kind::kDict:
      return EvalDict(expr, scope);
    case Expr::Kind::kAttribute: {
      ATTN_ASSIGN_OR_RETURN(const Value object, Eval(*expr.args[0], scope));
      if (object.is_undefined()) {
        return ErrorAt(expr.at, object.undefined_what());
      }
      return GetAttribute(budget_, object, expr.name);
    }
    case Expr::Kind::kItem: {
      ATTN_ASSIGN_OR_RETURN(const Value object, Eval(*expr.args[0], scope));
      ATTN_ASSIGN_OR_RETURN(const Value key, Eval(*expr.args[1], scope));
      if (object.is_undefined()) {
        return ErrorAt(expr.at, object.undefined_what());
      }
      return GetItem(budget_, object, key);
    }
    case Expr::Kind::kSlice:
      return EvalSlice(expr, scope);
    case Expr::Kind::kCall:
      return EvalCall(expr, scope);
    case Expr::Kind::kFilter:
      return EvalFilter(expr, scope);
    case Expr::Kind::kTest:
      return EvalTest(expr, scope);
    case Expr::Kind::kUnary:
      return EvalUnary(expr, scope);
    case Expr::Kind::kBinary:
      return EvalBinary(expr, scope);
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      ATTN_ASSIGN_OR_RETURN(Value left, Eval(*expr.args[0], scope));
      if (left.Truthy() == (expr.kind == Expr::Kind::kOr)) return left;
      return Eval(*expr.args[1], scope);
    }
    case Expr::Kind::kCondition: {
      ATTN_ASSIGN_OR_RETURN(const Value test, Eval(*expr.args[1], scope));
      if (test.Truthy()) return Eval(*expr.args[0], scope);
      if (expr.args[2] == nullptr) {
        return Value::Undefined("the inline if's condition was false");
      }
      return Eval(*expr.args[2], scope);
    }
  }
  return Value();
}

Result<Value> Renderer::EvalSequence(const Expr& expr, Scope* scope) {
  ATTN_RETURN_IF_ERROR(budget_.CheckSize(expr.args.size()));
  List items;
  items.reserve(expr.args.size());
  for (const auto& item : expr.args) {
    ATTN_ASSIGN_OR_RETURN(Value value, Eval(*item, scope));
    items.push_back(std::move(value));
  }
  return Value::MakeList(std::move(items), expr.kind == Expr::Kind::kTuple
                                               ? Value::Type::kTuple
                                               : Value::Type::kList);
}

Result<Value> Renderer::EvalDict(const Expr& expr, Scope* scope) {
  Dict dict;
  for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
    ATTN_ASSIGN_OR_RETURN(const Value key, Eval(*expr.args[i], scope));
    if (!key.is_string()) {
      return ErrorAt(expr.args[i]->at, "unsupported: a dict key that is a " +
                                           key.TypeName() + ", not a str");
    }
    ATTN_ASSIGN_OR_RETURN(Value value, Eval(*expr.args[i + 1], scope));
    dict.Set(key.str(), std::move(value));
  }
  return Value::MakeDict(std::move(dict));
}

Result<Value> Renderer::EvalSlice(const Expr& expr, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value object, Eval(*expr.args[0], scope));
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    if (expr.args[i + 1] == nullptr) continue;
    ATTN_ASSIGN_OR_RETURN(parts[i], Eval(*expr.args[i + 1], scope));
  }
  const auto part = [&](int i) {
    return expr.args[i + 1] != nullptr ? &parts[i] : nullptr;
  };
  return At(expr, GetSlice(object, part(0), part(1), part(2)));
}

Result<CallArgs> Renderer::EvalArgs(const Expr& expr, Scope* scope) {
  CallArgs args;
  for (size_t i = 1; i < expr.args.size(); ++i) {
    ATTN_ASSIGN_OR_RETURN(Value value, Eval(*expr.args[i], scope));
    args.positional.push_back(std::move(value));
  }
  for (const auto& [name, arg] : expr.kwargs) {
    ATTN_ASSIGN_OR_RETURN(Value value, Eval(*arg, scope));
    args.keyword.emplace_back(name, std::move(value));
  }
  return args;
}

Result<Value> Renderer::EvalCall(const Expr& expr, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value callee, Eval(*expr.args[0], scope));
  if (callee.is_undefined()) return ErrorAt(expr.at, callee.undefined_what());
  if (callee.type() != Value::Type::kCallable) {
    return ErrorAt(expr.at,
                   "'" + callee.TypeName() + "' object is not callable");
  }
  ATTN_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, scope));
  return At(expr, callee.callable().call(args));
}

Result<Value> Renderer::EvalFilter(const Expr& expr, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value operand, Eval(*expr.args[0], scope));
  ATTN_ASSIGN_OR_RETURN(const CallArgs args, EvalArgs(expr, scope));
  return At(expr, ApplyFilter(budget_, expr.name, operand, args));
}

Result<Value> Renderer::EvalTest(const Expr& expr, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value operand, Eval(*expr.args[0], scope));
  ATTN_ASSIGN_OR_RETURN(const CallArgs args, EvalArgs(expr, scope));
  auto passed = ApplyTest(expr.name, operand, args);
  if (!passed.ok()) return At(expr, passed.status());
  return Value::Bool(*passed != expr.negated);
}

Result<Value> Renderer::EvalUnary(const Expr& expr, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value operand, Eval(*expr.args[0], scope));
  if (expr.name == "not") return Value::Bool(!operand.Truthy());
  if (!operand.is_number()) {
    return ErrorAt(expr.at, "bad operand type for unary " + expr.name + ": '" +
                                operand.TypeName() + "'");
  }
  if (expr.name == "+") {
    return operand.type() == Value::Type::kFloat ? operand
                                                 : Value::Int(operand.as_int());
  }
  if (operand.type() == Value::Type::kFloat) {
    return Value::Float(-operand.as_double());
  }
  if (operand.as_int() == INT64_MIN)
    return ErrorAt(expr.at, "integer overflow");
  return Value::Int(-operand.as_int());
}

Result<Value> Renderer::EvalBinary(const Expr& expr, Scope* scope) {
  ATTN_ASSIGN_OR_RETURN(const Value a, Eval(*expr.args[0], scope));
  ATTN_ASSIGN_OR_RETURN(const Value b, Eval(*expr.args[1], scope));
  const std::string& op = expr.name;
  if (op == "in" || op == "not in") {
    auto contains = Contains(b, a);
    if (!contains.ok()) return At(expr, contains.status());
    return Value::Bool(*contains == (op == "in"));
  }
  if (op == "==" || op == "!=" || op == "<" || op == ">" || op == "<=" ||
      op == ">=") {
    CallArgs args;
    args.positional.push_back(b);
    auto result = ApplyTest(op, a, args);
    if (!result.ok()) return At(expr, result.status());
    return Value::Bool(*result);
  }
  if (op == "~") {
    std::string text = a.PyStr() + b.PyStr();
    ATTN_RETURN_IF_ERROR(At(expr, budget_.CheckSize(text.size())));
    ATTN_RETURN_IF_ERROR(budget_.Charge(text.size() / 64));
    return Value::String(std::move(text));
  }
  if (a.is_undefined()) return ErrorAt(expr.at, a.undefined_what());
  if (b.is_undefined()) return ErrorAt(expr.at, b.undefined_what());
  return At(expr, Arithmetic(op, a, b));
}

Result<Value> Renderer::Add(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string() && (a.is_markup() || b.is_markup())) {
    const auto escaped = [](const Value& v) {
      return v.is_markup() ? v.str() : HtmlEscape(v.str());
    };
    std::string text = escaped(a) + escaped(b);
    ATTN_RETURN_IF_ERROR(budget_.CheckSize(text.size()));
    return Value::Markup(std::move(text));
  }
  if (a.is_string() && b.is_string()) {
    ATTN_RETURN_IF_ERROR(budget_.CheckSize(a.str().size() + b.str().size()));
    ATTN_RETURN_IF_ERROR(
        budget_.Charge((a.str().size() + b.str().size()) / 64));
    return Value::String(a.str() + b.str());
  }
  if (a.is_sequence() && a.type() == b.type()) {
    ATTN_RETURN_IF_ERROR(budget_.CheckSize(a.list().size() + b.list().size()));
    ATTN_RETURN_IF_ERROR(budget_.Charge(a.list().size() + b.list().size()));
    List items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return Value::MakeList(std::move(items), a.type());
  }
  return InvalidArgument("unsupported operand types for +: '" + a.TypeName() +
                         "' and '" + b.TypeName() + "'");
}

// str * int and list * int, as Python repeats them.
Result<Value> Renderer::Repeat(const Value& sequence, const Value& count) {
  const int64_t n = std::max<int64_t>(count.as_int(), 0);
  const size_t unit =
      sequence.is_string() ? sequence.str().size() : sequence.list().size();
  if (unit > 0 &&
      static_cast<uint64_t>(n) > budget_.limits().max_output_bytes / unit) {
    ATTN_RETURN_IF_ERROR(
        budget_.CheckSize(budget_.limits().max_output_bytes + 1));
  }
  ATTN_RETURN_IF_ERROR(budget_.Charge(unit * static_cast<size_t>(n) / 64));
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += sequence.str();
    return sequence.is_markup() ? Value::Markup(std::move(out))
                                : Value::String(std::move(out));
  }
  List items;
  for (int64_t i = 0; i < n; ++i) {
    items.insert(items.end(), sequence.list().begin(), sequence.list().end());
  }
  return Value::MakeList(std::move(items), sequence.type());
}

namespace {

Result<Value> IntArithmetic(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
  if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
  if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
  if (op == "//" || op == "%") {
    if (y == 0) return InvalidArgument("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return InvalidArgument("integer overflow");
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {  // floor, as Python
      --q;
      m += y;
    }
    r = op == "//" ? q : m;
  }
  if (op == "**") {  // by squaring; y >= 0 here
    r = 1;
    for (int64_t base = x, e = y; e > 0 && !overflow; e >>= 1) {
      if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
      if (e > 1) overflow |= __builtin_mul_overflow(base, base, &base);
    }
  }
  if (overflow) return InvalidArgument("integer overflow");
  return Value::Int(r);
}

Result<Value> FloatArithmetic(const std::string& op, double x, double y) {
  if ((op == "/" || op == "//" || op == "%") && y == 0) {
    return InvalidArgument("float division by zero");
  }
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") return Value::Float(x / y);
  if (op == "//") return Value::Float(std::floor(x / y));
  if (op == "%") {
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::Float(m);
  }
  return Value::Float(std::pow(x, y));  // **
}

}  // namespace

Result<Value> Renderer::Arithmetic(const std::string& op, const Value& a,
                                   const Value& b) {
  if (op == "+" && !(a.is_number() && b.is_number())) return Add(a, b);
  if (op == "*" && (a.is_string() || a.is_sequence()) &&
      (b.type() == Value::Type::kInt || b.type() == Value::Type::kBool)) {
    return Repeat(a, b);
  }
  if (op == "*" && (b.is_string() || b.is_sequence()) &&
      (a.type() == Value::Type::kInt || a.type() == Value::Type::kBool)) {
    return Repeat(b, a);
  }
  if (!a.is_number() || !b.is_number()) {
    return InvalidArgument("unsupported operand types for " + op + ": '" +
                           a.TypeName() + "' and '" + b.TypeName() + "'");
  }
  const bool integers =
      a.type() != Value::Type::kFloat && b.type() != Value::Type::kFloat;
  if (integers && op != "/" && !(op == "**" && b.as_int() < 0)) {
    return IntArithmetic(op, a.as_int(), b.as_int());
  }
  return FloatArithmetic(op, a.as_double(), b.as_double());
}

}  // namespace

Result<std::string> Render(const Body& body, const Dict& globals,
                           const RenderLimits& limits) {
  return Renderer(globals, limits).Run(body);
}

}  // namespace attn::jinja
