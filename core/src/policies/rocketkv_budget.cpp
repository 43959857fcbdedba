// RocketKV adaptive compression decomposition (Behnam et al. 2025, §3.6; docs/methods.md §1.2) and the
// token budget t shared by the S5 decode-time selection policies. Formulas and their sources are
// documented in kvscope/core/policies/rocketkv_budget.h.
#include "kvscope/core/policies/rocketkv_budget.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kvscope::policies {
namespace {

/// p and k1 of HSA for a stage-2 ratio c2 (RocketKV accuracy code: chunk_size = ceil(sqrt(c2)),
/// 1 if that exceeds c2; r = int(D · chunk_size / c2)), k1 clamped to [1, D].
void hsa_shape(RocketKvSplit& s, int64_t head_dim) {
  const auto page = static_cast<int64_t>(std::ceil(std::sqrt(s.c2)));
  s.page = static_cast<double>(page) <= s.c2 ? page : 1;
  const auto k1 = static_cast<int64_t>(static_cast<double>(head_dim) * static_cast<double>(s.page) / s.c2);
  s.k1 = std::clamp<int64_t>(k1, 1, head_dim);
}

void check(int64_t S, int64_t t, int64_t head_dim) {
  if (S < 1 || t < 1 || head_dim < 1)
    throw std::invalid_argument("rocketkv_split: need S >= 1, t >= 1, head_dim >= 1 (got S=" + std::to_string(S) +
                                ", t=" + std::to_string(t) + ", head_dim=" + std::to_string(head_dim) + ")");
}

}  // namespace

RocketKvSplit rocketkv_split(int64_t S, int64_t t, int64_t head_dim, int64_t n_gen) {
  check(S, t, head_dim);
  if (n_gen < 0) throw std::invalid_argument("rocketkv_split: n_gen must be >= 0");
  RocketKvSplit s;
  s.c = std::max(1.0, static_cast<double>(S) / static_cast<double>(t));
  s.r = std::min(0.2 + 0.06 * std::log2(s.c), 0.8);
  s.stage1_ratio = std::pow(s.c, s.r);
  s.stage2_ratio = std::pow(s.c, 1.0 - s.r);
  const auto C = static_cast<int64_t>(static_cast<double>(S) / s.stage1_ratio);
  s.capacity = std::max(C, std::min(2 * n_gen, S));
  s.prompt_keep = s.capacity - n_gen;
  s.c2 = std::max(1.0, static_cast<double>(s.capacity) / static_cast<double>(t));
  hsa_shape(s, head_dim);
  s.k2 = std::max<int64_t>(1, t / 2);
  s.storage_rel = 1.0 / s.stage1_ratio + 2.0 / std::pow(s.c, (1.0 + s.r) / 2.0);
  return s;
}

RocketKvSplit hsa_split(int64_t n, int64_t t, int64_t head_dim) {
  check(n, t, head_dim);
  RocketKvSplit s;
  s.c2 = std::max(1.0, static_cast<double>(n) / static_cast<double>(t));
  s.c = s.c2;
  s.r = 0;
  s.stage1_ratio = 1;
  s.stage2_ratio = s.c2;
  s.capacity = n;
  s.prompt_keep = n;
  hsa_shape(s, head_dim);
  s.k2 = std::max<int64_t>(1, t / 2);
  s.storage_rel = 1.0 + 2.0 / static_cast<double>(s.page);  // Full KV + min/max pages
  return s;
}

int64_t decode_fetch_budget(const RunBudget& b) {
  if (b.spec.unit == BudgetSpec::Unit::kFetched) return std::max<int64_t>(1, static_cast<int64_t>(b.spec.value));
  return std::max<int64_t>(1, b.spec.kept_per_head(b.n_prompt));
}

}  // namespace kvscope::policies
