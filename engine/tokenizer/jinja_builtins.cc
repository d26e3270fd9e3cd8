// Jinja2's filters and tests that chat templates use, transformers' tojson,
// raise_exception and strftime_now, and the sandbox's range limit.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <utility>

#include "engine/tokenizer/jinja_eval.h"

namespace attn::jinja {

Status Budget::Charge(size_t units) {
  steps_ += static_cast<int64_t>(units);
  if (steps_ <= limits_.max_steps) return {};
  return OutOfMemory("rendering took more than " +
                     std::to_string(limits_.max_steps) + " steps");
}

Status Budget::CheckSize(size_t size) const {
  if (size <= limits_.max_output_bytes) return {};
  return OutOfMemory("a value or the output passed " +
                     std::to_string(limits_.max_output_bytes) + " bytes");
}

namespace {

using FilterFn = Result<Value> (*)(Budget&, const Value&, const CallArgs&);

Result<std::string> TextOf(const Value& value, const char* filter) {
  if (value.is_string()) return value.str();
  if (value.type() == Value::Type::kCallable) {
    return InvalidArgument(std::string(filter) + ": cannot take a function");
  }
  return value.PyStr();
}

Result<Value> MakeString(Budget& budget, std::string text) {
  ATTN_RETURN_IF_ERROR(budget.CheckSize(text.size()));
  ATTN_RETURN_IF_ERROR(budget.Charge(text.size() / 64));
  return Value::String(std::move(text));
}

Result<Value> Length(Budget&, const Value& value, const CallArgs&) {
  switch (value.type()) {
    case Value::Type::kUndefined:
      return Value::Int(0);
    case Value::Type::kString:
      return Value::Int(
          static_cast<int64_t>(CodePointOffsets(value.str()).size()));
    case Value::Type::kList:
    case Value::Type::kTuple:
    case Value::Type::kView:
      return Value::Int(static_cast<int64_t>(value.list().size()));
    case Value::Type::kDict:
      return Value::Int(static_cast<int64_t>(value.dict().items.size()));
    default:
      return InvalidArgument("object of type '" + value.TypeName() +
                             "' has no len()");
  }
}

Result<Value> CaseFilter(Budget& budget, const Value& value,
                         const std::string& method) {
  ATTN_ASSIGN_OR_RETURN(const std::string text, TextOf(value, method.c_str()));
  const Value function = GetAttribute(budget, Value::String(text), method);
  CallArgs none;
  return function.callable().call(none);
}

Result<Value> Upper(Budget& b, const Value& v, const CallArgs&) {
  return CaseFilter(b, v, "upper");
}
Result<Value> Lower(Budget& b, const Value& v, const CallArgs&) {
  return CaseFilter(b, v, "lower");
}
Result<Value> Capitalize(Budget& b, const Value& v, const CallArgs&) {
  return CaseFilter(b, v, "capitalize");
}

Result<Value> Title(Budget&, const Value& value, const CallArgs&) {
  ATTN_ASSIGN_OR_RETURN(const std::string text, TextOf(value, "title"));
  return Value::String(PyChangeCase(text, CaseChange::kJinjaTitle));
}

Result<Value> Trim(Budget&, const Value& value, const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 1, "trim"));
  ATTN_ASSIGN_OR_RETURN(const std::string text, TextOf(value, "trim"));
  const Value* chars = FindArg(args, 0, "chars");
  if (chars == nullptr || chars->is_none()) {
    return Value::String(PyStrip(text, nullptr, true, true));
  }
  if (!chars->is_string()) return InvalidArgument("trim: chars must be a str");
  return Value::String(PyStrip(text, &chars->str(), true, true));
}

