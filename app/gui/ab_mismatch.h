#pragma once
// Why runs A and B of the compare views may not be comparable: they ran on different prompts (token
// ids) or different models (checkpoint path, config). Compare shows it in a visible line and the
// context bar marks B, also when a new run became A while B stayed (a re-run on another prompt).
#include <string>
#include <vector>

#include "kvscope/sessions/types.h"

namespace kvscope::gui {

/// What differs between A and B, one entry each: "prompt", "model path", "model config".
struct AbMismatch {
  std::vector<std::string> what;  ///< in that order; empty: same prompt ids and same model
  std::string line;               ///< one line naming each difference with both sides' values; empty when none
  bool prompt = false;            ///< the prompts' token ids differ (kept sets are not comparable)
  bool any() const { return !what.empty(); }
};

/// Compares runs `a` and `b`: prompt token ids (count, or the first differing position when the
/// counts agree), model path (as stored) and model config (config hash, and the shape when it
/// differs). E.g. "B #7 differs from A #5 in prompt (A 88 tokens, B 120) and model path (A
/// .../pycode-16m, B .../stories15M): kept sets and A − B views are not defined".
AbMismatch ab_mismatch(const sessions::RunRecord& a, const sessions::RunRecord& b);

}  // namespace kvscope::gui
