#pragma once
// Pipeline: an ordered list of policy stages parsed from a SPEC string, and the budget it runs
// under. Compression runs layer by layer right after each layer's prefill attention (as kvpress
// does), so prefill output is exact and decode sees the compressed cache.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/engine.h"
#include "kvscope/core/policy.h"

namespace kvscope {

/// One stage as written: `name[:key=value,...]`.
struct StageSpec {
  std::string policy;
  ParamValues params;
};

/// Parses `name[:key=value,...][+name[:...]]...`. Throws InputError naming the offending part
/// (empty stage, missing '=', duplicate key).
std::vector<StageSpec> parse_pipeline_spec(std::string_view spec);

/// How large the compressed cache may be (methods.md §6.4: "budget" differs between papers).
struct BudgetSpec {
  enum class Unit {
    kCompressionRatio,  ///< kvpress: fraction removed; n_kept = int(n_tok * (1 - value)) per KV head
    kStored,            ///< entries stored per KV head
    kFetched,           ///< entries read per decode step per GQA group (= stored for eviction methods)
    kFraction,          ///< fraction of the full cache kept
  };
  Unit unit = Unit::kCompressionRatio;
  double value = 0.0;
  /// Average entries kept per KV head after prefill of n_tok tokens, in [0, n_tok].
  int64_t kept_per_head(int64_t n_tok) const;
  /// Throws InputError for a value outside the unit's range.
  void validate() const;
};

/// Parses "stored" | "fetched" | "fraction". Throws InputError.
BudgetSpec::Unit parse_budget_unit(const std::string& text);

class Pipeline {
 public:
  /// Builds the stages from `spec` with `registry`. A pipeline needs one scoring stage; budget
  /// allocation defaults to `uniform`. Throws InputError for unknown policies or parameters (the
  /// message lists the valid ones) and for stages out of order.
  Pipeline(const PolicyRegistry& registry, std::string_view spec);

  /// Canonical SPEC with every parameter resolved (what a session stores).
  std::string canonical() const;
  const std::vector<std::unique_ptr<Policy>>& stages() const { return stages_; }

  /// Compresses layer `ev.layer` of `ev.cache` to `n_kept` entries per KV head on average
  /// (physical eviction), leaving room for `reserve` appended entries per head.
  /// No-op when n_kept >= n_tok.
  void compress_layer(const LayerEvent& ev, int64_t n_kept, int64_t reserve) const;

 private:
  std::vector<std::unique_ptr<Policy>> stages_;
  const ScoringPolicy* scorer_ = nullptr;
  const BudgetPolicy* budget_ = nullptr;
};

}  // namespace kvscope
