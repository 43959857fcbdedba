#pragma once
// The Fidelity view's tokens: per decode step of a run recorded with the full-cache reference, the
// token the compressed run chose and the full cache's top-1 given the compressed run's prefix, with
// their probabilities (step metrics "token_id", "full_top_id", "p_token", "p_full_top",
// "p_full_token": core generate.h Fidelity, docs/sessions.md) and texts. Runs recorded before these
// metrics existed get a one-line note instead.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "run_data.h"

namespace kvscope::gui {

/// One decode step: step i compares the distributions the compressed run chose its i-th token from.
struct FidelityStepTokens {
  std::int32_t token = -1;     ///< the compressed run's token id
  std::int32_t full_top = -1;  ///< the full cache's argmax token id, teacher-forced on the compressed prefix
  /// fp32 softmax probabilities (temperature 1) in [0, 1]; NaN where not stored: the compressed
  /// run's of its token, the full cache's of its top token, the full cache's of `token`.
  double p_token = NAN, p_full_top = NAN, p_full_token = NAN;
  double kl = NAN;         ///< KL(full || compressed) in nats
  std::string text;        ///< text of `token`: RunData::output_text where it holds this token, else decoded
  std::string full_text;   ///< text of `full_top` (decoded; "#id" when the tokenizer is not available)
  bool in_output = false;  ///< `token` is output token i of the first turn (not a stop token or a later turn)
  bool agree() const { return token == full_top; }
};

/// The steps of one run (FidelityTokens::steps empty with `note` saying why).
struct FidelityTokens {
  std::vector<FidelityStepTokens> steps;
  std::int64_t differ = 0;  ///< steps where the compressed token is not the full cache's top-1
  std::string note;         ///< one line when there are no steps: the run predates the record, or has no reference
};

/// Reads run `r`'s per-step tokens; `text` decodes ids that RunData::output_text does not hold
/// (null or nullopt: shown as "#id").
FidelityTokens fidelity_tokens(const figures::RunData& r, const figures::TokenText& text);

}  // namespace kvscope::gui
