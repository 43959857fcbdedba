#pragma once
// The budget a compression pipeline runs under, in the units the papers use (docs/methods.md §6.4:
// "budget" differs between papers), and the one table of the unit names. Torch-free (kvscope_spec).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvscope {

/// Unit of a compression budget.
enum class BudgetUnit {
  kCompressionRatio,  ///< kvpress: fraction removed; n_kept = int(n_tok * (1 - value)) per KV head, value in [0, 1)
  kStored,            ///< entries stored per KV head, value >= 1
  kFetched,           ///< entries read per decode step per GQA group (RocketKV's t; = stored for eviction methods)
  kFraction,          ///< fraction of the full cache kept, value in (0, 1]
};

/// One row of the unit table.
struct BudgetUnitInfo {
  BudgetUnit unit;
  std::string_view name;   ///< canonical name, stored in sessions: "compression_ratio", "stored", "fetched", "fraction"
  std::string_view alias;  ///< also accepted when parsing ("ratio" in sweep grids), or empty
  std::string_view help;   ///< one line for option help
};

/// Every unit.
const std::array<BudgetUnitInfo, 4>& budget_unit_table();
/// The canonical name of `u`.
std::string_view budget_unit_name(BudgetUnit u);
/// The unit named `text` (canonical name or alias); nullopt for anything else.
std::optional<BudgetUnit> find_budget_unit(std::string_view text);
/// find_budget_unit or InputError("unknown budget unit '<text>' (expected compression_ratio, stored,
/// fetched or fraction)").
BudgetUnit parse_budget_unit(std::string_view text);

/// How large the compressed cache may be.
struct BudgetSpec {
  using Unit = BudgetUnit;
  Unit unit = Unit::kCompressionRatio;
  double value = 0.0;
  /// Average entries kept per KV head after prefill of n_tok tokens, in [0, n_tok].
  int64_t kept_per_head(int64_t n_tok) const;
  /// Throws InputError for a value outside the unit's range (NaN included).
  void validate() const;
};

/// A budget for display: "ratio 0.75", "128 stored/head", "256 fetched/step", "fraction 0.25".
std::string format_budget(BudgetUnit u, double value);

/// The budget of one run, with the lengths it is converted against.
struct RunBudget {
  BudgetSpec spec;
  int64_t n_prompt = 0;        ///< prompt tokens (S_p)
  int64_t max_new_tokens = 0;  ///< n_gen
};

}  // namespace kvscope
