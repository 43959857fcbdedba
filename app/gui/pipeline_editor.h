#pragma once
// The pipeline editor of the Run window, generated from the PolicyRegistry's ParamSpec tables.
// PolicyCatalog is a torch-free copy of the registry (names, stages, ParamSpec, presets) so the
// panels compile without LibTorch headers; make_catalog() builds it once in main.
// Editing state is typed (int64 / double / bool / choice index / text); to_values() turns a stage
// into the ParamValues text a pipeline SPEC carries (ints as integers, floats in shortest
// round-trip form, bools as true/false), which resolve_params() accepts unchanged.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {
class PolicyRegistry;
}

namespace kvscope::gui {

enum class ParamKind { kInt, kFloat, kChoice, kBool, kPath };

/// One parameter of a policy (core ParamSpec).
struct ParamInfo {
  std::string key;
  ParamKind kind = ParamKind::kInt;
  double min = 0, max = 0;
  std::string default_value;
  std::vector<std::string> choices;
  std::string help;
  std::string paper_ref;
};

/// One registered policy (core PolicyRegistry::Entry).
struct PolicyInfo {
  std::string name;
  int stage = 0;           ///< core Stage as int (execution order)
  std::string stage_name;  ///< "head_pattern", "scoring", "budget", ...
  std::string summary;
  std::vector<ParamInfo> params;
};

/// A named pipeline (core presets.h).
struct PresetInfo {
  std::string name, spec, budget, paper_ref;
};

struct PolicyCatalog {
  std::vector<PolicyInfo> policies;  ///< in stage order, then by name
  std::vector<PresetInfo> presets;
  const PolicyInfo* find(std::string_view name) const;
  const PresetInfo* find_preset(std::string_view name) const;
};

/// The catalogue of `registry` and the built-in presets (stage names as in docs/sessions.md).
PolicyCatalog make_catalog(const PolicyRegistry& registry);

/// Stage name of a core Stage value ("head_pattern", "scoring", "budget", "retention", "channel",
/// "decode_selection", "maintenance", "multi_turn").
std::string stage_name(int stage);

/// The value of one parameter while being edited; only the member of its kind is used.
struct ParamEdit {
  std::string key;
  ParamKind kind = ParamKind::kInt;
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

/// A stage of `policy` with every parameter at its default. Throws std::invalid_argument for a
/// default that does not parse as its type.
StageEdit default_stage(const PolicyInfo& policy);
/// Sets one parameter from its SPEC text. Throws std::invalid_argument naming the key.
void set_param_text(ParamEdit& p, const ParamInfo& info, const std::string& text);
/// The SPEC text of one parameter.
std::string param_text(const ParamEdit& p, const ParamInfo& info);
/// key -> SPEC text of every parameter of the stage (core ParamValues).
std::map<std::string, std::string> to_values(const StageEdit& stage, const PolicyCatalog& catalog);
/// The SPEC: "policy:k=v,...+policy:...", every parameter written out.
std::string to_spec(const PipelineEdit& edit, const PolicyCatalog& catalog);
/// Parses a SPEC (presets expanded) into an edit. Throws std::invalid_argument for unknown
/// policies or keys and malformed text.
PipelineEdit from_spec(std::string_view spec, const PolicyCatalog& catalog);
/// Problems of an edit (out-of-range values, no scoring stage, stages out of order); empty if none.
std::vector<std::string> check(const PipelineEdit& edit, const PolicyCatalog& catalog);

/// Shortest text that parses back to exactly `v` ("0.2", "64", "1e-05").
std::string format_double(double v);

/// Draws the editor (stages with typed widgets, add/remove/reorder, presets). Returns true when
/// the edit changed this frame.
bool draw_pipeline_editor(PipelineEdit& edit, const PolicyCatalog& catalog);

}  // namespace kvscope::gui
