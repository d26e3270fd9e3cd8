#include "engine/tokenizer/jinja_value.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace attn::jinja {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::Undefined(std::string what) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(what));
  return v;
}

Value Value::None() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.int_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.float_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::Markup(std::string s) {
  Value v = String(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::MakeList(List items, Type type) {
  Value v;
  v.type_ = type;
  for (const Value& item : items) v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict dict, Type type) {
  Value v;
  v.type_ = type;
  for (const auto& item : dict.items) {
    v.depth_ = std::max(v.depth_, item.second.depth_);
  }
  ++v.depth_;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::Generator(List items) {
  Value v = MakeList(std::move(items));
  v.type_ = Type::kGenerator;
  v.position_ = std::make_shared<size_t>(0);
  return v;
}

Value Value::View(std::string name, List items) {
  Value v = MakeList(std::move(items));
  v.type_ = Type::kView;
  v.string_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

List Value::Drain() const {
  if (type_ != Type::kGenerator) return *list_;
  List rest(list_->begin() + static_cast<ptrdiff_t>(*position_), list_->end());
  *position_ = list_->size();
  return rest;
}

Value Value::Next() const {
  if (*position_ == list_->size()) {
    return Undefined("No first item, sequence was empty.");
  }
  return (*list_)[(*position_)++];
}

Value Value::Function(std::string name,
                      std::function<Result<Value>(CallArgs&)> call) {
  Value v;
  v.type_ = Type::kCallable;
  v.callable_ = std::make_shared<const Callable>(
      Callable{std::move(name), std::move(call)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  using Kind = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Kind::null:
      return None();
    case Kind::boolean:
      return Bool(json.get<bool>());
    case Kind::number_integer:
      return Int(json.get<int64_t>());
    case Kind::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Int(static_cast<int64_t>(u));
      }
      return Float(static_cast<double>(u));
    }
    case Kind::number_float:
      return Float(json.get<double>());
    case Kind::string:
      return String(json.get<std::string>());
    case Kind::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return MakeList(std::move(items));
    }
    case Kind::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) {
        dict.items.emplace_back(key, FromJson(item));
      }
      return MakeDict(std::move(dict));
    }
    default:  // binary and discarded values have no Python counterpart
      return None();
  }
}

bool Value::ContainsNamespace() const {
  switch (type_) {
    case Type::kNamespace:
      return true;
    case Type::kList:
    case Type::kTuple:
    case Type::kGenerator:
    case Type::kView:
      return std::any_of(list_->begin(), list_->end(),
                         [](const Value& v) { return v.ContainsNamespace(); });
    case Type::kDict:
      return std::any_of(
          dict_->items.begin(), dict_->items.end(),
          [](const auto& item) { return item.second.ContainsNamespace(); });
    default:
      return false;
  }
}

bool Value::is_number() const {
  return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat;
}

double Value::as_double() const {
  return type_ == Type::kFloat ? float_ : static_cast<double>(int_);
}

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0;
    case Type::kString:
      return !string_->empty();
    case Type::kList:
    case Type::kTuple:
      return !list_->empty();
    case Type::kDict:
      return !dict_->items.empty();
    case Type::kView:
      return !list_->empty();
    default:  // a generator is true even when empty, as in Python
      return true;
  }
}

namespace {

std::string SequenceRepr(const List& items, bool tuple) {
  std::string out = tuple ? "(" : "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += items[i].PyRepr();
  }
  if (tuple && items.size() == 1) out += ",";
  out += tuple ? ")" : "]";
  return out;
}

std::string DictRepr(const Dict& dict) {
  std::string out = "{";
  for (size_t i = 0; i < dict.items.size(); ++i) {
    if (i > 0) out += ", ";
    out += PyStringRepr(dict.items[i].first) + ": " +
           dict.items[i].second.PyRepr();
  }
  return out + "}";
}

}  // namespace

