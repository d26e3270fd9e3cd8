#include "engine/tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "engine/tokenizer/jinja_value.h"

namespace attn::jinja {

Status ErrorAt(Position at, const std::string& what) {
  std::string line = what;
  std::replace(line.begin(), line.end(), '\n', ' ');
  return InvalidArgument("chat template " + std::to_string(at.line) + ":" +
                         std::to_string(at.column) + ": " + line);
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Jinja2 reads templates with universal newlines and drops one trailing
// newline (keep_trailing_newline=False).
std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') {
      out += source[i];
      continue;
    }
    out += '\n';
    if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Reads `digits` hex digits at body[*i + 1...]; false when they are not.
bool ReadHex(std::string_view body, size_t* i, int digits, uint32_t* cp) {
  if (*i + digits >= body.size()) return false;
  *cp = 0;
  for (int d = 1; d <= digits; ++d) {
    const char c = body[*i + d];
    const char* hex = "0123456789abcdef0123456789ABCDEF";
    const char* found = c == '\0' ? nullptr : std::strchr(hex, c);
    if (found == nullptr) return false;
    *cp = *cp * 16 + static_cast<uint32_t>((found - hex) % 16);
  }
  *i += digits;
  return *cp <= 0x10FFFF;
}

// Python's "unicode-escape" decoding of a string literal's body, as Jinja2
// applies it: unknown escapes keep their backslash.
Result<std::string> Unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    static constexpr std::pair<char, char> kSimple[] = {
        {'n', '\n'}, {'t', '\t'}, {'r', '\r'}, {'\\', '\\'}, {'\'', '\''},
        {'"', '"'},  {'a', '\a'}, {'b', '\b'}, {'f', '\f'},  {'v', '\v'}};
    const auto* simple =
        std::find_if(std::begin(kSimple), std::end(kSimple),
                     [c](const auto& e) { return e.first == c; });
    uint32_t cp = 0;
    if (simple != std::end(kSimple)) {
      out += simple->second;
    } else if (c == '\n') {
      continue;  // a backslash-newline joins lines
    } else if (c == 'x' || c == 'u' || c == 'U') {
      if (!ReadHex(body, &i, c == 'x' ? 2 : c == 'u' ? 4 : 8, &cp)) {
        return InvalidArgument("bad \\" + std::string(1, c) +
                               " escape in a string");
      }
      AppendUtf8(cp, &out);
    } else if (c >= '0' && c <= '7') {
      cp = static_cast<uint32_t>(c - '0');
      for (int n = 0; n < 2 && i + 1 < body.size() && body[i + 1] >= '0' &&
                      body[i + 1] <= '7';
           ++n) {
        cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
      }
      AppendUtf8(cp, &out);
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeSource(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> Run();

 private:
  Position At(size_t offset) const {
    const auto it =
        std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line),
            static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }
  void Emit(Token::Kind kind, std::string text, size_t offset) {
    tokens_.push_back({kind, std::move(text), At(offset)});
  }
  size_t SkipSpaces(size_t p) const {
    while (p < src_.size()) {
      const size_t n = PySpaceAt(src_, p);
      if (n == 0) break;
      p += n;
    }
    return p;
  }
  bool MatchAt(size_t p, std::string_view what) const {
    return src_.compare(p, what.size(), what) == 0;
  }
  char SignAt(size_t p) const {
    return p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
  }

  void EmitText(size_t begin, size_t end, char sign, bool lstrip);
  void EndTag(size_t after_close, char sign, bool trim_newline);
  Status LexComment(size_t begin);
  bool MatchRawTag(size_t p, std::string_view word, size_t* end,
                   char* sign) const;
  Status LexRaw(size_t after_begin);
  Status LexTag(size_t begin, bool block);
  Status LexExpressionToken(std::vector<char>* brackets);
  Status LexString();
  void LexNumber();

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

Result<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    size_t tag = pos_;
    while ((tag = src_.find('{', tag)) != std::string::npos) {
      const char next = tag + 1 < src_.size() ? src_[tag + 1] : 0;
      if (next == '{' || next == '%' || next == '#') break;
      ++tag;
    }
    if (tag == std::string::npos) {
      Emit(Token::Kind::kText, src_.substr(pos_), pos_);
      break;
    }
    const char kind = src_[tag + 1];
    EmitText(pos_, tag, SignAt(tag + 2), kind != '{');
    size_t raw_end = 0;
    char raw_sign = 0;
    if (kind == '#') {
      ATTN_RETURN_IF_ERROR(LexComment(tag));
    } else if (kind == '%' && MatchRawTag(tag, "raw", &raw_end, &raw_sign)) {
      pos_ = raw_sign == '-' ? SkipSpaces(raw_end) : raw_end;
      ATTN_RETURN_IF_ERROR(LexRaw(tag));
    } else {
      ATTN_RETURN_IF_ERROR(LexTag(tag, kind == '%'));
    }
  }
  Emit(Token::Kind::kEnd, "", src_.size());
  return std::move(tokens_);
}