Result<Value> Default(Budget&, const Value& value, const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 2, "default"));
  const Value* fallback = FindArg(args, 0, "default_value");
  const Value* boolean = FindArg(args, 1, "boolean");
  const bool use_fallback =
      value.is_undefined() ||
      (boolean != nullptr && boolean->Truthy() && !value.Truthy());
  if (!use_fallback) return value;
  return fallback != nullptr ? *fallback : Value::String("");
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), which calls json.dumps with them.
Result<Value> ToJsonFilter(Budget& budget, const Value& value,
                           const CallArgs& args) {
  static constexpr std::string_view kParams[] = {"ensure_ascii", "indent",
                                                 "separators", "sort_keys"};
  for (const auto& [key, arg] : args.keyword) {
    if (std::find(std::begin(kParams), std::end(kParams), key) ==
        std::end(kParams)) {
      return InvalidArgument("tojson: unexpected argument '" + key + "'");
    }
  }
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 4, "tojson"));
  JsonStyle style;
  const Value* ensure_ascii = FindArg(args, 0, "ensure_ascii");
  const Value* indent = FindArg(args, 1, "indent");
  const Value* separators = FindArg(args, 2, "separators");
  const Value* sort_keys = FindArg(args, 3, "sort_keys");
  style.ensure_ascii = ensure_ascii != nullptr && ensure_ascii->Truthy();
  style.sort_keys = sort_keys != nullptr && sort_keys->Truthy();
  if (indent != nullptr && !indent->is_none()) {
    if (indent->type() != Value::Type::kInt || indent->as_int() < 0 ||
        indent->as_int() > 64) {
      return InvalidArgument("tojson: indent must be an integer in [0, 64]");
    }
    style.indent = static_cast<int>(indent->as_int());
    style.item_separator = ",";
  }
  if (separators != nullptr && !separators->is_none()) {
    if (!separators->is_sequence() || separators->list().size() != 2 ||
        !separators->list()[0].is_string() ||
        !separators->list()[1].is_string()) {
      return InvalidArgument("tojson: separators must be two strings");
    }
    style.item_separator = separators->list()[0].str();
    style.key_separator = separators->list()[1].str();
  }
  ATTN_ASSIGN_OR_RETURN(std::string json, ToJson(value, style));
  return MakeString(budget, std::move(json));
}

Result<Value> StringFilter(Budget& budget, const Value& value,
                           const CallArgs&) {
  ATTN_ASSIGN_OR_RETURN(std::string text, TextOf(value, "string"));
  return MakeString(budget, std::move(text));
}

// Python's int(text) or float(text): surrounding whitespace allowed, the
// whole rest must be the number.
bool ParseNumber(const std::string& text, bool integer, double* out) {
  const std::string trimmed = PyStrip(text, nullptr, true, true);
  if (trimmed.empty()) return false;
  char* end = nullptr;
  errno = 0;
  if (integer) {
    const long long parsed = std::strtoll(trimmed.c_str(), &end, 10);
    *out = static_cast<double>(parsed);
  } else {
    *out = std::strtod(trimmed.c_str(), &end);
  }
  return errno == 0 && end == trimmed.c_str() + trimmed.size();
}

Result<Value> IntFilter(Budget&, const Value& value, const CallArgs& args) {
  if (value.is_undefined()) return InvalidArgument(value.undefined_what());
  const Value* fallback = FindArg(args, 0, "default");
  if (value.type() == Value::Type::kInt) return value;
  if (value.type() == Value::Type::kBool) return Value::Int(value.as_int());
  double number = 0;
  const bool ok =
      (value.type() == Value::Type::kFloat &&
       std::isfinite(value.as_double()) &&
       (number = value.as_double(), true)) ||
      (value.is_string() &&
       (ParseNumber(value.str(), true, &number) ||
        (ParseNumber(value.str(), false, &number) && std::isfinite(number))));
  if (ok && std::fabs(number) < 9.2e18) {
    return Value::Int(static_cast<int64_t>(number));
  }
  return fallback != nullptr ? *fallback : Value::Int(0);
}

Result<Value> FloatFilter(Budget&, const Value& value, const CallArgs& args) {
  if (value.is_undefined()) return InvalidArgument(value.undefined_what());
  const Value* fallback = FindArg(args, 0, "default");
  if (value.is_number()) return Value::Float(value.as_double());
  double number = 0;
  if (value.is_string() && ParseNumber(value.str(), false, &number)) {
    return Value::Float(number);
  }
  return fallback != nullptr ? *fallback : Value::Float(0);
}

