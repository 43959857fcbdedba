#include "budget_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kvscope/core/budget.h"

namespace kvscope::run {
namespace {

std::string printf_text(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// "25%", "3.1%", "99.6%", "100%": whole percents from 10% to 99%, one decimal outside, so a share
/// close to 0 or 100% does not read as exactly 0 or 100%.
std::string percent_text(double fraction) {
  const double p = 100.0 * fraction;
  if (p <= 0) return "0%";
  if (p >= 100) return "100%";
  return printf_text(p >= 9.95 && p < 99.5 ? "%.0f%%" : "%.1f%%", p);
}

/// "128" for a whole number of entries (within 0.05), else "127.5".
std::string entries_text(double n) { return printf_text(std::abs(n - std::round(n)) < 0.05 ? "%.0f" : "%.1f", n); }

double summary_value(const std::map<std::string, double>& summary, const char* name) {
  auto it = summary.find(name);
  return it == summary.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

}  // namespace

KeptShare kept_share(const std::string& pipeline_spec, const sessions::BudgetInfo& budget,
                     const std::map<std::string, double>& summary, std::int64_t n_prompt) {
  KeptShare k;
  k.full_cache = pipeline_spec.empty() || pipeline_spec == "full";
  k.unit = budget.unit;
  if (!k.full_cache) k.given = format_budget(budget.unit, budget.value);
  const double stored_prompt = summary_value(summary, "n_prompt");
  const double n = std::isfinite(stored_prompt) && stored_prompt > 0 ? stored_prompt
                   : n_prompt > 0                                    ? static_cast<double>(n_prompt)
                                                                     : std::numeric_limits<double>::quiet_NaN();
  if (k.full_cache) {
    k.fraction = 1.0;
    k.per_head = n;
    k.measured = true;  // nothing to derive: every entry is kept
    return k;
  }
  const double kept = summary_value(summary, "kept_per_head_mean");
  if (std::isfinite(kept) && kept >= 0) {
    k.measured = true;
    k.per_head = kept;
    if (std::isfinite(n)) k.fraction = std::clamp(kept / n, 0.0, 1.0);
    return k;
  }
  // Not recorded (a failed or interrupted run, an older session): what the budget asks for.
  switch (budget.unit) {
    case BudgetUnit::kCompressionRatio:
      k.fraction = std::clamp(1.0 - budget.value, 0.0, 1.0);
      break;
    case BudgetUnit::kFraction:
      k.fraction = std::clamp(budget.value, 0.0, 1.0);
      break;
    case BudgetUnit::kStored:
    case BudgetUnit::kFetched:
      k.per_head = budget.value;
      break;
  }
  if (std::isfinite(n)) {
    const BudgetSpec spec{budget.unit, budget.value};
    k.per_head = static_cast<double>(spec.kept_per_head(static_cast<std::int64_t>(n)));
    k.fraction = std::clamp(k.per_head / n, 0.0, 1.0);
  }
  return k;
}

KeptShare kept_share(const sessions::RunRow& row, std::int64_t n_prompt) {
  return kept_share(row.pipeline_spec, row.budget, row.summary, n_prompt);
}

std::string kept_text(const KeptShare& k) {
  if (k.full_cache) return "full cache";
  const std::string approx = k.measured ? "" : "\xe2\x89\x88";  // ≈
  const bool frac = std::isfinite(k.fraction), heads = std::isfinite(k.per_head);
  if (frac && heads)
    return "kept " + approx + percent_text(k.fraction) + " \xc2\xb7 " + approx + entries_text(k.per_head) + "/head";
  if (frac) return "kept " + approx + percent_text(k.fraction);
  if (heads) return approx + entries_text(k.per_head) + "/head";
  return "kept ?";
}

std::string given_text(const KeptShare& k) { return k.given.empty() ? "" : "(" + k.given + ")"; }

std::string budget_label(const KeptShare& k) {
  const std::string g = given_text(k);
  return g.empty() ? kept_text(k) : kept_text(k) + " " + g;
}

std::string budget_explanation(const KeptShare& k) {
  if (k.full_cache)
    return "full cache: no compression, every prompt entry kept" +
           (std::isfinite(k.per_head) ? " (" + entries_text(k.per_head) + " per KV head)" : std::string());
  std::string t = "kept: share of the prompt's entries each KV head holds after prefill, and entries per KV head";
  t += k.measured ? " (measured: the run's mean over layers and KV heads)"
                  : " (\xe2\x89\x88: derived from the budget; the run recorded no kept count)";
  const BudgetUnitInfo& u = budget_unit_table()[static_cast<std::size_t>(k.unit)];
  return t + "\nbudget as given: " + k.given + "\n" + std::string(u.name) + ": " + std::string(u.help);
}

double kept_sort_key(const KeptShare& k) { return k.full_cache ? 1.0 : k.fraction; }

}  // namespace kvscope::run
