#include "kvscope/core/eval_score.h"

#include <array>

#include "kvscope/core/errors.h"

namespace kvscope {
namespace {

// The UTF-8 encodings of every code point Python's str.isspace() accepts (str.strip()'s set).
// Each is a complete sequence whose first byte never continues another, so matching bytes at either
// end of a string matches whole characters.
constexpr std::array<std::string_view, 29> kPythonSpaces = {
    "\x09",         "\x0a",         "\x0b",         "\x0c",         "\x0d",         "\x1c",
    "\x1d",         "\x1e",         "\x1f",         "\x20",         "\xc2\x85",     "\xc2\xa0",
    "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
    "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",
    "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};

/// Python's str.strip() with no argument.
std::string_view python_strip(std::string_view s) {
  for (bool again = true; again && !s.empty();) {
    again = false;
    for (std::string_view sp : kPythonSpaces) {
      if (s.starts_with(sp)) {
        s.remove_prefix(sp.size());
        again = true;
        break;
      }
    }
  }
  for (bool again = true; again && !s.empty();) {
    again = false;
    for (std::string_view sp : kPythonSpaces) {
      if (s.ends_with(sp)) {
        s.remove_suffix(sp.size());
        again = true;
        break;
      }
    }
  }
  return s;
}

void require_references(const std::vector<std::string>& references) {
  if (references.empty()) throw InputError("scoring: no reference answers");
}

bool contains_ci(std::string_view prediction_lower, const std::string& reference) {
  return prediction_lower.find(lower_latin1(reference)) != std::string_view::npos;
}

}  // namespace

std::string lower_latin1(std::string_view text) {
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto b = static_cast<unsigned char>(out[i]);
    if (b >= 'A' && b <= 'Z') {
      out[i] = static_cast<char>(b + ('a' - 'A'));
    } else if (b == 0xC3 && i + 1 < out.size()) {
      // U+00C0..U+00DE are C3 80..C3 9E; their lower case is 0x20 further (C3 A0..C3 BE). U+00D7 is ×.
      const auto c = static_cast<unsigned char>(out[i + 1]);
      if (c >= 0x80 && c <= 0x9E && c != 0x97) out[i + 1] = static_cast<char>(c + 0x20);
      ++i;
    }
  }
  return out;
}

std::string ruler_postprocess(std::string_view prediction) {
  std::string s(python_strip(prediction));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) <= 0x1F) c = '\n';
  }
  return std::string(python_strip(s));
}

double string_match_all(std::string_view prediction, const std::vector<std::string>& references) {
  require_references(references);
  const std::string pred = lower_latin1(prediction);
  double hits = 0.0;
  for (const std::string& r : references) hits += contains_ci(pred, r) ? 1.0 : 0.0;
  return hits / static_cast<double>(references.size());
}

double string_match_part(std::string_view prediction, const std::vector<std::string>& references) {
  require_references(references);
  const std::string pred = lower_latin1(prediction);
  for (const std::string& r : references) {
    if (contains_ci(pred, r)) return 1.0;
  }
  return 0.0;
}

const std::vector<std::string>& eval_metric_names() {
  static const std::vector<std::string> names = {"string_match_all", "string_match_part"};
  return names;
}

bool is_eval_metric(std::string_view name) {
  for (const std::string& n : eval_metric_names()) {
    if (n == name) return true;
  }
  return false;
}

std::string default_metric(std::string_view task) {
  return task.substr(0, task.find('_')) == "qa" ? "string_match_part" : "string_match_all";
}

double score(std::string_view metric, std::string_view prediction, const std::vector<std::string>& answers) {
  if (metric == "string_match_all") return string_match_all(ruler_postprocess(prediction), answers);
  if (metric == "string_match_part") return string_match_part(ruler_postprocess(prediction), answers);
  std::string known;
  for (const std::string& n : eval_metric_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown metric '" + std::string(metric) + "' (known: " + known + ")");
}

}  // namespace kvscope
