// Attribute, item and slice access, iteration, and the str and dict methods
// templates call (the sandbox forbids the mutating ones, so none are here).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/tokenizer/jinja_eval.h"

namespace attn::jinja {

// Argument `index`, or the keyword argument `name`; null when absent.
const Value* FindArg(const CallArgs& args, size_t index,
                     std::string_view name) {
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return &value;
  }
  if (index < args.positional.size()) return &args.positional[index];
  return nullptr;
}

Status CheckArgCount(const CallArgs& args, size_t max,
                     const std::string& method) {
  if (args.positional.size() + args.keyword.size() <= max) return {};
  return InvalidArgument(method + "() takes at most " + std::to_string(max) +
                         " arguments");
}

namespace {

Result<std::string> StringArg(const Value* value, const std::string& method) {
  if (value == nullptr || !value->is_string()) {
    return InvalidArgument(method + "() wants a str argument, got " +
                           (value ? value->TypeName() : "none"));
  }
  return value->str();
}

// Python's str.split(sep, maxsplit); no sep splits on runs of whitespace.
List PySplit(const std::string& text, const std::string* sep,
             int64_t maxsplit) {
  List parts;
  if (sep != nullptr) {
    size_t start = 0;
    for (size_t found;
         (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
         (found = text.find(*sep, start)) != std::string::npos;
         start = found + sep->size()) {
      parts.push_back(Value::String(text.substr(start, found - start)));
    }
    parts.push_back(Value::String(text.substr(start)));
    return parts;
  }
  size_t pos = 0;
  const auto skip_space = [&] {
    while (pos < text.size() && PySpaceAt(text, pos) > 0) {
      pos += PySpaceAt(text, pos);
    }
  };
  skip_space();
  while (pos < text.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(
          Value::String(PyStrip(text.substr(pos), nullptr, false, true)));
      break;
    }
    const size_t start = pos;
    while (pos < text.size() && PySpaceAt(text, pos) == 0) ++pos;
    parts.push_back(Value::String(text.substr(start, pos - start)));
    skip_space();
  }
  return parts;
}

Result<std::string> PyReplace(Budget& budget, const std::string& text,
                              const std::string& old, const std::string& repl,
                              int64_t count) {
  std::string out;
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t found = old.empty() ? (start <= text.size() ? start : text.npos)
                               : text.find(old, start);
    if (found == std::string::npos) break;
    out.append(text, start, found - start);
    out += repl;
    ATTN_RETURN_IF_ERROR(budget.CheckSize(out.size()));
    if (old.empty()) {
      if (found < text.size()) out += text[found];
      start = found + 1;
      if (start > text.size()) break;
    } else {
      start = found + old.size();
    }
  }
  if (start < text.size()) out.append(text, start, std::string::npos);
  ATTN_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  ATTN_RETURN_IF_ERROR(budget.Charge(out.size() / 64));
  return out;
}

// prefix is a str or a tuple of them, as str.startswith takes.
Result<bool> MatchesAffix(const std::string& text, const Value* affix,
                          bool at_start, const std::string& method) {
  if (affix != nullptr && affix->is_sequence()) {
    for (const Value& item : affix->list()) {
      ATTN_ASSIGN_OR_RETURN(const bool match,
                            MatchesAffix(text, &item, at_start, method));
      if (match) return true;
    }
    return false;
  }
  ATTN_ASSIGN_OR_RETURN(const std::string s, StringArg(affix, method));
  if (s.size() > text.size()) return false;
  return text.compare(at_start ? 0 : text.size() - s.size(), s.size(), s) == 0;
}

Result<Value> StripMethod(const std::string& text, const std::string& name,
                          const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 1, name));
  const Value* chars = FindArg(args, 0, "chars");
  std::string set;
  if (chars != nullptr && !chars->is_none()) {
    ATTN_ASSIGN_OR_RETURN(set, StringArg(chars, name));
  }
  const bool has_chars = chars != nullptr && !chars->is_none();
  return Value::String(PyStrip(text, has_chars ? &set : nullptr,
                               name != "rstrip", name != "lstrip"));
}

