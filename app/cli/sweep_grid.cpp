#include "sweep_grid.h"

namespace kvscope::cli {
/// Thrown by toml++'s internal checks (TOML_ASSERT below).
struct TomlCheckFailed {};
}  // namespace kvscope::cli

// toml++ 3.3 states its parser's invariants as TOML_ASSERT_ASSUME, which with NDEBUG becomes
// __builtin_assume: text that breaks one (fuzz_sweep_toml found several) is undefined behaviour.
// Compiled here without NDEBUG and with a throwing TOML_ASSERT, a broken invariant is an error
// that parse_grid_text reports as invalid TOML. (This is the only file that includes toml++.)
#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_ASSERT(expr) ((expr) ? static_cast<void>(0) : throw ::kvscope::cli::TomlCheckFailed{})
#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>
#pragma pop_macro("NDEBUG")

#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "kvscope/core/budget.h"
#include "kvscope/core/errors.h"

namespace kvscope::cli {
namespace {

template <class T>
std::vector<T> array_of(const toml::table& t, const char* key, const std::filesystem::path& file) {
  std::vector<T> out;
  const auto* arr = t[key].as_array();
  if (!arr) throw InputError(file, std::string("missing array '") + key + "'");
  for (const auto& e : *arr) {
    auto v = e.value<T>();
    if (!v) throw InputError(file, std::string("'") + key + "' has an element of the wrong type");
    out.push_back(*v);
  }
  if (out.empty()) throw InputError(file, std::string("'") + key + "' is empty");
  return out;
}

/// The string at `key`, `fallback` if absent; InputError if present but not a string.
std::string string_or(const toml::table& t, const char* key, const std::string& fallback,
                      const std::filesystem::path& file) {
  const auto node = t[key];
  if (!node) return fallback;
  const auto v = node.value<std::string>();
  if (!v || !node.is_string()) throw InputError(file, std::string("'") + key + "' must be a string");
  return *v;
}

bool is_bare_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/// toml++ 3.3's is_non_ascii_horizontal_whitespace() reaches __builtin_unreachable for these code
/// points (the lookup's bitmask lets them through to a switch without their case), and the parser
/// asks it about characters of keys and values, quoted ones included.
bool toml_3_3_cannot_read(char32_t cp) {
  return (cp >= 0xA1 && cp <= 0x499) || (cp >= 0x2C6E && cp <= 0x3067 && cp != 0x3000) ||
         (cp >= 0xFB26 && cp <= 0xFEFE);
}

/// The code point of the UTF-8 sequence at text[i] (advancing i to its last byte); 0 if invalid.
char32_t code_point_at(std::string_view text, size_t& i) {
  const auto b = static_cast<unsigned char>(text[i]);
  const int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
  char32_t cp = extra == 3 ? b & 0x07 : extra == 2 ? b & 0x0F : b & 0x1F;
  if (extra == 0 || i + extra >= text.size()) return 0;
  for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  i += extra;
  return cp;
}

/// toml++ 3.3 (Debian 12) reaches undefined behaviour (__builtin_unreachable, or an assumption
/// that is false) on some text before it reports an error, so that text is refused first:
///  - outside comments, a character toml_3_3_cannot_read() (e.g. 'é', 'ü', Greek, Cyrillic);
///    inside a "basic string" it can be written as an escape, e.g. "\u00FC";
///  - a table header '[' / '[[' not followed by a key or ']' (e.g. "[" and a newline: parse_key's
///    TOML_ASSERT_ASSUME).
/// Returns what is wrong with the line number, or "".
std::string toml_3_3_hazard(std::string_view text) {
  size_t line = 1;
  bool line_start = true, in_value = false;
  int depth = 0;  // [ ] nesting inside a value (arrays)
  auto unreadable = [&](size_t& i) {
    if (static_cast<unsigned char>(text[i]) < 0x80) return false;
    const char32_t cp = code_point_at(text, i);
    return cp != 0 && toml_3_3_cannot_read(cp);
  };
  auto unreadable_message = [&] {
    return "a character outside comments that kvscope's TOML library (toml++ 3.3) cannot read (line " +
           std::to_string(line) + "); in a \"string\" write it as an escape, e.g. \\u00FC for \u00FC";
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      if (depth == 0) in_value = false;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    const bool at_line_start = std::exchange(line_start, false);
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = text.substr(i, 3) == std::string(3, c);
      const std::string close = multi ? std::string(3, c) : std::string(1, c);
      for (i += close.size(); i < text.size() && text.compare(i, close.size(), close) != 0; ++i) {
        // Basic strings: step over a backslash to the escaped character, which toml++ also asks
        // about (after a line-ending backslash it must be whitespace).
        if (c == '"' && text[i] == '\\' && ++i >= text.size()) break;
        if (text[i] == '\n') ++line;
        if (unreadable(i)) return unreadable_message();
      }
      if (multi)  // a closing run of 4 or 5 quotes ends with the string's last 1 or 2 quotes
        while (i + close.size() < text.size() && text[i + close.size()] == c) ++i;
      i += close.size() - 1;
    } else if (c == '=') {
      in_value = true;
    } else if (c == '[' && (in_value || depth > 0)) {
      ++depth;
    } else if (c == ']' && depth > 0) {
      --depth;
    } else if (c == '[' && at_line_start) {  // a table header
      size_t j = i + 1;
      if (j < text.size() && text[j] == '[') ++j;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
      if (j < text.size() && !is_bare_key_char(text[j]) && text[j] != '"' && text[j] != '\'' && text[j] != ']')
        return "a table header without a name after '[' (line " + std::to_string(line) + ")";
    } else if (unreadable(i)) {
      return unreadable_message();
    }
  }
  return "";
}

}  // namespace

