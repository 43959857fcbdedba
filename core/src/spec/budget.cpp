#include "kvscope/core/budget.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kvscope/core/errors.h"

namespace kvscope {

const std::array<BudgetUnitInfo, 4>& budget_unit_table() {
  static constexpr std::array<BudgetUnitInfo, 4> table = {{
      {BudgetUnit::kCompressionRatio, "compression_ratio", "ratio",
       "kvpress convention: fraction removed; int(n_tok * (1 - R)) entries kept per KV head"},
      {BudgetUnit::kStored, "stored", "", "entries stored per KV head"},
      {BudgetUnit::kFetched, "fetched", "", "entries read per decode step per GQA group (RocketKV's t)"},
      {BudgetUnit::kFraction, "fraction", "", "fraction of the full cache kept"},
  }};
  return table;
}

std::string_view budget_unit_name(BudgetUnit u) { return budget_unit_table()[static_cast<size_t>(u)].name; }

std::optional<BudgetUnit> find_budget_unit(std::string_view text) {
  for (const BudgetUnitInfo& u : budget_unit_table())
    if (u.name == text || (!u.alias.empty() && u.alias == text)) return u.unit;
  return std::nullopt;
}

BudgetUnit parse_budget_unit(std::string_view text) {
  if (auto u = find_budget_unit(text)) return *u;
  throw InputError("unknown budget unit '" + std::string(text) +
                   "' (expected compression_ratio, stored, fetched or fraction)");
}

std::string format_budget(BudgetUnit u, double value) {
  char num[32];
  std::snprintf(num, sizeof num, "%g", value);
  switch (u) {
    case BudgetUnit::kCompressionRatio:
      return std::string("ratio ") + num;
    case BudgetUnit::kStored:
      return std::string(num) + " stored/head";
    case BudgetUnit::kFetched:
      return std::string(num) + " fetched/step";
    case BudgetUnit::kFraction:
      return std::string("fraction ") + num;
  }
  return num;
}

int64_t BudgetSpec::kept_per_head(int64_t n_tok) const {
  double kept = 0;
  switch (unit) {
    case Unit::kCompressionRatio:
      kept = static_cast<double>(n_tok) * (1.0 - value);
      break;
    case Unit::kStored:
    case Unit::kFetched:
      kept = value;
      break;
    case Unit::kFraction:
      kept = static_cast<double>(n_tok) * value;
      break;
  }
  return std::clamp<int64_t>(static_cast<int64_t>(kept), 0, n_tok);
}

void BudgetSpec::validate() const {
  const bool ok = unit == Unit::kCompressionRatio ? value >= 0 && value < 1
                  : unit == Unit::kFraction       ? value > 0 && value <= 1
                                                  : value >= 1;
  if (!ok)
    throw InputError(unit == Unit::kCompressionRatio ? "--compression-ratio must be in [0, 1)"
                     : unit == Unit::kFraction       ? "--budget with --budget-unit fraction must be in (0, 1]"
                                                     : "--budget must be >= 1 entry");
}

}  // namespace kvscope
