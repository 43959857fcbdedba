#include "score_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvscope::figures {

bool always_kept_score(float score) { return score == std::numeric_limits<float>::max(); }

namespace {

// The ranking order: kept first; then higher score (NaN last); then lower position.
bool before(const float* score, const std::vector<std::uint8_t>& kept, std::int64_t a, std::int64_t b) {
  const auto ka = kept[static_cast<std::size_t>(a)], kb = kept[static_cast<std::size_t>(b)];
  if (ka != kb) return ka > kb;
  const bool na = std::isnan(score[a]), nb = std::isnan(score[b]);
  if (na != nb) return nb;
  if (!na && score[a] != score[b]) return score[a] > score[b];
  return a < b;
}

}  // namespace

PositionRank rank_position(const float* score, std::int64_t n, const std::vector<std::int64_t>* kept,
                           std::int64_t pos) {
  constexpr float kMax = std::numeric_limits<float>::max();
  PositionRank out;
  out.cutoff_kept = std::numeric_limits<float>::quiet_NaN();
  const float v = score[pos];
  const bool nan = std::isnan(v);
  // Ordered before pos within a group: a higher score, or the same score at a lower position; for a
  // NaN score, any number or a NaN at a lower position (NaN ranks last).
  auto ahead = [&](std::int64_t j) {
    const float s = score[j];
    return nan ? (s == s) || j < pos : (s > v) || ((s == v) && j < pos);
  };
  // All positions: 32-bit lanes, no branches (vectorised).
  std::int32_t all = 0;
  const auto n32 = static_cast<std::int32_t>(n), p32 = static_cast<std::int32_t>(pos);
  if (nan) {
    for (std::int32_t j = 0; j < n32; ++j) all += static_cast<std::int32_t>((score[j] == score[j]) | (j < p32));
  } else {
    for (std::int32_t j = 0; j < n32; ++j) {
      const std::int32_t gt = score[j] > v, eq = (score[j] == v) & (j < p32);
      all += gt | eq;
    }
  }
  std::int32_t in_kept = 0;
  if (!kept) {
    out.kept = true;
    out.n_kept = n;
    in_kept = all;
    for (std::int64_t j = 0; j < n; ++j) {
      const float s = score[j];
      out.n_always += s == kMax;
      if (s != kMax && s == s && !(s >= out.cutoff_kept)) out.cutoff_kept = s;
    }
  } else {
    for (std::int64_t j : *kept) {
      if (j < 0 || j >= n) continue;
      ++out.n_kept;
      out.kept |= j == pos;
      in_kept += ahead(j) ? 1 : 0;
      const float s = score[j];
      out.n_always += s == kMax;
      if (s != kMax && s == s && !(s >= out.cutoff_kept)) out.cutoff_kept = s;
    }
  }
  out.rank = 1 + (out.kept ? in_kept : static_cast<std::int32_t>(out.n_kept) + (all - in_kept));
  if (v == kMax) {
    out.run_first = out.run_last = pos;
    while (out.run_first > 0 && score[out.run_first - 1] == kMax) --out.run_first;
    while (out.run_last + 1 < n && score[out.run_last + 1] == kMax) ++out.run_last;
  }
  return out;
}

HeadRanking rank_head(const float* score, std::int64_t n, const std::vector<std::int64_t>* kept, bool ranks) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  HeadRanking r;
  r.cutoff_kept = r.best_evicted = kNaN;
  if (n <= 0 || !score) return r;
  std::vector<std::uint8_t>& is_kept = r.kept;
  is_kept.assign(static_cast<std::size_t>(n), kept ? 0 : 1);
  if (kept)
    for (std::int64_t p : *kept)
      if (p >= 0 && p < n) is_kept[static_cast<std::size_t>(p)] = 1;
  if (ranks) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return before(score, is_kept, a, b); });
    r.rank.resize(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < order.size(); ++k)
      r.rank[static_cast<std::size_t>(order[k])] = static_cast<std::int32_t>(k + 1);
  }
  // Counts, cutoff and best evicted in one branch-free pass (vectorised; NaN fails every compare).
  constexpr float kInf = std::numeric_limits<float>::infinity(), kMax = std::numeric_limits<float>::max();
  const auto n32 = static_cast<std::int32_t>(n);
  const std::uint8_t* k = is_kept.data();
  std::int32_t n_kept = 0, n_always = 0;
  float lo = kInf, hi = -kInf;
  for (std::int32_t i = 0; i < n32; ++i) {
    const float v = score[i];
    const std::int32_t kept_i = k[i], always = v == kMax;
    n_kept += kept_i;
    n_always += always;
    const float as_kept = (kept_i & !always & (v == v)) ? v : kInf;
    const float as_evicted = (!kept_i & (v == v)) ? v : -kInf;
    lo = as_kept < lo ? as_kept : lo;
    hi = as_evicted > hi ? as_evicted : hi;
  }
  r.n_kept = n_kept;
  r.n_always = n_always;
  r.cutoff_kept = lo == kInf ? kNaN : lo;
  r.best_evicted = hi == -kInf ? kNaN : hi;
  // Runs of always-kept positions (few: sinks, the window).
  for (std::int64_t i = 0; n_always > 0 && i < n;) {
    if (score[i] != kMax) {
      ++i;
      continue;
    }
    const std::int64_t first = i;
    while (i < n && score[i] == kMax) ++i;
    r.always_kept.emplace_back(first, i - 1);
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