// Text src_[begin, end) before a tag, trimmed as the tag's sign asks: "-"
// strips all whitespace before it; otherwise lstrip_blocks removes the
// blanks that start the tag's line, for block and comment tags.
void Lexer::EmitText(size_t begin, size_t end, char sign, bool lstrip) {
  std::string text = src_.substr(begin, end - begin);
  if (sign == '-') {
    text = PyStrip(text, nullptr, false, true);
  } else if (sign != '+' && lstrip) {
    const size_t newline = text.rfind('\n');
    const size_t line_pos = newline == std::string::npos ? 0 : newline + 1;
    const bool blank =
        line_pos < text.size() && SkipSpaces(begin + line_pos) == end;
    if ((line_pos > 0 || line_starting_) && blank) text.resize(line_pos);
  }
  if (!text.empty()) Emit(Token::Kind::kText, std::move(text), begin);
}

// After a closing tag: "-" strips the whitespace that follows, otherwise
// trim_blocks drops one newline after block and comment tags.
void Lexer::EndTag(size_t after_close, char sign, bool trim_newline) {
  pos_ = after_close;
  if (sign == '-') {
    pos_ = SkipSpaces(pos_);
  } else if (sign != '+' && trim_newline && pos_ < src_.size() &&
             src_[pos_] == '\n') {
    ++pos_;
  }
  line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
}

Status Lexer::LexComment(size_t begin) {
  const size_t close = src_.find("#}", begin + 2);
  if (close == std::string::npos) {
    return ErrorAt(At(begin), "unclosed comment: no '#}'");
  }
  EndTag(close + 2, close > begin + 2 ? SignAt(close - 1) : 0, true);
  return {};
}

// Whether src_ at `p` is "{%[-+] word [-+]%}"; *end is past it and *sign
// the closing sign.
bool Lexer::MatchRawTag(size_t p, std::string_view word, size_t* end,
                        char* sign) const {
  if (!MatchAt(p, "{%")) return false;
  p += 2;
  if (SignAt(p)) ++p;
  p = SkipSpaces(p);
  if (!MatchAt(p, word)) return false;
  p = SkipSpaces(p + word.size());
  *sign = SignAt(p);
  if (*sign) ++p;
  if (!MatchAt(p, "%}")) return false;
  *end = p + 2;
  return true;
}

Status Lexer::LexRaw(size_t begin) {
  for (size_t tag = pos_; (tag = src_.find("{%", tag)) != std::string::npos;
       ++tag) {
    size_t end = 0;
    char sign = 0;
    if (!MatchRawTag(tag, "endraw", &end, &sign)) continue;
    EmitText(pos_, tag, SignAt(tag + 2), true);
    EndTag(end, sign, true);
    return {};
  }
  return ErrorAt(At(begin), "unclosed {% raw %}: no {% endraw %}");
}

