// libFuzzer: pipeline SPEC strings: the grammar (name[:key=value,...][+...]), preset expansion and
// typed parameter checking (resolve_params) against a ParamSpec table with every parameter type
// and range kind the built-in policies use (kvscope_spec, torch-free; the policies themselves need
// full ATen, see CMakeLists.txt; their registry is covered by the conformance tests under ASan).
// Oracle: bad SPECs throw InputError only; resolved numbers are finite and inside their range;
// the stages written back as a SPEC parse to the same stages.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/param_spec.h"
#include "kvscope/core/pipeline_spec.h"

namespace {

using kvscope::ParamSpec;

std::vector<ParamSpec> param_table() {
  using T = kvscope::ParamType;
  return {{"window", T::kInt, 1, 1 << 20, "64", {}, "", ""}, {"recent", T::kInt, -1, 1 << 20, "0", {}, "", ""},
          {"alpha", T::kFloat, 0, 1, "0.2", {}, "", ""},     {"pool", T::kChoice, 0, 0, "avg", {"avg", "max"}, "", ""},
          {"stage1", T::kBool, 0, 0, "true", {}, "", ""},    {"pattern", T::kPath, 0, 0, "", {}, "", ""}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  const std::vector<ParamSpec> table = param_table();
  std::vector<kvscope::StageSpec> stages;
  try {
    stages = kvscope::expand_pipeline_presets(spec);
    for (auto& s : stages) {
      s.params = kvscope::resolve_params(s.policy, table, s.params);
      for (const auto& p : table) {
        if (p.type != kvscope::ParamType::kInt && p.type != kvscope::ParamType::kFloat) continue;
        const double v = kvscope::param_float(s.params, p.key);
        if (!std::isfinite(v) || v < p.min || v > p.max) std::abort();
        if (p.type == kvscope::ParamType::kInt && static_cast<double>(kvscope::param_int(s.params, p.key)) != v)
          std::abort();
      }
    }
  } catch (const kvscope::InputError&) {
    return 0;
  }
  try {
    const auto again = kvscope::parse_pipeline_spec(kvscope::write_pipeline_spec(stages));
    if (again.size() != stages.size()) std::abort();
    for (size_t i = 0; i < again.size(); ++i)
      if (again[i].policy != stages[i].policy || again[i].params != stages[i].params) std::abort();
  } catch (const kvscope::InputError&) {
    std::abort();  // what was accepted must read back
  }
  return 0;
}
