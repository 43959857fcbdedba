#pragma once
// Python's str semantics over UTF-8 (the Jinja renderer's strings): code points, whitespace,
// strip/split/splitlines, case mapping, repr() of strings and floats (jinja/ internal).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/utf8.h"  // append_utf8, first_invalid_utf8, valid_utf8_length

namespace kvscope::jinja {

/// Code points of `s`. `s` is well-formed UTF-8 (templates and JSON inputs are checked on entry);
/// a stray byte decodes to itself so that nothing is lost.
std::u32string decode_utf8(std::string_view s);
/// UTF-8 of `cps`.
std::string encode_utf8(std::u32string_view cps);
/// Appends Python's escape of code point c as repr() writes it: \\xhh, \\uhhhh or \\Uhhhhhhhh.
void append_py_escape(std::string& out, char32_t c);
/// Python len(s): the number of code points.
size_t codepoint_count(std::string_view s);

/// Python str.isspace() for one code point (ASCII whitespace, \x1c-\x1f, \x85, Unicode spaces).
bool is_py_space(char32_t cp);

/// str.strip / lstrip / rstrip: without `chars`, Python whitespace; else any code point of `chars`.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
/// str.split(sep, maxsplit) (sep nullopt: runs of whitespace); maxsplit < 0: no limit.
/// Throws std::invalid_argument("empty separator") like Python's ValueError.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
/// str.rsplit(sep, maxsplit).
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
/// str.splitlines(keepends): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029.
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
/// str.replace(old, new, count) (count < 0: all). Throws Error past kMaxStringBytes.
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);

/// str.lower() / str.upper() for ASCII, Latin-1, Greek and Cyrillic letters (other scripts kept).
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
/// str.capitalize(): the first code point upper-cased, the rest lower-cased.
std::string py_capitalize(std::string_view s);
/// Whether str.isalpha/isdigit/isalnum/islower/isupper hold (ASCII and the letters py_lower maps).
bool py_is_alpha(char32_t cp);
bool py_is_digit(char32_t cp);
bool py_is_lower_cased(char32_t cp);
bool py_is_upper_cased(char32_t cp);

/// repr(s): quoted with ' (or " when s holds ' but no "), escapes as Python writes them.
std::string py_repr_string(std::string_view s);
/// repr(x) of a float: the shortest round-trip digits, "1e+16" / "1e-05" past Python's limits,
/// "1.0" for integral values, "inf", "-inf", "nan".
std::string py_float_repr(double x);

}  // namespace kvscope::jinja