Grid parse_grid_text(std::string_view text, const std::filesystem::path& file) {
  if (const std::string hazard = toml_3_3_hazard(text); !hazard.empty())
    throw InputError(file, "not valid TOML: " + hazard);
  toml::table t;
  try {
    t = toml::parse(text, file.string());
  } catch (const TomlCheckFailed&) {
    throw InputError(file, "not valid TOML: refused by an internal check of toml++");
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << "not valid TOML: " << e.description() << " (line " << e.source().begin.line << ")";
    throw InputError(file, os.str());
  }
  Grid g;
  const auto base = file.parent_path();
  auto resolve = [&](const std::string& p) {
    return std::filesystem::path(p).is_absolute() ? p : (base / p).lexically_normal().string();
  };
  for (auto& m : array_of<std::string>(t, "models", file)) g.models.push_back(resolve(m));
  for (auto& p : array_of<std::string>(t, "prompts", file)) g.prompts.push_back(resolve(p));
  g.pipelines = array_of<std::string>(t, "pipelines", file);
  const auto* budget = t["budget"].as_table();
  if (!budget) throw InputError(file, "missing [budget] table (unit, values)");
  g.budget_unit = string_or(*budget, "unit", "ratio", file);
  g.budgets = array_of<double>(*budget, "values", file);
  for (double b : g.budgets)
    if (!std::isfinite(b)) throw InputError(file, "[budget] values must be finite numbers");
  if (const auto n = t["max_new_tokens"]) {
    const auto v = n.value<int64_t>();
    if (!n.is_integer() || !v || *v < 1) throw InputError(file, "'max_new_tokens' must be an integer >= 1");
    g.max_new_tokens = *v;
  }
  g.bos = string_or(t, "bos", "auto", file);
  if (g.bos != "auto" && g.bos != "always" && g.bos != "never")
    throw InputError(file, "'bos' must be \"auto\", \"always\" or \"never\" (got \"" + g.bos + "\")");
  g.device = string_or(t, "device", "cpu", file);
  g.dtype = string_or(t, "dtype", "fp32", file);
  g.capture = string_or(t, "capture", "summary", file);
  g.reference_full = string_or(t, "reference", "full", file) == "full";
  if (const auto a = t["allow_beyond_context"]) {
    if (!a.is_boolean()) throw InputError(file, "'allow_beyond_context' must be true or false");
    g.allow_beyond_context = a.value_or(false);
  }
  if (!find_budget_unit(g.budget_unit))
    throw InputError(
        file, "[budget] unit: '" + g.budget_unit + "' is not ratio, compression_ratio, stored, fetched or fraction");
  return g;
}

Grid parse_grid(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, std::filesystem::exists(file) ? "cannot be read" : "no such file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_grid_text(ss.str(), file);
}

}  // namespace kvscope::cli