Result<Value> SplitMethod(const std::string& text, const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 2, "split"));
  const Value* sep = FindArg(args, 0, "sep");
  const Value* max = FindArg(args, 1, "maxsplit");
  const int64_t maxsplit =
      max != nullptr && max->is_number() ? max->as_int() : -1;
  if (sep == nullptr || sep->is_none()) {
    return Value::MakeList(PySplit(text, nullptr, maxsplit));
  }
  ATTN_ASSIGN_OR_RETURN(const std::string s, StringArg(sep, "split"));
  if (s.empty()) return InvalidArgument("split(): empty separator");
  return Value::MakeList(PySplit(text, &s, maxsplit));
}

Result<Value> JoinMethod(Budget& budget, const std::string& text,
                         const CallArgs& args) {
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 1, "join"));
  const Value* items = FindArg(args, 0, "iterable");
  if (items == nullptr) return InvalidArgument("join() takes one argument");
  ATTN_ASSIGN_OR_RETURN(const List list, Iterate(*items));
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) {
      return InvalidArgument("join(): sequence item " + std::to_string(i) +
                             ": expected str, found " + list[i].TypeName());
    }
    if (i > 0) out += text;
    out += list[i].str();
    ATTN_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  }
  ATTN_RETURN_IF_ERROR(budget.Charge(out.size() / 64));
  return Value::String(std::move(out));
}

Result<Value> StringMethod(Budget& budget, const std::string& text,
                           const std::string& name, const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return StripMethod(text, name, args);
  }
  if (name == "split") return SplitMethod(text, args);
  if (name == "join") return JoinMethod(budget, text, args);
  if (name == "startswith" || name == "endswith") {
    ATTN_RETURN_IF_ERROR(CheckArgCount(args, 1, name));
    const Value* affix = FindArg(args, 0, "prefix");
    ATTN_ASSIGN_OR_RETURN(
        const bool match,
        MatchesAffix(text, affix, name == "startswith", name));
    return Value::Bool(match);
  }
  if (name == "replace") {
    ATTN_RETURN_IF_ERROR(CheckArgCount(args, 3, name));
    const Value* old = FindArg(args, 0, "old");
    const Value* repl = FindArg(args, 1, "new");
    const Value* count = FindArg(args, 2, "count");
    ATTN_ASSIGN_OR_RETURN(const std::string o, StringArg(old, name));
    ATTN_ASSIGN_OR_RETURN(const std::string r, StringArg(repl, name));
    ATTN_ASSIGN_OR_RETURN(
        std::string out,
        PyReplace(
            budget, text, o, r,
            count != nullptr && count->is_number() ? count->as_int() : -1));
    return Value::String(std::move(out));
  }
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 0, name));
  const CaseChange change = name == "upper"   ? CaseChange::kUpper
                            : name == "lower" ? CaseChange::kLower
                            : name == "title" ? CaseChange::kTitle
                                              : CaseChange::kCapitalize;
  return Value::String(PyChangeCase(text, change));
}

Result<Value> DictMethod(const Value& dict, const std::string& name,
                         const CallArgs& args) {
  if (name == "get") {
    ATTN_RETURN_IF_ERROR(CheckArgCount(args, 2, name));
    const Value* key = FindArg(args, 0, "key");
    const Value* fallback = FindArg(args, 1, "default");
    const Value* found = key != nullptr && key->is_string()
                             ? dict.dict().Find(key->str())
                             : nullptr;
    if (found != nullptr) return *found;
    return fallback != nullptr ? *fallback : Value::None();
  }
  ATTN_RETURN_IF_ERROR(CheckArgCount(args, 0, name));
  List out;
  for (const auto& [key, value] : dict.dict().items) {
    if (name == "keys") {
      out.push_back(Value::String(key));
    } else if (name == "values") {
      out.push_back(value);
    } else {  // items
      out.push_back(
          Value::MakeList({Value::String(key), value}, Value::Type::kTuple));
    }
  }
  return Value::View("dict_" + name, std::move(out));
}

