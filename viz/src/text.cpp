// Text helpers: UTF-8 cleaning, token display, elision, wrapping.
#include "text.h"

#include <cstdint>
#include <cstdio>

namespace kvscope::viz::detail {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_len(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_len(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string clean_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_len(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else if (n == 1 && (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7f)) {
      out += ' ';
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string token_display(std::string_view token) {
  if (token.empty()) return "\xe2\x88\x85";  // U+2205
  if (token.find_first_not_of(' ') == std::string_view::npos) {
    std::string out;
    for (std::size_t i = 0; i < token.size(); ++i) out += "\xe2\x90\xa3";  // U+2423
    return out;
  }
  std::string out;
  for (std::size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    const std::size_t n = utf8_len(token, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (n == 1 && (c < 0x20 || c == 0x7f)) {
      if (c == '\n')
        out += "\xe2\x86\xb5";  // U+21B5
      else if (c == '\t')
        out += "\xe2\x86\x92";  // U+2192
      else if (c != '\r') {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      }
      ++i;
      continue;
    }
    out.append(token.substr(i, n));
    i += n;
  }
  return out;
}

std::string elide(Canvas& m, const std::string& text, const Font& font, double max_w) {
  if (m.measure(text, font).width <= max_w) return text;
  const std::string ell = "\xe2\x80\xa6";  // U+2026
  if (m.measure(ell, font).width > max_w) return "";
  // Code point boundaries, then binary search on the kept prefix length.
  std::vector<std::size_t> cuts;
  for (std::size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80) cuts.push_back(i);
  auto prefix_end = [&](std::size_t code_points) {
    return code_points < cuts.size() ? cuts[code_points] : text.size();
  };
  std::size_t lo = 0, hi = cuts.size();  // number of code points kept
  while (lo < hi) {
    const std::size_t mid = (lo + hi + 1) / 2;
    if (m.measure(text.substr(0, prefix_end(mid)) + ell, font).width <= max_w)
      lo = mid;
    else
      hi = mid - 1;
  }
  const std::size_t keep = prefix_end(lo);
  return text.substr(0, keep) + ell;
}

std::vector<std::string> wrap(Canvas& m, const std::string& text, const Font& font, double max_w) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    std::string word = text.substr(i, j - i);
    i = j + 1;
    std::string candidate = line.empty() ? word : line + " " + word;
    if (m.measure(candidate, font).width <= max_w) {
      line = std::move(candidate);
      continue;
    }
    if (!line.empty()) lines.push_back(std::move(line));
    line.clear();
    // A word wider than the line: break it at code points.
    while (!word.empty() && m.measure(word, font).width > max_w) {
      std::size_t cut = 0, k = 0;
      while (k < word.size()) {
        std::size_t next = k + 1;
        while (next < word.size() && (static_cast<unsigned char>(word[next]) & 0xc0) == 0x80) ++next;
        if (m.measure(word.substr(0, next), font).width > max_w) break;
        cut = k = next;
      }
      if (cut == 0) {  // not even one code point fits: take one anyway
        cut = 1;
        while (cut < word.size() && (static_cast<unsigned char>(word[cut]) & 0xc0) == 0x80) ++cut;
      }
      lines.push_back(word.substr(0, cut));
      word = word.substr(cut);
    }
    line = std::move(word);
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

double line_height(Canvas& m, const Font& font) {
  const TextMetrics t = m.measure("Hg", font);
  return t.ascent + t.descent;
}

}  // namespace kvscope::viz::detail
