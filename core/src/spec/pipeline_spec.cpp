// Pipeline SPEC strings: `name[:key=value,...][+...]`, preset expansion, budget units (no ATen).
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/presets.h"

namespace kvscope {
namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

}  // namespace

std::vector<StageSpec> parse_pipeline_spec(std::string_view spec) {
  std::vector<StageSpec> out;
  for (const std::string& part : split(spec, '+')) {
    const auto colon = part.find(':');
    StageSpec s;
    s.policy = part.substr(0, colon);
    if (s.policy.empty()) throw InputError("pipeline '" + std::string(spec) + "': empty stage name");
    if (colon != std::string::npos)
      for (const std::string& kv : split(std::string_view(part).substr(colon + 1), ',')) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
          throw InputError("pipeline '" + std::string(spec) + "': expected key=value in stage '" + s.policy + "', got '" + kv + "'");
        if (!s.params.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second)
          throw InputError("pipeline '" + std::string(spec) + "': parameter '" + kv.substr(0, eq) + "' given twice");
      }
    out.push_back(std::move(s));
  }
  return out;
}

BudgetSpec::Unit parse_budget_unit(const std::string& text) {
  if (text == "stored") return BudgetSpec::Unit::kStored;
  if (text == "fetched") return BudgetSpec::Unit::kFetched;
  if (text == "fraction") return BudgetSpec::Unit::kFraction;
  throw InputError("unknown --budget-unit '" + text + "' (expected stored, fetched or fraction)");
}

/// Stages of `spec` with preset names (presets.h) expanded in place.
std::vector<StageSpec> expand_pipeline_presets(std::string_view spec) {
  std::vector<StageSpec> out;
  for (StageSpec& s : parse_pipeline_spec(spec)) {
    const auto preset = preset_spec(s.policy);
    if (!preset) {
      out.push_back(std::move(s));
      continue;
    }
    if (!s.params.empty())
      throw InputError("pipeline '" + std::string(spec) + "': preset '" + s.policy + "' takes no parameters (it is " + *preset +
                       "; write those stages out to change them)");
    for (StageSpec& e : parse_pipeline_spec(*preset)) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kvscope
