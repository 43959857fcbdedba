// Python's str semantics over UTF-8 for the Jinja renderer.
#include "jinja/pystr.h"

#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace kvscope::jinja {
namespace {

bool contains_cp(std::u32string_view set, char32_t cp) { return set.find(cp) != std::u32string_view::npos; }

/// Simple case pairs: (upper, lower) for the scripts py_lower/py_upper cover.
char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c == 0x178) return 0xFF;
  return c;
}

char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;  // micro sign
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) {  // ß -> SS
    out += U"SS";
    return;
  }
  out += to_upper_cp(c);
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}

/// Whether Python's str.isprintable() is false for `cp` (controls, format characters, separators
/// other than the space, private use, noncharacters), approximated by the ranges that occur in text.
bool is_unprintable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return true;
  if (cp >= 0x80 && cp <= 0xA0) return true;
  if (cp == 0xAD || cp == 0x34F || cp == 0x61C || cp == 0x1680 || cp == 0x180E) return true;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F)) return true;
  if (cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) return true;
  if (cp >= 0xE000 && cp <= 0xF8FF) return true;
  if (cp >= 0xF0000) return true;
  if (cp >= 0xE0000 && cp <= 0xE0FFF) return true;
  return false;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = valid_utf8_length(s, pos);
    const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[pos + i])); };
    switch (n) {
      case 1:
        out += b(0);
        break;
      case 2:
        out += ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
        break;
      case 3:
        out += ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
        break;
      case 4:
        out += ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
        break;
      default:
        out += b(0);  // not reached for checked inputs
        pos += 1;
        continue;
    }
    pos += n;
  }
  return out;
}

std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

void append_py_escape(std::string& out, char32_t c) {
  char buf[16];
  if (c < 0x100)
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
  else if (c < 0x10000)
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
  else
    std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
  out += buf;
}

size_t codepoint_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == ' ' || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  const auto strip_it = [&](char32_t c) { return chars ? contains_cp(set, c) : is_py_space(c); };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip_it(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip_it(cps[end - 1])) --end;
  return encode_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = decode_utf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i)));  // the rest, trailing space kept
      return out;
    }
    size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j])) ++j;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const std::u32string cps = decode_utf8(s);
  size_t i = cps.size();
  while (i > 0) {
    while (i > 0 && is_py_space(cps[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode_utf8(std::u32string_view(cps).substr(0, i)));  // the rest, leading space kept
      break;
    }
    size_t j = i;
    while (j > 0 && !is_py_space(cps[j - 1])) --j;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(j, i - j)));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  const std::u32string cps = decode_utf8(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    if (!is_line_break(cps[i])) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (cps[i] == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  const auto check = [&] { check_string_size(static_cast<double>(out.size())); };
  if (old_text.empty()) {
    // Python inserts `new` before every code point and at the end (up to count times).
    const std::u32string cps = decode_utf8(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
        check();
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += new_text;
    pos = hit + old_text.size();
    ++done;
    check();
  }
  out += s.substr(pos);
  return out;
}

std::string py_lower(std::string_view s) {
  std::u32string cps = decode_utf8(s);
  for (auto& c : cps) c = to_lower_cp(c);
  return encode_utf8(cps);
}

std::string py_upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode_utf8(s)) append_upper(out, c);
  return encode_utf8(out);
}

std::string py_capitalize(std::string_view s) {
  const std::u32string cps = decode_utf8(s);
  std::u32string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0)
      append_upper(out, cps[i]);
    else
      out += to_lower_cp(cps[i]);
  }
  return encode_utf8(out);
}

bool py_is_lower_cased(char32_t c) { return to_upper_cp(c) != c || c == 0xDF; }
bool py_is_upper_cased(char32_t c) { return to_lower_cp(c) != c; }
bool py_is_alpha(char32_t c) { return py_is_lower_cased(c) || py_is_upper_cased(c) || c == 0xAA || c == 0xBA; }
bool py_is_digit(char32_t c) { return c >= '0' && c <= '9'; }

std::string py_repr_string(std::string_view s) {
  const std::u32string cps = decode_utf8(s);
  const bool has_single = contains_cp(cps, '\''), has_double = contains_cp(cps, '"');
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : cps) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_unprintable(c)) {
      append_py_escape(out, c);
    } else {
      append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // "-d.ddde+XX"
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+'), sci.data() + sci.size(), exponent);
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out += digits.substr(1);
    }
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += buf;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt < n) {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  } else {
    out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  }
  return out;
}

}  // namespace kvscope::jinja
