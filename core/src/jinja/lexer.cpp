// The Jinja lexer (trim_blocks, lstrip_blocks): data, tags and expression tokens.
#include "jinja/lexer.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "jinja/error.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

constexpr std::string_view kOperators[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                           "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

/// \n for \r\n and \r; one trailing newline removed (Jinja's keep_trailing_newline=False).
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/// Length of the Python whitespace (\s, Unicode) at s[pos...].
size_t whitespace_length(std::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (!is_ascii_space(static_cast<char>(c)) && !(c >= 0x1C && c <= 0x1F)) break;
      ++i;
      continue;
    }
    // Decode one multi-byte code point and test it.
    size_t n = (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : 2;
    if (i + n > s.size()) break;
    const std::u32string cp = decode_utf8(s.substr(i, n));
    if (cp.size() != 1 || !is_py_space(cp[0])) break;
    i += n;
  }
  return i - pos;
}

/// Whether all of `s` is Python whitespace (and s is not empty).
bool all_whitespace(std::string_view s) { return !s.empty() && whitespace_length(s, 0) == s.size(); }

/// Python's "unicode_escape" decoding of a string literal's body after "backslashreplace" (what
/// Jinja does to every string literal).
std::string decode_string_literal(std::string_view body, int line) {
  // backslashreplace: every non-ASCII code point becomes \xhh, \uhhhh or \Uhhhhhhhh first.
  std::string ascii;
  for (char32_t c : decode_utf8(body)) {
    if (c < 0x80) {
      ascii += static_cast<char>(c);
      continue;
    }
    append_py_escape(ascii, c);
  }
  std::string out;
  const auto hex_value = [&](size_t pos, size_t n, const char* what) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char h = pos + k < ascii.size() ? ascii[pos + k] : '\0';
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) throw Error(std::string("syntax error: truncated ") + what + " escape in a string literal", line);
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  };
  for (size_t i = 0; i < ascii.size(); ++i) {
    const char c = ascii[i];
    if (c != '\\' || i + 1 == ascii.size()) {
      out += c;
      continue;
    }
    const char e = ascii[++i];
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        append_utf8(out, hex_value(i + 1, 2, "\\xXX"));
        i += 2;
        break;
      case 'u':
        append_utf8(out, hex_value(i + 1, 4, "\\uXXXX"));
        i += 4;
        break;
      case 'U': {
        const uint32_t v = hex_value(i + 1, 8, "\\UXXXXXXXX");
        if (v > 0x10FFFF) throw Error("syntax error: illegal Unicode character in a string literal", line);
        append_utf8(out, v);
        i += 8;
        break;
      }
      case 'N':
        throw Error("unsupported construct: \\N{...} escape in a string literal", line);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(ascii[++i] - '0');
          append_utf8(out, v);
        } else {
          out += '\\';  // unknown escapes stay as written
          out += e;
        }
    }
  }
  // Surrogates written as escapes cannot be encoded in UTF-8 (Python would fail later on them).
  if (first_invalid_utf8(out) != std::string::npos)
    throw Error("unsupported construct: a surrogate escape in a string literal", line);
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) root();
    push(TokenType::kEnd, "", line_);
    return std::move(tokens_);
  }

 private:
  enum class Tag { kVariable, kBlock, kComment };

  void push(TokenType type, std::string text, int line) { tokens_.push_back(Token{type, std::move(text), line}); }

  /// Moves to `to`, counting lines.
  void advance(size_t to) {
    for (; pos_ < to; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  /// The length of "{%[-+]?\s*raw\s*(-%}\s*|%})" at `at`, or 0.
  size_t raw_begin_length(size_t at) const {
    size_t i = at + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i += whitespace_length(src_, i);
    if (src_.compare(i, 3, "raw") != 0) return 0;
    i += 3;
    if (i < src_.size() && is_name_char(src_[i])) return 0;
    i += whitespace_length(src_, i);
    if (src_.compare(i, 3, "-%}") == 0) return i + 3 + whitespace_length(src_, i + 3) - at;
    if (src_.compare(i, 2, "%}") == 0) return i + 2 - at;
    return 0;
  }

  /// Applies the opener's whitespace control to the text before a tag (Jinja's OptionalLStrip).
  std::string_view strip_before(std::string_view text, char sign, bool lstrip) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0) {
        // Strip trailing Python whitespace: find the start of the last code point.
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        if (whitespace_length(text.substr(0, end), start) != end - start) break;
        end = start;
      }
      return text.substr(0, end);
    }
    if (sign != '+' && lstrip) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_whitespace(text.substr(l_pos))) return text.substr(0, l_pos);
    }
    return text;
  }

  void emit_data(std::string_view text, int line) {
    if (!text.empty()) push(TokenType::kData, std::string(text), line);
  }

  void root() {
    // The next tag opener.
    size_t at = pos_;
    Tag tag = Tag::kVariable;
    for (;; ++at) {
      at = src_.find('{', at);
      if (at == std::string::npos || at + 1 >= src_.size()) {
        emit_data(std::string_view(src_).substr(pos_), line_);
        advance(src_.size());
        return;
      }
      const char c = src_[at + 1];
      if (c == '{' || c == '%' || c == '#') {
        tag = c == '{' ? Tag::kVariable : c == '%' ? Tag::kBlock : Tag::kComment;
        break;
      }
    }
    const char sign = at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : '\0';
    const size_t raw_len = tag == Tag::kBlock ? raw_begin_length(at) : 0;
    const std::string_view text = std::string_view(src_).substr(pos_, at - pos_);
    emit_data(strip_before(text, sign, tag != Tag::kVariable), line_);
    advance(at);
    if (raw_len) {
      advance(at + raw_len);
      line_starting_ = src_[pos_ - 1] == '\n';
      raw_body();
      return;
    }
    const int tag_line = line_;
    advance(at + 2 + (sign ? 1 : 0));
    if (tag == Tag::kComment) {
      comment(tag_line);
      return;
    }
    push(tag == Tag::kVariable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", tag_line);
    inside_tag(tag, tag_line);
  }

  void comment(int tag_line) {
    const size_t content = pos_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw Error("syntax error: missing end of comment tag", tag_line);
    const char sign = end > content && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    advance(end + 2);
    close_tag(sign);
  }

  /// After a block end or comment end: `-` strips all following whitespace, `+` nothing, else
  /// trim_blocks removes one newline. Sets line_starting_.
  void close_tag(char sign) {
    if (sign == '-')
      advance(pos_ + whitespace_length(src_, pos_));
    else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n')
      advance(pos_ + 1);
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  void raw_body() {
    const int raw_line = line_;
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 1)) {
      size_t i = at + 2;
      const char sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : '\0';
      if (sign) ++i;
      i += whitespace_length(src_, i);
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i += 6;
      i += whitespace_length(src_, i);
      char end_sign = '\0';
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) end_sign = src_[i++];
      if (src_.compare(i, 2, "%}") != 0) continue;
      const std::string_view text = std::string_view(src_).substr(pos_, at - pos_);
      emit_data(strip_before(text, sign, true), raw_line);
      advance(i + 2);
      close_tag(end_sign);
      return;
    }
    throw Error("syntax error: missing end of raw directive", raw_line);
  }

  /// The end of the tag at pos_, if it is one: its length and sign.
  std::optional<std::pair<size_t, char>> tag_end(Tag tag) const {
    const char* close = tag == Tag::kVariable ? "}}" : "%}";
    if ((src_[pos_] == '-' || (tag == Tag::kBlock && src_[pos_] == '+')) && src_.compare(pos_ + 1, 2, close) == 0)
      return std::make_pair(size_t{3}, src_[pos_]);
    if (src_.compare(pos_, 2, close) == 0) return std::make_pair(size_t{2}, '\0');
    return std::nullopt;
  }

  void inside_tag(Tag tag, int tag_line) {
    std::string balance;  // expected closing brackets
    while (true) {
      if (pos_ >= src_.size())
        throw Error(std::string("syntax error: unexpected end of template, expected '") +
                        (tag == Tag::kVariable ? "}}" : "%}") + "'",
                    tag_line);
      if (balance.empty()) {
        if (const auto end = tag_end(tag)) {
          const int line = line_;
          advance(pos_ + end->first);
          push(tag == Tag::kVariable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", line);
          if (tag == Tag::kVariable) {
            if (end->second == '-') advance(pos_ + whitespace_length(src_, pos_));
            line_starting_ = src_[pos_ - 1] == '\n';
          } else {
            close_tag(end->second);
          }
          return;
        }
      }
      if (const size_t ws = whitespace_length(src_, pos_)) {
        advance(pos_ + ws);
        continue;
      }
      const char c = src_[pos_];
      if (is_digit(c)) {
        number();
        continue;
      }
      if (is_name_start(c)) {
        size_t end = pos_;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        push(TokenType::kName, src_.substr(pos_, end - pos_), line_);
        advance(end);
        continue;
      }
      if (c == '\'' || c == '"') {
        string_literal(c);
        continue;
      }
      bool matched = false;
      for (std::string_view op : kOperators) {
        if (src_.compare(pos_, op.size(), op) != 0) continue;
        if (op == "(" || op == "[" || op == "{") balance += op == "(" ? ')' : op == "[" ? ']' : '}';
        if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) throw Error("syntax error: unexpected '" + std::string(op) + "'", line_);
          if (balance.back() != op[0])
            throw Error("syntax error: unexpected '" + std::string(op) + "', expected '" + balance.back() + "'", line_);
          balance.pop_back();
        }
        push(TokenType::kOperator, std::string(op), line_);
        advance(pos_ + op.size());
        matched = true;
        break;
      }
      if (!matched) {
        std::string ch(1, c);
        if (static_cast<unsigned char>(c) >= 0x80) {
          size_t n = 1;
          while (pos_ + n < src_.size() && (static_cast<unsigned char>(src_[pos_ + n]) & 0xC0) == 0x80) ++n;
          ch = src_.substr(pos_, n);
        }
        throw Error("syntax error: unexpected character '" + ch + "'", line_);
      }
    }
  }

  /// Digits with optional single underscores between them, at src_[i...]; returns the end.
  size_t digit_run(size_t i) const {
    if (i >= src_.size() || !is_digit(src_[i])) return i;
    ++i;
    while (i < src_.size()) {
      if (is_digit(src_[i])) {
        ++i;
      } else if (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1])) {
        i += 2;
      } else {
        break;
      }
    }
    return i;
  }

  void number() {
    const int line = line_;
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    // Float: digits ( (.digits)? e[+-]?digits | .digits ), not right after a dot (x.0.1).
    if (!after_dot) {
      size_t i = digit_run(pos_);
      bool is_float = false;
      if (i < src_.size() && src_[i] == '.' && digit_run(i + 1) > i + 1) {
        i = digit_run(i + 1);
        is_float = true;
      }
      if (i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
        size_t j = i + 1;
        if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
        if (digit_run(j) > j) {
          i = digit_run(j);
          is_float = true;
        }
      }
      if (is_float) {
        std::string text;
        for (size_t k = pos_; k < i; ++k)
          if (src_[k] != '_') text += src_[k];
        Token t{TokenType::kFloat, text, line};
        t.number = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(t);
        advance(i);
        return;
      }
    }
    // Integer: 0b.. 0o.. 0x.. or decimal.
    int base = 10;
    size_t i = pos_;
    if (src_[i] == '0' && i + 1 < src_.size()) {
      const char p = static_cast<char>(src_[i + 1] | 0x20);
      if (p == 'b' || p == 'o' || p == 'x') {
        base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
        i += 2;
      }
    }
    const auto is_base_digit = [&](char ch) {
      if (base == 2) return ch == '0' || ch == '1';
      if (base == 8) return ch >= '0' && ch <= '7';
      if (base == 16) return is_digit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f');
      return is_digit(ch);
    };
    std::string digits;
    if (base == 10) {
      if (src_[i] == '0') {  // 0(_?0)*
        digits.assign(1, '0');
        ++i;
        while (i < src_.size()) {
          if (src_[i] == '0') {
            ++i;
          } else if (src_[i] == '_' && i + 1 < src_.size() && src_[i + 1] == '0') {
            i += 2;
          } else {
            break;
          }
        }
      } else {
        const size_t end = digit_run(i);
        for (size_t k = i; k < end; ++k)
          if (src_[k] != '_') digits += src_[k];
        i = end;
      }
    } else {
      while (i < src_.size()) {
        if (src_[i] == '_' && i + 1 < src_.size() && is_base_digit(src_[i + 1])) ++i;
        if (i >= src_.size() || !is_base_digit(src_[i])) break;
        digits += src_[i++];
      }
      if (digits.empty()) {  // "0x" alone: the integer 0, then a name
        i = pos_ + 1;
        digits.assign(1, '0');
        base = 10;
      }
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, base);
    if (errno == ERANGE) throw Error("unsupported construct: integer literal " + digits + " is too large", line);
    Token t{TokenType::kInteger, src_.substr(pos_, i - pos_), line};
    t.integer = v;
    tokens_.push_back(t);
    advance(i);
  }

  void string_literal(char quote) {
    const int line = line_;
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] == '\\') ++i;
      ++i;
    }
    if (i >= src_.size()) throw Error("syntax error: unterminated string literal", line);
    const std::string body = src_.substr(pos_ + 1, i - pos_ - 1);
    push(TokenType::kString, decode_string_literal(body, line), line);
    advance(i + 1);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "'{{'";
    case TokenType::kVariableEnd:
      return "end of print statement '}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "end of statement block '%}'";
    case TokenType::kName:
      return "'" + token.text + "'";
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
    case TokenType::kFloat:
      return "number " + token.text;
    case TokenType::kOperator:
      return "'" + token.text + "'";
    case TokenType::kEnd:
      return "end of template";
  }
  return "token";
}

}  // namespace kvscope::jinja