std::string Value::PyStr() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kString:
      return *string_;
    default:
      return PyRepr();
  }
}

std::string Value::PyRepr() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return bool_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(int_);
    case Type::kFloat:
      return PyFloatRepr(float_);
    case Type::kString:
      return PyStringRepr(*string_);
    case Type::kList:
    case Type::kTuple:
      return SequenceRepr(*list_, type_ == Type::kTuple);
    case Type::kDict:
      return DictRepr(*dict_);
    case Type::kNamespace:
      return "<Namespace " + DictRepr(*dict_) + ">";
    case Type::kCallable:
      return "<function " + callable_->name + ">";
    case Type::kGenerator:
      return "<generator object>";  // Python adds its address
    case Type::kView:
      if (is_range()) return *string_;
      return *string_ + "(" + SequenceRepr(*list_, false) + ")";
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (type_ == Type::kFloat || other.type_ == Type::kFloat) {
      return as_double() == other.as_double();
    }
    return int_ == other.int_;
  }
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return *string_ == *other.string_;
    case Type::kList:
    case Type::kTuple: {
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Type::kDict: {
      if (dict_->items.size() != other.dict_->items.size()) return false;
      for (const auto& [key, value] : dict_->items) {
        const Value* match = other.dict_->Find(key);
        if (match == nullptr || !value.Equals(*match)) return false;
      }
      return true;
    }
    case Type::kNamespace:
      return dict_ == other.dict_;
    case Type::kCallable:
      return callable_ == other.callable_;
    case Type::kGenerator:
      return position_ == other.position_;
    case Type::kView:
      return *string_ == *other.string_ &&
             MakeList(*list_).Equals(MakeList(*other.list_));
    default:
      return false;
  }
}

std::string Value::TypeName() const {
  static constexpr const char* kNames[] = {
      "Undefined", "NoneType", "bool", "int",       "float",    "str",
      "list",      "tuple",    "dict", "Namespace", "function", "generator"};
  if (type_ == Type::kView) {
    return is_range() ? "range" : *string_;
  }
  return kNames[static_cast<int>(type_)];
}

namespace {

// Formats `value` in Python's style from its shortest round-trip digits.
std::string FormatShortest(double value) {
  char buf[40];
  int precision = 1;
  for (; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  std::snprintf(buf, sizeof buf, "%.*e", precision - 1, value);
  const std::string text = buf;
  const size_t e = text.find('e');
  const bool negative = text[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) {
    return out + "0." + std::string(-exponent - 1, '0') + digits;
  }
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

}  // namespace

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  return FormatShortest(value);
}

namespace {

// Decodes the code point at `pos` (advancing it); invalid bytes decode as
// themselves, one at a time.
uint32_t DecodeAt(std::string_view text, size_t* pos) {
  const auto byte = [&](size_t i) {
    return static_cast<unsigned char>(text[i]);
  };
  const unsigned char lead = byte(*pos);
  int length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  if (lead >= 0x80 && (lead < 0xC2 || lead > 0xF4)) length = 1;
  if (*pos + length > text.size()) length = 1;
  uint32_t cp = length == 1 ? lead : lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    if ((byte(*pos + i) & 0xC0) != 0x80) {
      *pos += 1;
      return lead;
    }
    cp = (cp << 6) | (byte(*pos + i) & 0x3F);
  }
  *pos += length;
  return cp;
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) ||
         cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Python's str.isprintable() for the common non-printable classes: control
// and format characters, separators other than space, private use.
bool IsPyPrintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp != 0x20 && IsPySpace(cp)) return false;
  if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
      (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF) {
    return false;
  }
  return !(cp >= 0xE000 && cp <= 0xF8FF) && cp <= 0x10FFFF;
}

