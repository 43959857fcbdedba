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
  /// 1-based rank per prompt position [n] (empty when not asked for). Kept positions take ranks
  /// 1..n_kept and evicted ones n_kept+1..n; within each, higher score first, then lower position
  /// (NaN scores last). So a rank is consistent with the kept set by construction: rank <= n_kept
  /// exactly when kept.
  std::vector<std::int32_t> rank;
  std::vector<std::uint8_t> kept;  ///< per position [n]: 1 = kept
  std::int64_t n_kept = 0;         ///< positions kept
  std::int64_t n_always = 0;       ///< positions scored always-kept
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
/// without eviction). Positions in `kept` outside [0, n) are ignored. ranks = false: everything but
/// HeadRanking::rank, in O(n) (no sort).
HeadRanking rank_head(const float* score, std::int64_t n, const std::vector<std::int64_t>* kept, bool ranks = true);

/// What a tooltip says about one position `pos` of a head, in O(n) without sorting or allocating.
struct PositionRank {
  std::int32_t rank = 0;  ///< as HeadRanking::rank
  bool kept = false;
  std::int64_t n_kept = 0, n_always = 0;
  float cutoff_kept = 0;                       ///< as HeadRanking::cutoff_kept
  std::int64_t run_first = -1, run_last = -1;  ///< the always-kept run holding pos, or -1
};
/// rank_head's answers for one position: one vectorised pass over the scores plus one over the
/// kept positions (sorted; nullptr: all kept). pos must be in [0, n).
PositionRank rank_position(const float* score, std::int64_t n, const std::vector<std::int64_t>* kept, std::int64_t pos);

/// What the always-kept run [first, last] of a prompt of n tokens is, for a scorer (the pipeline's
/// scoring-stage policy name): "sink tokens" at the start; at the end "observation window" (snapkv,
/// pyramidkv), "last token" (tova), else "recent tokens"; "always kept" in between.
std::string always_kept_name(const std::string& scorer, std::int64_t first, std::int64_t last, std::int64_t n);

}  // namespace kvscope::figures
