// The values a chat template computes with, and Python's view of them:
// Jinja2 runs on Python objects, so truthiness, equality, str() and repr()
// follow Python's rules here to render exactly as Hugging Face does.
#ifndef ATTN_ENGINE_TOKENIZER_JINJA_VALUE_H_
#define ATTN_ENGINE_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/status.hpp"

namespace attn::jinja {

// How deeply values may nest: printing, comparing and json.dumps recurse
// (Python itself stops near 1000).
constexpr int kMaxValueDepth = 200;

class Value;
using List = std::vector<Value>;
// Python's dict with string keys, in insertion order (json.dumps keeps it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
};
// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
struct Callable {
  std::string name;
  std::function<Result<Value>(CallArgs&)> call;
};

class Value {
 public:
  enum class Type {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable,
    kGenerator,  // what filters such as map and select return: one pass
    kView,       // dict.items(), keys(), values() and range(): re-iterable
  };

  Value() = default;  // undefined
  static Value Undefined(std::string what);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  // A string marked safe (Jinja2's Markup, from |safe): `+` HTML-escapes
  // the plain string on its other side.
  static Value Markup(std::string s);
  static Value MakeList(List items, Type type = Type::kList);
  static Value MakeDict(Dict dict, Type type = Type::kDict);
  static Value Generator(List items);
  // `name` is "dict_items", "dict_keys", "dict_values", or a range's repr.
  static Value View(std::string name, List items);
  static Value Function(std::string name,
                        std::function<Result<Value>(CallArgs&)> call);
  static Value FromJson(const nlohmann::ordered_json& json);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_markup() const { return markup_; }
  bool is_number() const;     // bool, int or float, as Python's numbers.Number
  bool is_sequence() const {  // list or tuple
    return type_ == Type::kList || type_ == Type::kTuple;
  }
  bool is_mapping() const { return type_ == Type::kDict; }
  bool is_object() const {  // dict or namespace: has attributes by name
    return type_ == Type::kDict || type_ == Type::kNamespace;
  }
  bool is_iterator() const {  // generator or view
    return type_ == Type::kGenerator || type_ == Type::kView;
  }
  bool is_range() const {
    return type_ == Type::kView && string_->rfind("range(", 0) == 0;
  }

  // Levels of lists, tuples and dicts, 0 for a scalar; as the value was
  // made (a namespace's attributes change after).
  int depth() const { return depth_; }
  // Whether a namespace is this value or inside it.
  bool ContainsNamespace() const;

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }  // bool and int
  double as_double() const;                // bool, int and float
  const std::string& str() const { return *string_; }
  // Undefined: what was looked up, for the message when it is used.
  const std::string& undefined_what() const { return *string_; }
  // A list, tuple or view's items; a generator's, whether consumed or not.
  const List& list() const { return *list_; }
  // The items iterating gives: a generator's that are left, which it then
  // no longer has (Python's generators run once).
  List Drain() const;
  // A generator's next item, or undefined when none is left.
  Value Next() const;
  const Dict& dict() const { return *dict_; }
  Dict& mutable_dict() { return *dict_; }
  const Callable& callable() const { return *callable_; }

  // Python's bool(), str(), repr() and ==.
  bool Truthy() const;
  std::string PyStr() const;
  std::string PyRepr() const;
  bool Equals(const Value& other) const;
  // Python's type name, for messages: 'str', 'int', 'dict'...
  std::string TypeName() const;

 private:
  Type type_ = Type::kUndefined;
  int depth_ = 0;
  bool markup_ = false;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
  std::shared_ptr<size_t> position_;  // a generator's next item
};

// Python's repr(float): the shortest digits that read back, fixed notation
// for exponents in [-4, 16), "1e+16" style outside; "inf", "nan".
std::string PyFloatRepr(double value);
// markupsafe's escape(): & < > " ' as HTML entities.
std::string HtmlEscape(std::string_view text);
// Python's repr(str): single quotes unless only double quotes avoid
// escapes; non-printable characters as \xNN, \uNNNN.
std::string PyStringRepr(std::string_view text);

// json.dumps' options, defaulted as transformers' tojson filter sets them.
struct JsonStyle {
  int indent = -1;  // None: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator = ", ";  // "," when indented
  std::string key_separator = ": ";
};
// json.dumps(value, **style).
Result<std::string> ToJson(const Value& value, const JsonStyle& style);

// Python's < for the types it orders: numbers, strings, sequences.
Result<bool> LessThan(const Value& a, const Value& b);

// Python's str.upper(), lower(), title(), capitalize(), and Jinja2's title
// filter (words start after "-", whitespace or an opening bracket), with
// Unicode's simple case mappings (glibc's C.UTF-8) plus "ß" to "SS".
enum class CaseChange { kUpper, kLower, kTitle, kCapitalize, kJinjaTitle };
std::string PyChangeCase(std::string_view text, CaseChange change);
// Python's str.isupper() (or islower()): some cased character, none of the
// other case.
bool PyIsCase(std::string_view text, bool upper);
void AppendUtf8(uint32_t cp, std::string* out);

// UTF-8 helpers: the byte offset of each code point of `text`, and Python's
// str.isspace() for the code point starting at `pos` (0 when it is not
// whitespace, else its length in bytes).
std::vector<size_t> CodePointOffsets(std::string_view text);
size_t PySpaceAt(std::string_view text, size_t pos);
// Python's str.strip/lstrip/rstrip: whitespace when `chars` is null, else
// any code point of *chars.
std::string PyStrip(std::string_view text, const std::string* chars, bool left,
                    bool right);

}  // namespace attn::jinja

#endif  // ATTN_ENGINE_TOKENIZER_JINJA_VALUE_H_
