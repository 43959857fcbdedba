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

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "kvscope/core/budget.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/param_spec.h"
#include "kvscope/core/policy_catalog.h"

namespace kvscope::cli {
namespace {

/// Every key a grid may hold (add a key here and where parse_grid_text reads it).
constexpr std::string_view kTopKeys[] = {"models",
                                         "prompts",
                                         "pipelines",
                                         "turns",
                                         "budget",
                                         "max_new_tokens",
                                         "bos",
                                         "device",
                                         "dtype",
                                         "capture",
                                         "pin",
                                         "reference",
                                         "allow_prompts_outside_grid",
                                         "allow_beyond_context"};
constexpr std::string_view kBudgetKeys[] = {"unit", "values"};

template <class Keys>
bool is_one_of(std::string_view key, const Keys& keys) {
  return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

/// "unknown key 'max_new_token' (did you mean 'max_new_tokens'?; a grid has: ...)".
template <class Keys>
std::string unknown_key(std::string_view key, const Keys& keys, const std::string& table) {
  std::string known, nearest;
  size_t best = 3;  // suggest only a key within 2 edits
  for (const auto k : keys) {
    known += (known.empty() ? "" : ", ") + std::string(k);
    if (const size_t d = edit_distance(key.substr(0, 64), k); d < best) best = d, nearest = k;
  }
  std::string key_text(key.substr(0, 64));
  for (char& c : key_text)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return "unknown " + table + "key '" + key_text + "'" + (nearest.empty() ? "" : " (did you mean '" + nearest + "'?)") +
         "; " + (table.empty() ? "a grid " : table) + "has: " + known;
}

template <class Node>
int64_t line_of(const Node& n) {
  return static_cast<int64_t>(n.source().begin.line);
}

/// The strings of the array at `key`, each with its line. InputError("FILE:LINE", ...) if missing,
/// not an array, empty, or holding a non-string, an empty string or a NUL character.
std::vector<std::pair<std::string, int64_t>> strings_of(const toml::table& t, const char* key, const Grid& g) {
  const toml::node* n = t.get(key);
  if (!n) throw InputError(g.file, std::string("missing array '") + key + "'");
  const auto* arr = n->as_array();
  if (!arr) throw InputError(g.where(line_of(*n)), std::string("'") + key + "' must be an array of strings");
  if (arr->empty()) throw InputError(g.where(line_of(*n)), std::string("'") + key + "' is empty");
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& e : *arr) {
    const auto* s = e.as_string();
    if (!s) throw InputError(g.where(line_of(e)), std::string("'") + key + "' has an element that is not a string");
    if (s->get().empty()) throw InputError(g.where(line_of(e)), std::string("'") + key + "' has an empty string");
    if (s->get().find('\0') != std::string::npos)
      throw InputError(g.where(line_of(e)), std::string("'") + key + "' has a string with a NUL character");
    out.emplace_back(s->get(), line_of(e));
  }
  return out;
}

/// The string at `key`, `fallback` if absent; InputError if present but not a string.
std::string string_or(const toml::table& t, const char* key, const std::string& fallback, const Grid& g) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  const auto* s = n->as_string();
  if (!s) throw InputError(g.where(line_of(*n)), std::string("'") + key + "' must be a string");
  return s->get();
}

/// `p` absolute, with symbolic links and `..` resolved as far as it exists (lexically beyond).
std::filesystem::path canonical_path(const std::filesystem::path& p) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(p, ec);
  if (ec) return p.lexically_normal();
  std::filesystem::path c = std::filesystem::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : c;
}

/// The canonical folder relative paths of the grid `file` resolve against.
std::filesystem::path grid_folder(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(file, ec);
  return canonical_path((ec ? file : abs).parent_path());
}

/// Whether canonical `p` lies inside canonical `folder` (at any depth).
bool is_inside(const std::filesystem::path& p, const std::filesystem::path& folder) {
  const auto rel = p.lexically_relative(folder);
  return !rel.empty() && *rel.begin() != "..";
}