Result<Value> ListFilter(Budget&, const Value& value, const CallArgs&) {
  ATTN_ASSIGN_OR_RETURN(List items, Iterate(value));
  return Value::MakeList(std::move(items));
}

// The value of a dotted attribute path ("function.name", "0") in `item`.
Value Attribute(Budget& budget, const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot - start);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = GetItem(budget, current,
                      digits && part.size() < 18
                          ? Value::Int(std::atoll(part.c_str()))
                          : Value::String(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

Result<Value> Join(Budget& budget, const Value& value, const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 2, "join"));
  const Value* separator = FindArg(args, 0, "d");
  const Value* attribute = FindArg(args, 1, "attribute");
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  if (separator != nullptr && separator->is_markup()) {
    return InvalidArgument("unsupported: join with a |safe separator");
  }
  const std::string sep = separator != nullptr ? separator->PyStr() : "";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += attribute != nullptr
               ? Attribute(budget, items[i], attribute->PyStr()).PyStr()
               : items[i].PyStr();
    ATTN_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  }
  return MakeString(budget, std::move(out));
}

Result<Value> First(Budget&, const Value& value, const CallArgs&) {
  if (value.type() == Value::Type::kGenerator) return value.Next();
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  if (items.empty())
    return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> Last(Budget&, const Value& value, const CallArgs&) {
  if (value.type() == Value::Type::kGenerator) {
    return InvalidArgument("'generator' object is not reversible");
  }
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  if (items.empty())
    return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

// A string reversed; a generator into a list reversed; anything else as
// Python's reversed(), an iterator.
Result<Value> Reverse(Budget&, const Value& value, const CallArgs&) {
  ATTN_ASSIGN_OR_RETURN(List items, Iterate(value));
  std::reverse(items.begin(), items.end());
  if (value.type() == Value::Type::kGenerator) {
    return Value::MakeList(std::move(items));
  }
  if (!value.is_string()) return Value::Generator(std::move(items));
  std::string out;
  for (const Value& c : items) out += c.str();
  return Value::String(std::move(out));
}

Result<Value> Replace(Budget& budget, const Value& value,
                      const CallArgs& args) {
  ATTN_ASSIGN_OR_RETURN(const std::string text, TextOf(value, "replace"));
  const Value function = GetAttribute(budget, Value::String(text), "replace");
  CallArgs forwarded = args;
  return function.callable().call(forwarded);
}

Result<Value> Items(Budget& budget, const Value& value, const CallArgs&) {
  if (value.is_undefined()) return Value::Generator({});
  if (!value.is_mapping()) {
    return InvalidArgument(
        "items: can only get item pairs from a mapping, "
        "not " +
        value.TypeName());
  }
  const Value function = GetAttribute(budget, value, "items");
  CallArgs none;
  ATTN_ASSIGN_OR_RETURN(const Value view, function.callable().call(none));
  return Value::Generator(view.list());
}

// dictsort(case_sensitive=False, by='key', reverse=False): the (key, value)
// pairs sorted, strings compared lowercased unless case_sensitive.
Result<Value> DictSort(Budget& budget, const Value& value,
                       const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 3, "dictsort"));
  if (!value.is_mapping()) {
    return InvalidArgument("dictsort: wants a dict, got " + value.TypeName());
  }
  const Value* case_sensitive = FindArg(args, 0, "case_sensitive");
  const Value* by = FindArg(args, 1, "by");
  const Value* reverse = FindArg(args, 2, "reverse");
  const bool by_value =
      by != nullptr && by->is_string() && by->str() == "value";
  if (by != nullptr && !(by->is_string() && (by->str() == "key" || by_value))) {
    return InvalidArgument("dictsort: by must be 'key' or 'value'");
  }
  const bool fold = case_sensitive == nullptr || !case_sensitive->Truthy();
  std::vector<std::pair<Value, Value>> keyed;  // sort key, (key, value)
  for (const auto& [key, item] : value.dict().items) {
    Value sort_key = by_value ? item : Value::String(key);
    if (fold && sort_key.is_string()) {
      ATTN_ASSIGN_OR_RETURN(sort_key, Lower(budget, sort_key, CallArgs{}));
    }
    keyed.emplace_back(
        std::move(sort_key),
        Value::MakeList({Value::String(key), item}, Value::Type::kTuple));
  }
  Status failed;
  std::stable_sort(keyed.begin(), keyed.end(),
                   [&](const auto& a, const auto& b) {
                     auto less = LessThan(a.first, b.first);
                     if (!less.ok() && failed.ok()) failed = less.status();
                     return less.ok() && *less;
                   });
  ATTN_RETURN_IF_ERROR(failed);
  List pairs;
  for (auto& entry : keyed) pairs.push_back(std::move(entry.second));
  if (reverse != nullptr && reverse->Truthy()) {
    std::reverse(pairs.begin(), pairs.end());
  }
  return Value::MakeList(std::move(pairs));
}

