// libFuzzer: sweep grid TOML (models, prompts, pipelines, [budget], options).
// Oracle: bad grids throw InputError only; an accepted grid has every list non-empty, finite
// budgets and max_new_tokens >= 1.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kvscope/core/errors.h"
#include "sweep_grid.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto g =
        kvscope::cli::parse_grid_text(std::string_view(reinterpret_cast<const char*>(data), size), "/grids/grid.toml");
    if (g.models.empty() || g.prompts.empty() || g.pipelines.empty() || g.budgets.empty() || g.max_new_tokens < 1)
      std::abort();
    for (double b : g.budgets)
      if (!std::isfinite(b)) std::abort();
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
