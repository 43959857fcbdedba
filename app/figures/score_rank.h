#pragma once
// The decisive score of one KV head as the views explain it: each prompt position's rank under the
// score the budget stage ranked (capture full's "policy_score" blob, core capture.h), the cutoff,
// and the always-kept regions (observation window, sinks, recent tokens: scored as the largest
// finite float by the scorers, core/src/policies/scoring.h kKeepScore).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::figures {

/// One KV head's ranking.
struct HeadRanking {
  /// 1-based rank per prompt position [n]. Kept positions take ranks 1..n_kept and evicted ones
  /// n_kept+1..n; within each, higher score first, then lower position (NaN scores last). So a
  /// rank is consistent with the kept set by construction: rank <= n_kept exactly when kept.
  std::vector<std::int32_t> rank;
  std::int64_t n_kept = 0;    ///< positions kept
  std::int64_t n_always = 0;  ///< positions scored always-kept
  /// Lowest score among kept positions that are not always-kept (the budget's cutoff); NaN when
  /// none (every kept entry always-kept, or nothing evicted and nothing scored).
  float cutoff_kept = 0;
  /// Highest score among evicted positions; NaN when nothing was evicted.
  float best_evicted = 0;
  /// Maximal runs [first, last] of always-kept positions, ascending.
  std::vector<std::pair<std::int64_t, std::int64_t>> always_kept;
};

/// True for the always-kept score (the largest finite fp32).
bool always_kept_score(float score);

/// Ranks `n` scores of one head. kept: sorted kept positions (nullptr: every position kept, a run
/// without eviction). Positions in `kept` outside [0, n) are ignored.
HeadRanking rank_head(const float* score, std::int64_t n, const std::vector<std::int64_t>* kept);

/// What the always-kept run [first, last] of a prompt of n tokens is, for a scorer (the pipeline's
/// scoring-stage policy name): "sink tokens" at the start; at the end "observation window" (snapkv,
/// pyramidkv), "last token" (tova), else "recent tokens"; "always kept" in between.
std::string always_kept_name(const std::string& scorer, std::int64_t first, std::int64_t last, std::int64_t n);

}  // namespace kvscope::figures
