#pragma once
// A run's budget for display, in one convention: the share of the prompt's KV entries the run kept
// after prefill ("kept 25%") and the entries per KV head ("128/head"), with the budget as it was
// given ("ratio 0.75") as a detail. Papers state budgets in four units (docs/methods.md §6.4) and two
// of them run in opposite directions - compression_ratio 0.75 (share removed) and fraction 0.25
// (share kept) are one budget - so lists, titles and captions show the kept share, and sorting by
// budget sorts by it. Used by the GUI (Sessions, Compare, Budgets, titles and captions through
// figures::RunData::budget_text) and `kvscope-cli inspect`. Torch-free.
#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "kvscope/sessions/types.h"

namespace kvscope::run {

/// How much of its prompt's KV cache a run kept.
struct KeptShare {
  /// The run compressed nothing (pipeline "full", or none): every entry kept.
  bool full_cache = false;
  /// Share of the prompt's entries kept per KV head after prefill, in [0, 1]; NaN when unknown.
  double fraction = std::numeric_limits<double>::quiet_NaN();
  /// Mean entries kept per KV head after prefill (entries); NaN when unknown.
  double per_head = std::numeric_limits<double>::quiet_NaN();
  /// From the run's summary metrics "kept_per_head_mean" and "n_prompt" (what the run kept), not
  /// derived from its budget.
  bool measured = false;
  /// The budget as it was given, format_budget's text ("ratio 0.75", "fraction 0.25", "128 stored/head",
  /// "256 fetched/step"); empty for the full cache.
  std::string given;
  /// Its unit.
  sessions::BudgetUnit unit = sessions::BudgetUnit::kFraction;
};

/// The kept share of a run: from the summary metrics "kept_per_head_mean" and "n_prompt" (written by
/// run::record_results) where stored, else derived from the budget's unit and value
/// (BudgetSpec::kept_per_head) over `n_prompt` prompt tokens (BOS included; <= 0: unknown; the
/// summary's "n_prompt" wins). A pipeline spec that is empty or "full" is the full cache.
KeptShare kept_share(const std::string& pipeline_spec, const sessions::BudgetInfo& budget,
                     const std::map<std::string, double>& summary, std::int64_t n_prompt = -1);
/// kept_share of a listed run.
KeptShare kept_share(const sessions::RunRow& row, std::int64_t n_prompt = -1);

/// "kept 25% · 128/head"; "full cache"; "kept 25%" or "128/head" when one of them is unknown,
/// "kept ?" when both are. Numbers derived from the budget (not measured) read "kept ≈25% · ≈128/head".
std::string kept_text(const KeptShare& k);
/// The budget as given, in parentheses: "(ratio 0.75)"; empty for the full cache.
std::string given_text(const KeptShare& k);
/// kept_text and given_text in one line: "kept 25% · 128/head (ratio 0.75)".
std::string budget_label(const KeptShare& k);
/// What the numbers are, for a tooltip: where they come from and what the given unit means.
std::string budget_explanation(const KeptShare& k);
/// Sort key of a budget column: the kept share (1 for the full cache); NaN when unknown.
double kept_sort_key(const KeptShare& k);

}  // namespace kvscope::run
