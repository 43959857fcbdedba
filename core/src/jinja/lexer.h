#pragma once
// The Jinja lexer with transformers' settings (trim_blocks, lstrip_blocks, no trailing newline):
// template text -> data and tag tokens, whitespace control applied (jinja/ internal).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::jinja {

/// What a token is.
enum class TokenType {
  kData,           ///< literal text (whitespace control already applied)
  kVariableBegin,  ///< {{
  kVariableEnd,    ///< }}
  kBlockBegin,     ///< {%
  kBlockEnd,       ///< %}
  kName,           ///< identifier or keyword
  kString,         ///< string literal (text: its value, escapes decoded)
  kInteger,        ///< integer literal (integer: its value)
  kFloat,          ///< float literal (number: its value)
  kOperator,       ///< + - * / // % ** ~ == != < <= > >= = . : | , ; ( ) [ ] { }
  kEnd,            ///< end of the template
};

/// One token; `line` is 1-based in the template text.
struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t integer = 0;
  double number = 0;
};

/// Tokenizes `source` as Jinja 3 does with trim_blocks=True, lstrip_blocks=True and
/// keep_trailing_newline=False (newlines normalised to \n, one trailing newline dropped).
/// Throws Error (with the line) for an unterminated tag, comment, string or raw block, an
/// unexpected character, or unbalanced brackets.
std::vector<Token> tokenize(std::string_view source);

/// A token's description for messages: "'}}'", "end of template", "name 'foo'".
std::string describe(const Token& token);

}  // namespace kvscope::jinja
