#include "kvscope/core/pipeline_spec.h"

#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/presets.h"

namespace kvscope {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) ++a;
  while (b > a && is_space(s[b - 1])) --b;
  return std::string(s.substr(a, b - a));
}

}  // namespace

std::vector<StageSpec> parse_pipeline_spec(std::string_view spec) {
  std::vector<StageSpec> out;
  const std::string whole(spec);
  for (std::string_view part : split(spec, '+')) {
    const auto colon = part.find(':');
    StageSpec s;
    s.policy = trim(part.substr(0, colon));
    if (s.policy.empty()) throw InputError("pipeline '" + whole + "': empty stage name");
    if (colon != std::string_view::npos)
      for (std::string_view kv : split(part.substr(colon + 1), ',')) {
        const auto eq = kv.find('=');
        const std::string key = eq == std::string_view::npos ? std::string() : trim(kv.substr(0, eq));
        if (key.empty())
          throw InputError("pipeline '" + whole + "': expected key=value in stage '" + s.policy + "', got '" +
                           std::string(kv) + "'");
        if (!s.params.emplace(key, trim(kv.substr(eq + 1))).second)
          throw InputError("pipeline '" + whole + "': parameter '" + key + "' given twice");
      }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<StageSpec> expand_pipeline_presets(std::string_view spec) {
  std::vector<StageSpec> out;
  for (StageSpec& s : parse_pipeline_spec(spec)) {
    const auto preset = preset_spec(s.policy);
    if (!preset) {
      out.push_back(std::move(s));
      continue;
    }
    if (!s.params.empty())
      throw InputError("pipeline '" + std::string(spec) + "': preset '" + s.policy + "' takes no parameters (it is " +
                       *preset + "; write those stages out to change them)");
    for (StageSpec& e : parse_pipeline_spec(*preset)) out.push_back(std::move(e));
  }
  return out;
}

std::string write_pipeline_spec(const std::vector<StageSpec>& stages) {
  std::string out;
  for (const auto& s : stages) {
    out += (out.empty() ? "" : "+") + s.policy;
    std::string kv;
    for (const auto& [k, v] : s.params) kv += (kv.empty() ? ":" : ",") + k + "=" + v;
    out += kv;
  }
  return out;
}

}  // namespace kvscope