std::string EscapeCodePoint(uint32_t cp) {
  char buf[12];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02x", cp);
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08x", cp);
  }
  return buf;
}

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Case mapping by code point, independent of the process's locale; ASCII
// only where C.UTF-8 is missing.
locale_t Utf8Locale() {
  static const locale_t locale =
      newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return locale;
}
uint32_t ToUpper(uint32_t cp) {
  if (Utf8Locale() != nullptr) return towupper_l(cp, Utf8Locale());
  return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
}
uint32_t ToLower(uint32_t cp) {
  if (Utf8Locale() != nullptr) return towlower_l(cp, Utf8Locale());
  return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
}
bool IsCased(uint32_t cp) {
  if (ToUpper(cp) != cp || ToLower(cp) != cp) return true;
  return Utf8Locale() != nullptr &&
         (iswlower_l(cp, Utf8Locale()) || iswupper_l(cp, Utf8Locale()));
}

// The upper case of `cp` at the start of a word (title) or anywhere.
void AppendUpper(uint32_t cp, bool title, std::string* out) {
  if (cp == 0xDF) {  // no one-letter upper case: Python gives SS (Ss)
    *out += title ? "Ss" : "SS";
    return;
  }
  AppendUtf8(ToUpper(cp), out);
}

bool IsJinjaWordBreak(uint32_t cp) {
  return IsPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' ||
         cp == '<';
}

}  // namespace

std::string PyChangeCase(std::string_view text, CaseChange change) {
  std::string out;
  bool first = true;
  bool word_start = true;  // title: the previous one was not cased
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = DecodeAt(text, &pos);
    bool upper = change == CaseChange::kUpper;
    if (change == CaseChange::kCapitalize) upper = first;
    if (change == CaseChange::kTitle || change == CaseChange::kJinjaTitle) {
      upper = word_start;
      word_start =
          change == CaseChange::kTitle ? !IsCased(cp) : IsJinjaWordBreak(cp);
    }
    if (upper) {
      AppendUpper(cp, change != CaseChange::kUpper, &out);
    } else {
      AppendUtf8(ToLower(cp), &out);
    }
    first = false;
  }
  return out;
}

bool PyIsCase(std::string_view text, bool upper) {
  bool cased = false;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = DecodeAt(text, &pos);
    if ((upper ? ToUpper(cp) : ToLower(cp)) != cp) return false;
    cased |= IsCased(cp);
  }
  return cased;
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string PyStringRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = DecodeAt(text, &pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPyPrintable(cp)) {
      out += EscapeCodePoint(cp);
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  out += quote;
  return out;
}

std::vector<size_t> CodePointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  for (size_t pos = 0; pos < text.size();) {
    offsets.push_back(pos);
    DecodeAt(text, &pos);
  }
  return offsets;
}

size_t PySpaceAt(std::string_view text, size_t pos) {
  size_t next = pos;
  const uint32_t cp = DecodeAt(text, &next);
  return IsPySpace(cp) ? next - pos : 0;
}

std::string PyStrip(std::string_view text, const std::string* chars, bool left,
                    bool right) {
  const std::vector<size_t> offsets = CodePointOffsets(text);
  const auto strippable = [&](size_t i) {
    const size_t end = i + 1 < offsets.size() ? offsets[i + 1] : text.size();
    const std::string_view cp = text.substr(offsets[i], end - offsets[i]);
    if (chars == nullptr) return PySpaceAt(cp, 0) > 0;
    return chars->find(cp) != std::string::npos;
  };
  size_t begin = 0;
  size_t end = offsets.size();
  while (left && begin < end && strippable(begin)) ++begin;
  while (right && end > begin && strippable(end - 1)) --end;
  const size_t from = begin < offsets.size() ? offsets[begin] : text.size();
  const size_t to = end < offsets.size() ? offsets[end] : text.size();
  return std::string(text.substr(from, to - from));
}

