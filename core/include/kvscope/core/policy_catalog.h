#pragma once
// The catalogue of compression policies as data: name, stage, ParamSpec table and summary of every
// registered policy, and the validation of a pipeline SPEC against it (stage rules, parameters).
// Torch-free (kvscope_spec): the GUI's pipeline editor, the CLI's `policies` listing and the session
// writer read it; PolicyRegistry (policy.h) adds the factories that build the policies.
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/param_spec.h"
#include "kvscope/core/pipeline_spec.h"
#include "kvscope/core/stage.h"

namespace kvscope {

/// One registered policy, without its implementation.
struct PolicyDescription {
  std::string name;
  Stage stage = Stage::kScoring;
  std::vector<ParamSpec> params;
  std::string summary;  ///< one line with the paper reference
  /// Scoring policies: what the per-token score means (higher = keep) and which entries it always
  /// keeps, with the paper section; what the views label the decisive score with. Empty otherwise.
  std::string score;
  /// Scoring policies: the layer-budget policy the paper defines its method with, added (with its
  /// defaults) when the pipeline names no layer budget ("pyramid" for pyramidkv). Empty otherwise.
  std::string layer_budget;
};

/// One stage of a validated pipeline: its policy and every parameter resolved.
struct ResolvedStage {
  const PolicyDescription* policy = nullptr;
  ParamValues params;
};

class PolicyCatalog {
 public:
  /// Adds or replaces the policy of that name.
  void add(PolicyDescription d);
  /// The policy named `name`, or nullptr.
  const PolicyDescription* find(std::string_view name) const;
  /// The policy named `name`. Throws InputError("unknown policy 'x' (known: ...)").
  const PolicyDescription& at(std::string_view name) const;
  /// Every policy, in stage order, then by name.
  const std::vector<PolicyDescription>& policies() const { return policies_; }

 private:
  std::vector<PolicyDescription> policies_;
};

/// Validates `spec` (presets expanded) against `catalog` and returns its stages with every
/// parameter resolved. Rules: known policies and parameters (resolve_params); stages in execution
/// order (a channel stage written after a selection stage moves before it); at most one
/// head-pattern, scoring, layer-budget, budget, channel-pruning and decode-time selection stage (a
/// channel stage with sign=positive refused under a selection); a
/// head-pattern, scoring or decode-time stage present; no head pattern together with a scoring
/// stage; a layer budget only with a scoring stage; a maintenance stage (decode-time eviction) only
/// with a scoring stage and without a decode-time attention stage. A scoring stage without a layer budget gets its
/// description's `layer_budget` (if any), and without a budget stage `uniform` (when the catalog
/// has it), each right after the stage before it. Throws InputError("pipeline '<spec>': ...").
std::vector<ResolvedStage> resolve_pipeline(const PolicyCatalog& catalog, std::string_view spec);

/// The canonical SPEC of resolved stages, every parameter written out (what a session stores).
std::string canonical_spec(const std::vector<ResolvedStage>& stages);

/// Whether any stage runs under the run's budget (StageInfo::uses_budget). A pipeline of a head
/// pattern or channel pruning alone takes no budget.
bool pipeline_uses_budget(const std::vector<ResolvedStage>& stages);

}  // namespace kvscope