std::string unit_range(BudgetUnit u) {
  switch (u) {
    case BudgetUnit::kCompressionRatio:
      return "[0, 1)";
    case BudgetUnit::kFraction:
      return "(0, 1]";
    default:
      return "[1, inf)";
  }
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

Grid parse_grid_text(std::string_view text, const std::filesystem::path& file, const std::string& messages_file) {
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
  g.file = file;
  // Unknown keys first: a misspelt key is what the other errors would most likely come from.
  // (A table iterates in key order: report the first unknown key by line.)
  const toml::key* unknown = nullptr;
  for (auto&& [k, v] : t) {
    if (!is_one_of(k.str(), kTopKeys) && (!unknown || line_of(k) < line_of(*unknown))) unknown = &k;
    g.key_lines[std::string(k.str())] = line_of(k);
  }
  if (unknown) throw InputError(g.where(line_of(*unknown)), unknown_key(unknown->str(), kTopKeys, ""));
  const toml::node* budget_node = t.get("budget");
  if (!budget_node) throw InputError(file, "missing [budget] table (unit, values)");
  const toml::table* budget = budget_node->as_table();
  if (!budget) throw InputError(g.where("budget"), "'budget' must be a table: [budget] with unit and values");
  for (auto&& [k, v] : *budget) {
    if (!is_one_of(k.str(), kBudgetKeys) && (!unknown || line_of(k) < line_of(*unknown))) unknown = &k;
    g.key_lines["budget." + std::string(k.str())] = line_of(k);
  }
  if (unknown) throw InputError(g.where(line_of(*unknown)), unknown_key(unknown->str(), kBudgetKeys, "[budget] "));

  // Paths: relative ones against the grid's folder (the one holding the file as named, links in
  // the folder's own path resolved), then canonical and absolute, so that a sweep key names the
  // same file from whatever directory the sweep runs in.
  const std::filesystem::path folder = grid_folder(file);
  auto resolve = [&](const std::string& p) {
    return canonical_path(std::filesystem::path(p).is_absolute() ? std::filesystem::path(p) : folder / p).string();
  };
  auto legacy = [&](const std::string& p) {
    return std::filesystem::path(p).is_absolute() ? p : (file.parent_path() / p).lexically_normal().string();
  };
  for (const auto& [m, line] : strings_of(t, "models", g)) {
    g.models.push_back(resolve(m));
    g.legacy_models.push_back(legacy(m));
    g.model_lines.push_back(line);
  }
  if (const toml::node* n = t.get("allow_prompts_outside_grid")) {
    const auto* b = n->as_boolean();
    if (!b) throw InputError(g.where(line_of(*n)), "'allow_prompts_outside_grid' must be true or false");
    g.allow_prompts_outside_grid = b->get();
  }
  if (!messages_file.empty()) {
    // sweep --messages: one conversation is the prompt of every run, in place of the grid's prompts.
    if (const toml::node* n = t.get("prompts"))
      throw InputError(g.where(line_of(*n)), "--messages " + messages_file +
                                                 " is the prompt of every run: the grid's 'prompts' would be "
                                                 "unused; remove them or drop --messages");
    g.prompts.push_back(canonical_path(std::filesystem::absolute(messages_file)).string());
    g.legacy_prompts.push_back(messages_file);
    g.prompt_lines.push_back(0);
  }
  for (const auto& [p, line] :
       messages_file.empty() ? strings_of(t, "prompts", g) : std::vector<std::pair<std::string, int64_t>>{}) {
    g.prompts.push_back(resolve(p));
    g.legacy_prompts.push_back(legacy(p));
    g.prompt_lines.push_back(line);
    if (!g.allow_prompts_outside_grid && !is_inside(g.prompts.back(), folder))
      throw InputError(g.where(line), "prompt '" + p + "' is outside the grid's folder " + folder.string() +
                                          " (it is " + g.prompts.back() +
                                          "); write allow_prompts_outside_grid = true in the grid to allow it");
  }
  for (const auto& [p, line] : strings_of(t, "pipelines", g)) {
    g.pipelines.push_back(p);
    g.pipeline_lines.push_back(line);
  }

  g.budget_unit = string_or(*budget, "unit", "ratio", g);
  const auto unit = find_budget_unit(g.budget_unit);
  if (!unit)
    throw InputError(g.where("budget.unit"), "[budget] unit '" + g.budget_unit +
                                                 "' is not ratio, compression_ratio, stored, fetched or fraction");
  const toml::node* values = budget->get("values");
  if (!values) throw InputError(g.where("budget"), "missing array 'values' in [budget]");
  const auto* arr = values->as_array();
  if (!arr) throw InputError(g.where(line_of(*values)), "[budget] values must be an array of numbers");
  if (arr->empty()) throw InputError(g.where(line_of(*values)), "[budget] values is empty");
  for (const auto& e : *arr) {
    const auto v = e.value<double>();
    if (!e.is_number() || !v)
      throw InputError(g.where(line_of(e)), "[budget] values has an element that is not a number");
    if (!std::isfinite(*v))
      throw InputError(g.where(line_of(e)), "[budget] values must be finite numbers (got " + format_number(*v) + ")");
    try {
      BudgetSpec{*unit, *v}.validate();
    } catch (const InputError&) {
      throw InputError(g.where(line_of(e)), "[budget] value " + format_number(*v) + " is outside " + unit_range(*unit) +
                                                ", the range of unit " + std::string(budget_unit_name(*unit)));
    }
    g.budgets.push_back(*v);
    g.budget_lines.push_back(line_of(e));
  }

  if (t.get("turns")) {
    if (!messages_file.empty())
      throw InputError(g.where("turns"), "'turns' with --messages: give the whole conversation in the messages file");
    for (const auto& [turn, line] : strings_of(t, "turns", g)) g.turns.push_back(turn);
  }
  if (const toml::node* n = t.get("max_new_tokens")) {
    const auto v = n->value<int64_t>();
    if (!n->is_integer() || !v || *v < 1)
      throw InputError(g.where(line_of(*n)), "'max_new_tokens' must be an integer >= 1");
    g.max_new_tokens = *v;
  }
  g.bos = string_or(t, "bos", "auto", g);
  if (g.bos != "auto" && g.bos != "always" && g.bos != "never")
    throw InputError(g.where("bos"), "'bos' must be \"auto\", \"always\" or \"never\" (got \"" + g.bos + "\")");
  g.device = string_or(t, "device", "cpu", g);  // device, dtype and capture: checked by cmd_sweep (LibTorch)
  g.dtype = string_or(t, "dtype", "fp32", g);
  g.capture = string_or(t, "capture", "summary", g);
  g.pin = string_or(t, "pin", "", g);  // checked by cmd_sweep (run::parse_pinned_heads)
  const std::string reference = string_or(t, "reference", "full", g);
  if (reference != "full" && reference != "off")
    throw InputError(g.where("reference"), "'reference' must be \"full\" or \"off\" (got \"" + reference + "\")");
  g.reference_full = reference == "full";
  if (const auto a = t["allow_beyond_context"]) {
    if (!a.is_boolean())
      throw InputError(g.where("allow_beyond_context"), "'allow_beyond_context' must be true or false");
    g.allow_beyond_context = a.value_or(false);
  }
  return g;
}

std::vector<GridPipeline> resolve_grid_pipelines(const Grid& g, const PolicyCatalog& catalog) {
  const std::filesystem::path folder = grid_folder(g.file);
  std::vector<GridPipeline> out;
  for (size_t i = 0; i < g.pipelines.size(); ++i) {
    const std::string& written = g.pipelines[i];
    const std::string where = g.where(i < g.pipeline_lines.size() ? g.pipeline_lines[i] : 0);
    const std::string prefix = "pipeline '" + written + "'";
    std::vector<ResolvedStage> stages;
    try {
      stages = resolve_pipeline(catalog, written);
    } catch (const InputError& e) {
      const std::string what = e.what();
      throw InputError(where, what.rfind(prefix, 0) == 0 ? what : prefix + ": " + what);
    }
    // Path parameters (a head-pattern file) resolve against the grid's folder, as models do.
    for (auto& st : stages)
      for (const ParamSpec& p : st.policy->params) {
        auto it = st.params.find(p.key);
        if (p.type != ParamType::kPath || it == st.params.end() || it->second.empty()) continue;
        const std::filesystem::path given(it->second);
        it->second = canonical_path(given.is_absolute() ? given : folder / given).string();
      }
    GridPipeline gp{canonical_spec(stages), pipeline_uses_budget(stages)};
    // The canonical SPEC must mean the same stages (a path with '+', ',' or '=' would not).
    bool same = false;
    try {
      const auto again = resolve_pipeline(catalog, gp.spec);
      same = again.size() == stages.size();
      for (size_t s = 0; same && s < stages.size(); ++s)
        same = again[s].policy == stages[s].policy && again[s].params == stages[s].params;
    } catch (const InputError&) {
    }
    if (!same)
      throw InputError(where, prefix + ": a file path in it, made absolute (" + gp.spec +
                                  "), holds a character of the SPEC grammar (+ , : =); move or link the file");
    out.push_back(std::move(gp));
  }
  return out;
}

uint64_t grid_run_count(const Grid& g, const std::vector<GridPipeline>& pipelines) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t per_model_prompt = 0;
  for (const auto& p : pipelines) {
    const uint64_t n = p.uses_budget ? g.budgets.size() : 1;
    if (__builtin_add_overflow(per_model_prompt, n, &per_model_prompt)) return kMax;
  }
  uint64_t n = 0;
  if (__builtin_mul_overflow(uint64_t(g.models.size()), uint64_t(g.prompts.size()), &n) ||
      __builtin_mul_overflow(n, per_model_prompt, &n))
    return kMax;
  return n;
}

