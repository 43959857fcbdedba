#pragma once
// Budgets of the decode-time selection policies (S5): RocketKV's adaptive compression
// decomposition (Behnam et al. 2025, "RocketKV", ICML'25, §3.6; docs/methods.md §1.2) and
// the token budget t that "hsa", "quest", "sparq" and "exacttopk" derive from a RunBudget.
#include <cstdint>

#include "kvscope/core/policy.h"

namespace kvscope::policies {

/// RocketKV's split of a token budget t (KV pairs fetched per decode step per KV group, the
/// approximation's traffic included) into a stage-1 eviction capacity and HSA's stage-2 shape.
struct RocketKvSplit {
  double c = 1;             ///< total compression ratio max(1, S/t)                      [C]
  double r = 0.2;           ///< split exponent min(0.2 + 0.06·log2 c, 0.8)                [P] §3.6
  double stage1_ratio = 1;  ///< c^r: SnapKV's share                                        [P]
  double stage2_ratio = 1;  ///< c^(1-r): HSA's share (paper form; the code uses c2 below)   [P]
  int64_t capacity = 0;     ///< C = int(S / c^r), floored at min(2·n_gen, S)               [C]
  int64_t prompt_keep = 0;  ///< P = C - n_gen: prompt entries stage 1 keeps per KV head    [C]
  double c2 = 1;            ///< HSA ratio recomputed on the capacity: max(1, C/t)          [C]
  int64_t page = 1;         ///< p = ceil(sqrt(c2)) if that is <= c2, else 1                [C]
  int64_t k1 = 1;           ///< head-dim channels kept: trunc(D·p/c2) clamped to [1, D]   [C] (accuracy code)
  int64_t k2 = 1;           ///< tokens attended: max(1, t/2)                               [P]
  double storage_rel = 1;   ///< storage vs Full-KV, 1/c^r + 2/c^((1+r)/2) (Table 1)        [P]
};

/// RocketKV's decomposition (docs/methods.md §1.2, the [C] code rules):
///   c = max(1, S/t);  r = min(0.2 + 0.06·log2 c, 0.8);  C = max(int(S / c^r), min(2·n_gen, S));
///   P = C - n_gen;  c2 = max(1, C/t);  p = ceil(sqrt c2) if <= c2 else 1;
///   k1 = clamp(int(D·p / c2), 1, D);  k2 = max(1, t/2).
/// S is the whole sequence the request can reach: S = S_p + n_gen (capped at the model's maximum
/// length by the caller). With S = 8192 / 32768 ("8K", "32K") and S = 109056 (= 426·256, "109K",
/// c = 426; 109,000 gives the same row, while 109·1024 would give C = 1352) this reproduces the
/// worked-example table of docs/methods.md §1.2 for any n_gen <= C/2 (the floor min(2·n_gen, S) is then
/// inactive). Requires S >= 1, t >= 1, head_dim >= 1, n_gen >= 0; throws std::invalid_argument.
RocketKvSplit rocketkv_split(int64_t S, int64_t t, int64_t head_dim, int64_t n_gen);

/// HSA's own shape when it sees `n` entries with budget t (no stage 1, "HSA alone" of RocketKV
/// App. B.1.1, or any n): c2 = max(1, n/t), p and k1 as in rocketkv_split. Returns the split with
/// only c2, page, k1, k2 filled (c = c2, r = 0, capacity = n, prompt_keep = n).
RocketKvSplit hsa_split(int64_t n, int64_t t, int64_t head_dim);

/// The token budget t of a decode-time selection policy, from the run's budget:
///   --budget-unit fetched: t = int(value) (RocketKV's unit, docs/methods.md §6.4; may exceed n_prompt);
///   --compression-ratio R, stored, fraction: t = kept_per_head(n_prompt), i.e. the entries an
///   eviction method would keep at that budget, read instead as the traffic of one decode step
///   (R = 0.75 on a 1000-token prompt gives t = 250).
/// Always >= 1.
int64_t decode_fetch_budget(const RunBudget& budget);

}  // namespace kvscope::policies