// select, reject, selectattr, rejectattr: the items whose (attribute's)
// test result is `keep`; without a test, their truthiness.
Result<Value> SelectItems(Budget& budget, const Value& value,
                          const CallArgs& args, bool by_attribute, bool keep) {
  if (!value.Truthy()) return Value::Generator({});  // Jinja2: `if seq:`
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) {
      return InvalidArgument("selectattr/rejectattr need an attribute");
    }
    attribute = args.positional[next++].PyStr();
  }
  std::string test;
  if (next < args.positional.size()) test = args.positional[next++].PyStr();
  if (!test.empty() && !IsKnownTest(test)) {
    return InvalidArgument("unknown test '" + test + "'");
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + next,
                              args.positional.end());
  List out;
  for (const Value& item : items) {
    const Value subject =
        by_attribute ? Attribute(budget, item, attribute) : item;
    bool passed = subject.Truthy();
    if (!test.empty()) {
      ATTN_ASSIGN_OR_RETURN(passed, ApplyTest(test, subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Result<Value> Select(Budget& b, const Value& v, const CallArgs& a) {
  return SelectItems(b, v, a, false, true);
}
Result<Value> Reject(Budget& b, const Value& v, const CallArgs& a) {
  return SelectItems(b, v, a, false, false);
}
Result<Value> SelectAttr(Budget& b, const Value& v, const CallArgs& a) {
  return SelectItems(b, v, a, true, true);
}
Result<Value> RejectAttr(Budget& b, const Value& v, const CallArgs& a) {
  return SelectItems(b, v, a, true, false);
}

// map(attribute="x", default=d) or map("filter", args...).
Result<Value> Map(Budget& budget, const Value& value, const CallArgs& args) {
  if (!value.Truthy()) return Value::Generator({});  // Jinja2: `if value:`
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  const Value* attribute = FindArg(args, SIZE_MAX, "attribute");
  const Value* fallback = FindArg(args, SIZE_MAX, "default");
  List out;
  if (attribute != nullptr) {
    for (const Value& item : items) {
      Value mapped = Attribute(budget, item, attribute->PyStr());
      if (mapped.is_undefined() && fallback != nullptr) mapped = *fallback;
      out.push_back(std::move(mapped));
    }
    return Value::Generator(std::move(out));
  }
  if (args.positional.empty()) return InvalidArgument("map: no filter given");
  const std::string filter = args.positional[0].PyStr();
  if (!IsKnownFilter(filter) || filter == "map") {
    return InvalidArgument("map: unknown filter '" + filter + "'");
  }
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1,
                                args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : items) {
    ATTN_ASSIGN_OR_RETURN(Value mapped,
                          ApplyFilter(budget, filter, item, filter_args));
    out.push_back(std::move(mapped));
  }
  return Value::Generator(std::move(out));
}

// unique(case_sensitive=False, attribute=None): first occurrences, strings
// compared lowercased unless case_sensitive.
Result<Value> Unique(Budget& budget, const Value& value, const CallArgs& args) {
  ATTN_ASSIGN_OR_RETURN(const List items, Iterate(value));
  const Value* case_sensitive = FindArg(args, 0, "case_sensitive");
  const Value* attribute = FindArg(args, 1, "attribute");
  const bool fold = case_sensitive == nullptr || !case_sensitive->Truthy();
  List out;
  List seen;
  for (const Value& item : items) {
    Value key = attribute ? Attribute(budget, item, attribute->PyStr()) : item;
    if (fold && key.is_string()) {
      CallArgs none;
      ATTN_ASSIGN_OR_RETURN(key, Lower(budget, key, none));
    }
    ATTN_RETURN_IF_ERROR(budget.Charge(seen.size()));
    if (std::any_of(seen.begin(), seen.end(),
                    [&](const Value& s) { return s.Equals(key); })) {
      continue;
    }
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Result<Value> Safe(Budget&, const Value& value, const CallArgs&) {
  if (value.is_markup()) return value;
  return Value::Markup(value.PyStr());
}

const std::map<std::string, FilterFn, std::less<>>& Filters() {
  static const auto* filters = new std::map<std::string, FilterFn, std::less<>>{
      {"capitalize", Capitalize},
      {"count", Length},
      {"d", Default},
      {"default", Default},
      {"dictsort", DictSort},
      {"first", First},
      {"float", FloatFilter},
      {"int", IntFilter},
      {"items", Items},
      {"join", Join},
      {"last", Last},
      {"length", Length},
      {"list", ListFilter},
      {"lower", Lower},
      {"map", Map},
      {"reject", Reject},
      {"rejectattr", RejectAttr},
      {"replace", Replace},
      {"reverse", Reverse},
      {"safe", Safe},
      {"select", Select},
      {"selectattr", SelectAttr},
      {"string", StringFilter},
      {"title", Title},
      {"tojson", ToJsonFilter},
      {"trim", Trim},
      {"unique", Unique},
      {"upper", Upper},
  };
  return *filters;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return Filters().find(name) != Filters().end();
}

Result<Value> ApplyFilter(Budget& budget, const std::string& name,
                          const Value& operand, const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(budget.Charge(1));
  const auto filter = Filters().find(name);
  if (filter == Filters().end()) {
    return InvalidArgument("unknown filter '" + name + "'");
  }
  ATTN_ASSIGN_OR_RETURN(Value result, filter->second(budget, operand, args));
  // Filters that hand a Markup's own methods on keep it Markup.
  static constexpr std::string_view kKeepMarkup[] = {
      "capitalize", "lower", "string", "title", "trim", "upper"};
  if (operand.is_markup() && result.is_string() &&
      std::find(std::begin(kKeepMarkup), std::end(kKeepMarkup), name) !=
          std::end(kKeepMarkup)) {
    return Value::Markup(result.str());
  }
  return result;
}

namespace {

using TestFn = Result<bool> (*)(const Value&, const Value*);

Result<bool> Compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "<") return LessThan(a, b);
  if (op == ">") return LessThan(b, a);
  ATTN_ASSIGN_OR_RETURN(const bool less,
                        LessThan(op == "<=" ? b : a, op == "<=" ? a : b));
  return !less;  // <= is not b < a; >= is not a < b
}

// Python's a % b for numbers (the sign of b), as a double.
Result<double> PyModulo(const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) {
    return InvalidArgument("unsupported operand types for %: '" + a.TypeName() +
                           "' and '" + b.TypeName() + "'");
  }
  if (b.as_double() == 0) return InvalidArgument("modulo by zero");
  if (a.type() != Value::Type::kFloat && b.type() != Value::Type::kFloat) {
    const int64_t y = b.as_int();
    const int64_t m = y == -1 ? 0 : a.as_int() % y;
    return static_cast<double>(m != 0 && (m < 0) != (y < 0) ? m + y : m);
  }
  double m = std::fmod(a.as_double(), b.as_double());
  if (m != 0 && (m < 0) != (b.as_double() < 0)) m += b.as_double();
  return m;
}

Result<int64_t> IntegerOf(const Value& value, const char* what) {
  if (value.type() == Value::Type::kInt || value.type() == Value::Type::kBool) {
    return value.as_int();
  }
  return InvalidArgument(std::string(what) + ": wants an integer, got " +
                         value.TypeName());
}

bool TypeTest(const std::string& name, const Value& v, bool* result) {
  using T = Value::Type;
  const T t = v.type();
  static const std::map<std::string, std::function<bool(const Value&)>,
                        std::less<>>
      kTests = {
          {"defined", [](const Value& x) { return !x.is_undefined(); }},
          {"undefined", [](const Value& x) { return x.is_undefined(); }},
          {"none", [](const Value& x) { return x.is_none(); }},
          {"boolean", [](const Value& x) { return x.type() == T::kBool; }},
          {"integer", [](const Value& x) { return x.type() == T::kInt; }},
          {"float", [](const Value& x) { return x.type() == T::kFloat; }},
          {"number", [](const Value& x) { return x.is_number(); }},
          {"string", [](const Value& x) { return x.is_string(); }},
          {"mapping", [](const Value& x) { return x.is_mapping(); }},
          {"callable", [](const Value& x) { return x.type() == T::kCallable; }},
          {"true",
           [](const Value& x) { return x.type() == T::kBool && x.as_bool(); }},
          {"false",
           [](const Value& x) { return x.type() == T::kBool && !x.as_bool(); }},
      };
  const auto found = kTests.find(name);
  if (found != kTests.end()) {
    *result = found->second(v);
    return true;
  }
  if (name == "iterable" || name == "sequence") {
    const bool iterable = name == "iterable" ? v.is_iterator() : v.is_range();
    *result = t == T::kUndefined || t == T::kString || v.is_sequence() ||
              t == T::kDict || iterable;
    return true;
  }
  return false;
}

const std::map<std::string, std::string, std::less<>>& ComparisonTests() {
  static const auto* tests =
      new std::map<std::string, std::string, std::less<>>{
          {"==", "=="}, {"eq", "=="}, {"equalto", "=="},    {"!=", "!="},
          {"ne", "!="}, {"<", "<"},   {"lt", "<"},          {"lessthan", "<"},
          {"<=", "<="}, {"le", "<="}, {">", ">"},           {"gt", ">"},
          {">=", ">="}, {"ge", ">="}, {"greaterthan", ">"},
      };
  return *tests;
}

}  // namespace

bool IsKnownTest(std::string_view name) {
  static constexpr std::string_view kOthers[] = {
      "defined", "undefined",   "none",     "boolean",  "integer",
      "float",   "number",      "string",   "mapping",  "callable",
      "true",    "false",       "iterable", "sequence", "odd",
      "even",    "divisibleby", "in",       "lower",    "upper"};
  return ComparisonTests().count(name) > 0 ||
         std::find(std::begin(kOthers), std::end(kOthers), name) !=
             std::end(kOthers);
}

Result<bool> ApplyTest(const std::string& name, const Value& operand,
                       const CallArgs& args) {
  bool result = false;
  if (TypeTest(name, operand, &result)) return result;
  const Value* arg = args.positional.empty() ? nullptr : &args.positional[0];
  const auto comparison = ComparisonTests().find(name);
  if (comparison != ComparisonTests().end() || name == "in" ||
      name == "divisibleby") {
    if (arg == nullptr)
      return InvalidArgument("test '" + name + "' needs an argument");
  }
  if (comparison != ComparisonTests().end()) {
    return Compare(comparison->second, operand, *arg);
  }
  if (name == "odd" || name == "even") {  // value % 2 == 1 (or 0)
    ATTN_ASSIGN_OR_RETURN(const double m, PyModulo(operand, Value::Int(2)));
    return m == (name == "odd" ? 1 : 0);
  }
  if (name == "divisibleby") {
    ATTN_ASSIGN_OR_RETURN(const double m, PyModulo(operand, *arg));
    return m == 0;
  }
  if (name == "lower" || name == "upper") {  // str(value).islower()
    return PyIsCase(operand.PyStr(), name == "upper");
  }
  if (name == "in") return Contains(*arg, operand);
  return InvalidArgument("unknown test '" + name + "'");
}

Result<bool> Contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string()) {
        return InvalidArgument(
            "'in <string>' requires string as left "
            "operand, not " +
            item.TypeName());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList:
    case Value::Type::kTuple:
      return std::any_of(container.list().begin(), container.list().end(),
                         [&](const Value& x) { return x.Equals(item); });
    case Value::Type::kGenerator:
    case Value::Type::kView: {
      const List items = container.Drain();
      return std::any_of(items.begin(), items.end(),
                         [&](const Value& x) { return x.Equals(item); });
    }
    case Value::Type::kDict:
      if (item.is_sequence() && item.type() != Value::Type::kTuple) {
        return InvalidArgument("unhashable type: '" + item.TypeName() + "'");
      }
      if (item.is_object() || item.is_iterator()) {
        return InvalidArgument("unhashable type: '" + item.TypeName() + "'");
      }
      return item.is_string() && container.dict().Find(item.str()) != nullptr;
    default:
      return InvalidArgument("argument of type '" + container.TypeName() +
                             "' is not iterable");
  }
}