namespace {

// json.dumps' string escapes; with ensure_ascii, everything outside
// printable ASCII as \uXXXX (UTF-16 surrogate pairs above U+FFFF).
std::string JsonString(std::string_view text, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = DecodeAt(text, &pos);
    static constexpr std::pair<uint32_t, const char*> kShort[] = {
        {'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"},
        {'\t', "\\t"}, {'\b', "\\b"},  {'\f', "\\f"}};
    const auto* found =
        std::find_if(std::begin(kShort), std::end(kShort),
                     [cp](const auto& e) { return e.first == cp; });
    char buf[16];
    if (found != std::end(kShort)) {
      out += found->second;
    } else if (cp < 0x20 || (ensure_ascii && cp > 0x7E && cp < 0x10000)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else if (ensure_ascii && cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                    0xDC00 + (v & 0x3FF));
      out += buf;
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out + "\"";
}

std::string JsonFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  return PyFloatRepr(value);
}

Status DumpJson(const Value& value, const JsonStyle& style, int level,
                std::string* out);

// Before an item: the item separator after the first, then with an indent
// a newline and the level's indentation.
void JsonBreak(const JsonStyle& style, int level, bool first,
               std::string* out) {
  if (!first) *out += style.item_separator;
  if (style.indent >= 0) {
    *out += '\n';
    out->append(static_cast<size_t>(style.indent) * level, ' ');
  }
}

Status DumpJsonContainer(const Value& value, const JsonStyle& style, int level,
                         std::string* out) {
  const bool is_dict = value.is_mapping();
  const size_t size = is_dict ? value.dict().items.size() : value.list().size();
  if (size == 0) {
    *out += is_dict ? "{}" : "[]";
    return {};
  }
  std::vector<size_t> order(size);
  for (size_t i = 0; i < size; ++i) order[i] = i;
  if (is_dict && style.sort_keys) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return value.dict().items[a].first < value.dict().items[b].first;
    });
  }
  *out += is_dict ? '{' : '[';
  for (size_t i = 0; i < size; ++i) {
    JsonBreak(style, level + 1, i == 0, out);
    if (is_dict) {
      *out +=
          JsonString(value.dict().items[order[i]].first, style.ensure_ascii) +
          style.key_separator;
    }
    const Value& item =
        is_dict ? value.dict().items[order[i]].second : value.list()[i];
    ATTN_RETURN_IF_ERROR(DumpJson(item, style, level + 1, out));
  }
  JsonBreak(style, level, true, out);
  *out += is_dict ? '}' : ']';
  return {};
}

Status DumpJson(const Value& value, const JsonStyle& style, int level,
                std::string* out) {
  if (level > 512) return InvalidArgument("tojson: nested too deeply");
  switch (value.type()) {
    case Value::Type::kNone:
      *out += "null";
      return {};
    case Value::Type::kBool:
      *out += value.as_bool() ? "true" : "false";
      return {};
    case Value::Type::kInt:
      *out += std::to_string(value.as_int());
      return {};
    case Value::Type::kFloat:
      *out += JsonFloat(value.as_double());
      return {};
    case Value::Type::kString:
      *out += JsonString(value.str(), style.ensure_ascii);
      return {};
    case Value::Type::kList:
    case Value::Type::kTuple:
    case Value::Type::kDict:
      return DumpJsonContainer(value, style, level, out);
    default:
      return InvalidArgument("tojson: Object of type " + value.TypeName() +
                             " is not JSON serializable");
  }
}

}  // namespace

Result<std::string> ToJson(const Value& value, const JsonStyle& style) {
  std::string out;
  ATTN_RETURN_IF_ERROR(DumpJson(value, style, 0, &out));
  return out;
}

Result<bool> LessThan(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type() == Value::Type::kFloat || b.type() == Value::Type::kFloat) {
      return a.as_double() < b.as_double();
    }
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.type() == b.type() && a.is_sequence()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return InvalidArgument("'<' not supported between instances of '" +
                         a.TypeName() + "' and '" + b.TypeName() + "'");
}

}  // namespace attn::jinja
