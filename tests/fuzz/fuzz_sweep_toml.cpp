// libFuzzer: sweep grid TOML (models, prompts, pipelines, [budget], options).
// Oracle: bad grids throw InputError only; an accepted grid has every list non-empty with a line
// for each value, absolute model and prompt paths, prompts inside the grid's folder unless it
// allows others, budgets finite and inside their unit's range, and max_new_tokens >= 1.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "kvscope/core/budget.h"
#include "kvscope/core/errors.h"
#include "sweep_grid.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto g =
        kvscope::cli::parse_grid_text(std::string_view(reinterpret_cast<const char*>(data), size), "/grids/grid.toml");
    if (g.models.empty() || g.prompts.empty() || g.pipelines.empty() || g.budgets.empty() || g.max_new_tokens < 1)
      std::abort();
    if (g.model_lines.size() != g.models.size() || g.prompt_lines.size() != g.prompts.size() ||
        g.pipeline_lines.size() != g.pipelines.size() || g.budget_lines.size() != g.budgets.size() ||
        g.legacy_models.size() != g.models.size() || g.legacy_prompts.size() != g.prompts.size())
      std::abort();
    for (const auto& m : g.models)
      if (!std::filesystem::path(m).is_absolute()) std::abort();
    for (const auto& p : g.prompts)
      if (!std::filesystem::path(p).is_absolute() ||
          (!g.allow_prompts_outside_grid && p != "/grids" && p.rfind("/grids/", 0) != 0))
        std::abort();
    const auto unit = kvscope::find_budget_unit(g.budget_unit);
    if (!unit) std::abort();
    for (double b : g.budgets) {
      if (!std::isfinite(b)) std::abort();
      try {
        kvscope::BudgetSpec{*unit, b}.validate();
      } catch (const kvscope::InputError&) {
        std::abort();  // an accepted budget outside its unit's range
      }
    }
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