bool IsStringMethod(const std::string& name) {
  static constexpr std::string_view kNames[] = {
      "strip", "lstrip", "rstrip", "split",      "join",       "replace",
      "upper", "lower",  "title",  "capitalize", "startswith", "endswith"};
  return std::find(std::begin(kNames), std::end(kNames), name) !=
         std::end(kNames);
}

bool IsDictMethod(const std::string& name) {
  return name == "get" || name == "items" || name == "keys" || name == "values";
}

// Markup's methods return Markup and escape their arguments; the ones
// without arguments are kept, the others refused rather than not escaped.
Result<Value> MarkupMethod(Budget& budget, const Value& markup,
                           const std::string& name, const CallArgs& args) {
  ATTN_ASSIGN_OR_RETURN(Value result,
                        StringMethod(budget, markup.str(), name, args));
  if (name == "startswith" || name == "endswith") return result;
  if (!args.positional.empty() || !args.keyword.empty() ||
      !result.is_string()) {
    return InvalidArgument("unsupported: str." + name +
                           "() with arguments on a |safe string");
  }
  return Value::Markup(result.str());
}

Value BoundMethod(Budget& budget, const Value& object,
                  const std::string& name) {
  return Value::Function(
      object.TypeName() + "." + name,
      [&budget, object, name](CallArgs& args) -> Result<Value> {
        if (object.is_markup()) return MarkupMethod(budget, object, name, args);
        if (object.is_string()) {
          return StringMethod(budget, object.str(), name, args);
        }
        return DictMethod(object, name, args);
      });
}

std::string NoAttribute(const Value& object, const std::string& name) {
  return "'" + object.TypeName() + " object' has no attribute '" + name + "'";
}

}  // namespace

Value GetAttribute(Budget& budget, const Value& object,
                   const std::string& name) {
  if (object.is_mapping() && IsDictMethod(name)) {
    return BoundMethod(budget, object, name);
  }
  if (object.is_object()) {
    const Value* found = object.dict().Find(name);
    if (found != nullptr) return *found;
  }
  if (object.is_string() && IsStringMethod(name)) {
    return BoundMethod(budget, object, name);
  }
  return Value::Undefined(NoAttribute(object, name));
}

namespace {

// A Python index into `size` items, from the end when negative; false when
// out of range.
bool ResolveIndex(int64_t index, size_t size, size_t* out) {
  const int64_t n = static_cast<int64_t>(size);
  if (index < 0) index += n;
  if (index < 0 || index >= n) return false;
  *out = static_cast<size_t>(index);
  return true;
}

}  // namespace

Value GetItem(Budget& budget, const Value& object, const Value& key) {
  if (key.is_string()) {
    if (object.is_object()) {
      const Value* found = object.dict().Find(key.str());
      if (found != nullptr) return *found;
    }
    return GetAttribute(budget, object, key.str());
  }
  const bool int_key =
      key.type() == Value::Type::kInt || key.type() == Value::Type::kBool;
  size_t index = 0;
  if (int_key && (object.is_sequence() || object.is_range()) &&
      ResolveIndex(key.as_int(), object.list().size(), &index)) {
    return object.list()[index];
  }
  if (int_key && object.is_string()) {
    const std::vector<size_t> offsets = CodePointOffsets(object.str());
    if (ResolveIndex(key.as_int(), offsets.size(), &index)) {
      const size_t end =
          index + 1 < offsets.size() ? offsets[index + 1] : object.str().size();
      std::string text =
          object.str().substr(offsets[index], end - offsets[index]);
      return object.is_markup() ? Value::Markup(std::move(text))
                                : Value::String(std::move(text));
    }
  }
  return Value::Undefined("'" + object.TypeName() + " object' has no item " +
                          key.PyRepr());
}