namespace {

Result<Value> Range(CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() ||
      args.positional.size() > 3) {
    return InvalidArgument("range() takes 1 to 3 integer arguments");
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    ATTN_ASSIGN_OR_RETURN(bounds[args.positional.size() == 1 ? 1 : i],
                          IntegerOf(args.positional[i], "range"));
  }
  const auto [start, stop, step] = bounds;
  if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
  // The sandbox's MAX_RANGE.
  constexpr int64_t kMaxRange = 100000;
  const double count = std::ceil((static_cast<double>(stop) - start) / step);
  if (count > kMaxRange) {
    return InvalidArgument("range too big: more than 100000 items");
  }
  List items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    items.push_back(Value::Int(i));
  }
  std::string repr =
      "range(" + std::to_string(start) + ", " + std::to_string(stop);
  if (step != 1) repr += ", " + std::to_string(step);
  return Value::View(repr + ")", std::move(items));
}

// namespace(dict?, key=value...) and dict(key=value...).
Result<Value> MakeObject(CallArgs& args, Value::Type type) {
  Dict dict;
  if (args.positional.size() > 1 ||
      (args.positional.size() == 1 && !args.positional[0].is_mapping())) {
    return InvalidArgument(
        "namespace() and dict() take one dict and "
        "keyword arguments");
  }
  if (!args.positional.empty()) dict = args.positional[0].dict();
  for (auto& [key, value] : args.keyword) dict.Set(key, std::move(value));
  return Value::MakeDict(std::move(dict), type);
}