void check_grid_files(const Grid& g) {
  namespace fs = std::filesystem;
  for (size_t i = 0; i < g.models.size(); ++i) {
    std::error_code ec;
    if (!fs::exists(g.models[i], ec))
      throw InputError(g.where(g.model_lines[i]), "model '" + g.models[i] + "': no such file or directory");
  }
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    const std::string where = g.where(g.prompt_lines[i]);
    std::error_code ec;
    const auto st = fs::status(g.prompts[i], ec);
    if (!fs::exists(st)) throw InputError(where, "prompt file '" + g.prompts[i] + "': no such file");
    if (!fs::is_regular_file(st)) throw InputError(where, "prompt file '" + g.prompts[i] + "' is not a regular file");
    if (!std::ifstream(g.prompts[i], std::ios::binary))
      throw InputError(where, "prompt file '" + g.prompts[i] + "' cannot be read");
  }
}

std::string Grid::where(int64_t line) const {
  return line > 0 ? file.string() + ":" + std::to_string(line) : file.string();
}

std::string Grid::where(const std::string& key) const {
  const auto it = key_lines.find(key);
  return where(it == key_lines.end() ? 0 : it->second);
}

Grid parse_grid(const std::filesystem::path& file, const std::string& messages_file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, std::filesystem::exists(file) ? "cannot be read" : "no such file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_grid_text(ss.str(), file, messages_file);
}

}  // namespace kvscope::cli
