#include "score_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvscope::figures {

bool always_kept_score(float score) { return score == std::numeric_limits<float>::max(); }

HeadRanking rank_head(const float* score, std::int64_t n, const std::vector<std::int64_t>* kept) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  HeadRanking r;
  r.cutoff_kept = r.best_evicted = kNaN;
  if (n <= 0 || !score) return r;
  std::vector<std::uint8_t> is_kept(static_cast<std::size_t>(n), kept ? 0 : 1);
  if (kept)
    for (std::int64_t p : *kept)
      if (p >= 0 && p < n) is_kept[static_cast<std::size_t>(p)] = 1;
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](std::int32_t i) {
    const float s = score[i];
    return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
  };
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    if (is_kept[static_cast<std::size_t>(a)] != is_kept[static_cast<std::size_t>(b)])
      return is_kept[static_cast<std::size_t>(a)] > is_kept[static_cast<std::size_t>(b)];
    const bool na = std::isnan(score[a]), nb = std::isnan(score[b]);
    if (na != nb) return nb;
    if (key(a) != key(b)) return key(a) > key(b);
    return a < b;
  });
  r.rank.resize(static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < order.size(); ++k)
    r.rank[static_cast<std::size_t>(order[k])] = static_cast<std::int32_t>(k + 1);
  std::int64_t run_start = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    const float s = score[i];
    const bool always = always_kept_score(s);
    if (is_kept[static_cast<std::size_t>(i)]) {
      ++r.n_kept;
      if (!always && !std::isnan(s) && (std::isnan(r.cutoff_kept) || s < r.cutoff_kept)) r.cutoff_kept = s;
    } else if (!std::isnan(s) && (std::isnan(r.best_evicted) || s > r.best_evicted)) {
      r.best_evicted = s;
    }
    if (always) {
      ++r.n_always;
      if (run_start < 0) run_start = i;
    }
    if (run_start >= 0 && (!always || i == n - 1)) {
      r.always_kept.emplace_back(run_start, always ? i : i - 1);
      run_start = -1;
    }
  }
  return r;
}

std::string always_kept_name(const std::string& scorer, std::int64_t first, std::int64_t last, std::int64_t n) {
  if (first == 0) return "sink tokens";
  if (last == n - 1) {
    if (scorer == "snapkv" || scorer == "pyramidkv") return "observation window";
    if (scorer == "tova") return "last token";
    return "recent tokens";
  }
  return "always kept";
}

}  // namespace kvscope::figures
