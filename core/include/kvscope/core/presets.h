#pragma once
// Named pipelines reproducing each paper's main configuration. A preset name may be used as a
// stage in a pipeline SPEC; it expands to its stages.
#include <optional>
#include <string>
#include <vector>

#include "kvscope/core/budget.h"

namespace kvscope {

struct Preset {
  std::string name;
  std::string spec;    ///< pipeline SPEC it expands to
  std::string budget;  ///< the budget the paper reports it under (documentation)
  BudgetUnit unit;     ///< the unit of `budget` (what loading the preset sets)
  double value;        ///< a typical value in that unit (what loading the preset sets)
  std::string paper_ref;
};

/// Every preset, in display order.
const std::vector<Preset>& pipeline_presets();
/// The SPEC of preset `name`, or nullopt.
std::optional<std::string> preset_spec(const std::string& name);

}  // namespace kvscope
