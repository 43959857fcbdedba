#include "kvscope/core/stage.h"

namespace kvscope {

const std::array<StageInfo, 9>& stage_table() {
  //                        key                 label                   uses_budget decode_time
  static constexpr std::array<StageInfo, 9> table = {{
      {Stage::kHeadPattern, "head_pattern", "S0 head pattern", false, false},
      {Stage::kScoring, "scoring", "S1 scoring", true, false},
      {Stage::kLayerBudget, "layer_budget", "S2 layer budget", true, false},
      {Stage::kBudget, "budget", "S2 head budget", true, false},
      {Stage::kRetention, "retention", "S3 retention", false, false},
      {Stage::kChannel, "channel", "S4 channel pruning", false, true},
      {Stage::kDecodeSelection, "decode_selection", "S5 decode selection", true, true},
      {Stage::kMaintenance, "maintenance", "S6 maintenance", false, false},
      {Stage::kMultiTurn, "multi_turn", "S7 multi-turn", true, true},
  }};
  return table;
}

const StageInfo& stage_info(Stage s) { return stage_table()[static_cast<size_t>(s)]; }

std::string_view stage_key(Stage s) { return stage_info(s).key; }

std::optional<Stage> parse_stage(std::string_view key) {
  for (const StageInfo& s : stage_table())
    if (s.key == key) return s.stage;
  return std::nullopt;
}

}  // namespace kvscope