Result<Value> RaiseException(CallArgs& args) {
  const std::string message =
      args.positional.empty() ? "" : args.positional[0].PyStr();
  return InvalidArgument("raise_exception: " + message);
}

Result<Value> StrftimeNow(const RenderLimits& limits, CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    return InvalidArgument("strftime_now() takes one format string");
  }
  const std::string& format = args.positional[0].str();
  const std::time_t now = limits.now ? limits.now() : std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(format.size() * 8 + 64, '\0');
  const size_t n =
      std::strftime(out.data(), out.size(), format.c_str(), &local);
  if (n == 0 && !format.empty()) {
    return InvalidArgument("strftime_now: the format gives no text");
  }
  out.resize(n);
  return Value::String(std::move(out));
}

}  // namespace

Dict Globals(const RenderLimits& limits) {
  Dict globals;
  globals.Set("range", Value::Function("range", Range));
  globals.Set("namespace", Value::Function("namespace", [](CallArgs& args) {
                return MakeObject(args, Value::Type::kNamespace);
              }));
  globals.Set("dict", Value::Function("dict", [](CallArgs& args) {
                return MakeObject(args, Value::Type::kDict);
              }));
  globals.Set("raise_exception",
              Value::Function("raise_exception", RaiseException));
  globals.Set("strftime_now",
              Value::Function("strftime_now", [&limits](CallArgs& args) {
                return StrftimeNow(limits, args);
              }));
  return globals;
}

}  // namespace attn::jinja
