#include "budget_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvscope::run {
namespace {

/// Policies that keep entries whatever the budget: the parameter giving how many (empty: one
/// entry, the last token).
struct KeepRule {
  const char* policy;
  const char* key;
  const char* what;
};
constexpr KeepRule kRules[] = {
    {"snapkv", "window", "observation window"},
    {"pyramidkv", "window", "observation window"},
    {"streamingllm", "sink", "attention-sink tokens"},
    {"h2o", "recent", "recent window"},
    {"tova", "", "last token"},
};

int64_t parse_count(const std::string& text) {
  try {
    return std::max<int64_t>(0, std::stoll(text));
  } catch (const std::exception&) {
    return 0;
  }
}

/// The smallest budget value of `unit` that keeps `entries` per head of an n_prompt-token prompt,
/// for the message: "fraction >= 0.364", "--compression-ratio <= 0.636", ">= 32 entries".
std::string needed_budget(BudgetUnit unit, int64_t entries, int64_t n_prompt) {
  char buf[64];
  const double share = n_prompt > 0 ? static_cast<double>(entries) / static_cast<double>(n_prompt) : 1.0;
  switch (unit) {
    case BudgetUnit::kFraction:
      std::snprintf(buf, sizeof buf, "a fraction of at least %.3g", std::ceil(share * 1000) / 1000);
      return buf;
    case BudgetUnit::kCompressionRatio:
      std::snprintf(buf, sizeof buf, "a compression ratio of at most %.3g", std::floor((1 - share) * 1000) / 1000);
      return buf;
    case BudgetUnit::kStored:
    case BudgetUnit::kFetched:
      break;
  }
  return "at least " + std::to_string(entries) + " entries per head";
}

}  // namespace

AlwaysKept always_kept(const std::vector<StageSpec>& stages, int64_t n_prompt) {
  AlwaysKept best;
  for (const StageSpec& s : stages)
    for (const KeepRule& r : kRules) {
      if (s.policy != r.policy) continue;
      int64_t n = 1;
      std::string param;
      if (*r.key) {
        const auto it = s.params.find(r.key);
        if (it == s.params.end()) continue;
        n = parse_count(it->second);
        param = std::string(r.key) + "=" + it->second;
      }
      n = std::min(n, std::max<int64_t>(n_prompt, 0));
      if (n > best.entries) best = {n, s.policy, param, r.what};
    }
  return best;
}

KeptCheck check_kept_entries(const std::vector<StageSpec>& stages, const BudgetSpec& budget, int64_t n_prompt,
                             int64_t kept_per_head) {
  KeptCheck c;
  c.n_prompt = n_prompt;
  c.kept_per_head = kept_per_head;
  c.always = always_kept(stages, n_prompt);
  if (kept_per_head < 0 || kept_per_head >= c.always.entries) return c;
  const std::string by = c.always.param.empty() ? c.always.policy : c.always.policy + " " + c.always.param;
  c.problem =
      "budget " + format_budget(budget.unit, budget.value) + " keeps " + std::to_string(kept_per_head) +
      " entries per KV head of the " + std::to_string(n_prompt) + "-token prompt, fewer than the " +
      std::to_string(c.always.entries) + " that " + by + " always keeps (its " + c.always.what +
      "): the scores would decide nothing; give " + needed_budget(budget.unit, c.always.entries, n_prompt) +
      (c.always.param.empty() ? std::string() : " or a smaller " + c.always.param.substr(0, c.always.param.find('=')));
  return c;
}

}  // namespace kvscope::run
