#pragma once
// The pipeline editor of the Run window, generated from the policy catalogue (core's torch-free
// description: kvscope/core/policy_catalog.h), which the app takes from its PolicyRegistry once in
// main. Editing state is typed (int64 / double / bool / choice index / text); to_values() turns a
// stage into the ParamValues text a pipeline SPEC carries (ints as integers, floats in shortest
// round-trip form, bools as true/false), which resolve_params() accepts unchanged. SPEC text is
// parsed and checked by core (parse_pipeline_spec, resolve_pipeline), as the CLI does.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/policy_catalog.h"

namespace kvscope {
struct Preset;
}

namespace kvscope::gui {

/// The value of one parameter while being edited; only the member of its kind is used.
struct ParamEdit {
  std::string key;
  ParamType type = ParamType::kInt;
  std::int64_t i = 0;
  double f = 0;
  bool b = false;
  int choice = 0;
  std::string text;
};

/// One stage being edited.
struct StageEdit {
  std::string policy;
  std::vector<ParamEdit> params;  ///< in ParamSpec order
};

/// A pipeline being edited.
struct PipelineEdit {
  std::vector<StageEdit> stages;
};

/// A stage of `policy` with every parameter at its default. Throws InputError for a default that
/// does not parse as its type.
StageEdit default_stage(const PolicyDescription& policy);
/// Sets one parameter from its SPEC text (checked by check_param, range included). Throws
/// InputError naming the policy, the key and the problem.
void set_param_text(ParamEdit& p, const std::string& policy, const ParamSpec& info, const std::string& text);
/// The SPEC text of one parameter.
std::string param_text(const ParamEdit& p, const ParamSpec& info);
/// key -> SPEC text of every parameter of the stage (core ParamValues).
std::map<std::string, std::string> to_values(const StageEdit& stage, const PolicyCatalog& catalog);
/// The SPEC: "policy:k=v,...+policy:...", every parameter written out.
std::string to_spec(const PipelineEdit& edit, const PolicyCatalog& catalog);
/// Parses a SPEC (core's grammar, presets expanded) into an edit. Throws InputError for unknown
/// policies or keys, malformed text and out-of-range values.
PipelineEdit from_spec(std::string_view spec, const PolicyCatalog& catalog);
/// Problems of an edit (resolve_pipeline's: out-of-range values, no scoring stage, stages out of
/// order, ...); empty if none.
std::vector<std::string> check(const PipelineEdit& edit, const PolicyCatalog& catalog);

/// Draws the editor (stages with typed widgets, add/remove/reorder, presets). Returns true when
/// the edit changed this frame. When a preset was loaded this frame, `*loaded` (if given) points
/// to it (its budget unit and value are for the caller's budget fields), else it is left alone.
bool draw_pipeline_editor(PipelineEdit& edit, const PolicyCatalog& catalog, const Preset** loaded = nullptr);

}  // namespace kvscope::gui