Status Lexer::LexTag(size_t begin, bool block) {
  Emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "", begin);
  pos_ = begin + 2;
  if (SignAt(pos_)) ++pos_;
  std::vector<char> brackets;
  const std::string_view close = block ? "%}" : "}}";
  for (;;) {
    pos_ = SkipSpaces(pos_);
    if (pos_ >= src_.size()) {
      return ErrorAt(At(begin), std::string("unclosed tag: no '") +
                                    std::string(close) + "'");
    }
    char sign = SignAt(pos_);
    size_t after = 0;
    if (MatchAt(pos_, close)) {
      sign = 0;
      after = pos_ + 2;
    } else if ((sign == '-' || (sign == '+' && block)) &&
               MatchAt(pos_ + 1, close)) {
      after = pos_ + 3;
    }
    if (brackets.empty() && after > 0) {
      Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", pos_);
      EndTag(after, sign, block);
      return {};
    }
    ATTN_RETURN_IF_ERROR(LexExpressionToken(&brackets));
  }
}

Status Lexer::LexExpressionToken(std::vector<char>* brackets) {
  const char c = src_[pos_];
  if (IsNameStart(c)) {
    size_t end = pos_;
    while (end < src_.size() && IsNameChar(src_[end])) ++end;
    Emit(Token::Kind::kName, src_.substr(pos_, end - pos_), pos_);
    pos_ = end;
    return {};
  }
  if (IsDigit(c)) {
    LexNumber();
    return {};
  }
  if (c == '\'' || c == '"') return LexString();
  static constexpr std::string_view kOperators[] = {
      "//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~", "<",
      ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ".", ",", ":", "|"};
  for (const std::string_view op : kOperators) {
    if (!MatchAt(pos_, op)) continue;
    if (op == "(" || op == "[" || op == "{") brackets->push_back(op[0]);
    if (op == ")" || op == "]" || op == "}") {
      const char open = op == ")" ? '(' : op == "]" ? '[' : '{';
      if (brackets->empty() || brackets->back() != open) {
        return ErrorAt(At(pos_), "unexpected '" + std::string(op) + "'");
      }
      brackets->pop_back();
    }
    Emit(Token::Kind::kOperator, std::string(op), pos_);
    pos_ += op.size();
    return {};
  }
  char shown[8];
  if (c >= 0x20 && c < 0x7F) {
    std::snprintf(shown, sizeof shown, "'%c'", c);
  } else {
    std::snprintf(shown, sizeof shown, "0x%02x", static_cast<unsigned char>(c));
  }
  return ErrorAt(At(pos_), std::string("unexpected character ") + shown);
}

Status Lexer::LexString() {
  const char quote = src_[pos_];
  size_t end = pos_ + 1;
  while (end < src_.size() && src_[end] != quote) {
    end += src_[end] == '\\' ? 2 : 1;
  }
  if (end >= src_.size()) return ErrorAt(At(pos_), "unclosed string");
  auto text = Unescape(std::string_view(src_).substr(pos_ + 1, end - pos_ - 1));
  if (!text.ok()) return ErrorAt(At(pos_), text.status().message());
  Emit(Token::Kind::kString, std::move(*text), pos_);
  pos_ = end + 1;
  return {};
}

// Digits with optional "_" separators, a fraction and an exponent, as
// Jinja2's integer and float patterns.
void Lexer::LexNumber() {
  const size_t begin = pos_;
  std::string digits;
  const auto take_digits = [&] {
    while (
        pos_ < src_.size() &&
        (IsDigit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                 IsDigit(src_[pos_ + 1])))) {
      if (src_[pos_] != '_') digits += src_[pos_];
      ++pos_;
    }
  };
  take_digits();
  bool is_float = false;
  if (pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
    is_float = true;
    digits += src_[pos_++];
    take_digits();
  }
  if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
    size_t p = pos_ + 1;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    if (p < src_.size() && IsDigit(src_[p])) {
      is_float = true;
      digits += 'e';
      digits += src_.substr(pos_ + 1, p - pos_ - 1);
      pos_ = p;
      take_digits();
    }
  }
  Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits, begin);
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source) {
  return Lexer(source).Run();
}

}  // namespace attn::jinja
