#pragma once
// The stage model of a compression pipeline (docs/architecture.md "The stage model"): which stages
// exist, in execution order, and the one table of their names. Torch-free (kvscope_spec).
#include <array>
#include <optional>
#include <string_view>

namespace kvscope {

/// Pipeline stages, in execution order (S0..S7; S2 is budget allocation: first across layers, then
/// across the KV heads of a layer).
enum class Stage {
  kHeadPattern,
  kScoring,
  kLayerBudget,
  kBudget,
  kRetention,
  kChannel,
  kDecodeSelection,
  kMaintenance,
  kMultiTurn
};

/// One row of the stage table.
struct StageInfo {
  Stage stage;
  std::string_view key;  ///< stored and machine name: "head_pattern", "scoring", ... (sessions' pipeline_stages.stage)
  std::string_view label;  ///< display name: "S1 scoring", "S5 decode selection", ...
  /// Whether a policy of this stage runs under the run's budget (scoring and budget allocation
  /// evict to it, decode selection fetches it). A pipeline none of whose stages does takes no budget.
  bool uses_budget;
  /// Whether the stage replaces the decode step's attention (one such stage per pipeline).
  bool decode_time;
};

/// Every stage, in execution order.
const std::array<StageInfo, 9>& stage_table();
/// The row of `s`.
const StageInfo& stage_info(Stage s);
/// stage_info(s).key, e.g. "decode_selection".
std::string_view stage_key(Stage s);
/// The stage whose key is `key`; nullopt for anything else.
std::optional<Stage> parse_stage(std::string_view key);

}  // namespace kvscope