namespace {

Result<int64_t> SliceBound(const Value* part, const char* what) {
  if (part->type() == Value::Type::kInt || part->type() == Value::Type::kBool) {
    return part->as_int();
  }
  return InvalidArgument(std::string("slice ") + what +
                         " must be an integer or none, got " +
                         part->TypeName());
}

// Python's slice.indices(): the positions a slice visits in `size` items.
Result<std::vector<size_t>> SlicePositions(size_t size, const Value* start,
                                           const Value* stop,
                                           const Value* step) {
  const auto given = [](const Value* v) { return v && !v->is_none(); };
  int64_t by = 1;
  if (given(step)) {
    ATTN_ASSIGN_OR_RETURN(by, SliceBound(step, "step"));
  }
  if (by == 0) return InvalidArgument("slice step cannot be zero");
  const int64_t n = static_cast<int64_t>(size);
  const auto clamp = [&](int64_t i) {
    if (i < 0) i += n;
    if (by > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t from = by > 0 ? 0 : n - 1;
  int64_t to = by > 0 ? n : -1;
  if (given(start)) {
    ATTN_ASSIGN_OR_RETURN(from, SliceBound(start, "start"));
    from = clamp(from);
  }
  if (given(stop)) {
    ATTN_ASSIGN_OR_RETURN(to, SliceBound(stop, "stop"));
    to = clamp(to);
  }
  std::vector<size_t> positions;
  for (int64_t i = from; by > 0 ? i < to : i > to; i += by) {
    positions.push_back(static_cast<size_t>(i));
  }
  return positions;
}

}  // namespace

Result<Value> GetSlice(const Value& object, const Value* start,
                       const Value* stop, const Value* step) {
  if (object.is_sequence()) {
    ATTN_ASSIGN_OR_RETURN(
        const std::vector<size_t> positions,
        SlicePositions(object.list().size(), start, stop, step));
    List out;
    out.reserve(positions.size());
    for (const size_t i : positions) out.push_back(object.list()[i]);
    return Value::MakeList(std::move(out), object.type());
  }
  if (object.is_string()) {
    const std::string& text = object.str();
    const std::vector<size_t> offsets = CodePointOffsets(text);
    ATTN_ASSIGN_OR_RETURN(const std::vector<size_t> positions,
                          SlicePositions(offsets.size(), start, stop, step));
    std::string out;
    for (const size_t i : positions) {
      const size_t end = i + 1 < offsets.size() ? offsets[i + 1] : text.size();
      out.append(text, offsets[i], end - offsets[i]);
    }
    return object.is_markup() ? Value::Markup(std::move(out))
                              : Value::String(std::move(out));
  }
  if (object.is_undefined()) return InvalidArgument(object.undefined_what());
  if (object.is_iterator()) {  // Jinja2's getitem makes the TypeError undefined
    return Value::Undefined("'" + object.TypeName() +
                            "' object is not subscriptable");
  }
  return InvalidArgument("'" + object.TypeName() +
                         "' object is not subscriptable");
}

Result<List> Iterate(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined:
      return List{};
    case Value::Type::kList:
    case Value::Type::kTuple:
      return value.list();
    case Value::Type::kGenerator:
    case Value::Type::kView:
      return value.Drain();
    case Value::Type::kDict: {
      List keys;
      for (const auto& item : value.dict().items) {
        keys.push_back(Value::String(item.first));
      }
      return keys;
    }
    case Value::Type::kString: {
      const std::string& text = value.str();
      const std::vector<size_t> offsets = CodePointOffsets(text);
      List chars;
      for (size_t i = 0; i < offsets.size(); ++i) {
        const size_t end =
            i + 1 < offsets.size() ? offsets[i + 1] : text.size();
        chars.push_back(
            Value::String(text.substr(offsets[i], end - offsets[i])));
      }
      return chars;
    }
    default:
      return InvalidArgument("'" + value.TypeName() +
                             "' object is not iterable");
  }
}

}  // namespace attn::jinja
