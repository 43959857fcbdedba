#pragma once
// Compression policies: the stage model, typed parameters described by a ParamSpec table, and the
// registry that the CLI/GUI build once in main. See shared/specs/architecture.md "Pipeline".
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/head_pattern.h"
#include "kvscope/core/model_config.h"

namespace kvscope {

/// Pipeline stages, in execution order (architecture.md S0..S7).
enum class Stage { kHeadPattern, kScoring, kBudget, kRetention, kChannel, kDecodeSelection, kMaintenance, kMultiTurn };

/// One parameter a policy declares: its short key (as written in a pipeline SPEC), range,
/// default, help, and the paper + section it comes from.
struct ParamSpec {
  enum class Type { kInt, kFloat, kChoice, kBool, kPath };
  std::string key;
  Type type = Type::kInt;
  double min = 0, max = 0;            ///< inclusive range for kInt / kFloat
  std::string default_value;          ///< as text, e.g. "64", "0.2", "avg"
  std::vector<std::string> choices;   ///< for kChoice
  std::string help;
  std::string paper_ref;              ///< e.g. "SnapKV (Li et al. 2024) §4.2"
};

/// Parameter values as given (key -> text). A policy's factory validates them against its
/// ParamSpec and parses them into its typed Params struct once.
using ParamValues = std::map<std::string, std::string>;

/// Validates `values` against `spec` (unknown keys: the error lists the valid ones; out-of-range
/// or unparsable values: the error names the key and the range) and returns the full set with
/// defaults filled in. Throws InputError("<policy>: ...").
ParamValues resolve_params(const std::string& policy, const std::vector<ParamSpec>& spec, const ParamValues& values);
/// Typed getters over resolved values (keys must exist).
int64_t param_int(const ParamValues& v, const std::string& key);
double param_float(const ParamValues& v, const std::string& key);
bool param_bool(const ParamValues& v, const std::string& key);

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

/// The budget of one run, with the lengths it is converted against.
struct RunBudget {
  BudgetSpec spec;
  int64_t n_prompt = 0;        ///< prompt tokens (S_p)
  int64_t max_new_tokens = 0;  ///< n_gen
};

/// What prefill-time policies see for one layer, after its attention ran on the whole prompt
/// (the inputs kvpress passes to `press.score`).
struct LayerPrefill {
  const ModelConfig& config;
  int64_t layer;
  at::Tensor queries;  ///< [n_tok, n_head, head_dim] post-RoPE queries of the prompt
  at::Tensor keys;     ///< [n_head_kv, n_tok, head_dim] post-RoPE keys
  at::Tensor values;   ///< [n_head_kv, n_tok, head_dim]
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  virtual Stage stage() const = 0;
  /// The resolved parameters this instance runs with (for sessions and display).
  virtual ParamValues params() const = 0;
};

/// S0: an offline head pattern (DuoAttention, HS-SFT): per KV head dense, or streaming with sink
/// tokens and a recent window that decode keeps as a ring buffer (retention mode "window").
class HeadPatternPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kHeadPattern; }
  /// Retention of one KV head. Throws std::out_of_range outside the pattern.
  virtual HeadPlan plan(int64_t layer, int64_t kv_head) const = 0;
};

/// S1: importance of every prompt entry per KV head; higher = keep.
class ScoringPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kScoring; }
  /// fp32 [n_head_kv, n_tok] on the input device. Entries that must always stay (observation
  /// window, sinks) get +inf-like scores (the maximum finite float) so any selection keeps them.
  virtual at::Tensor score(const LayerPrefill& in) const = 0;
  /// Block-wise prefill with a hard cache cap (KeyDiff §3, Eq. 6): the prompt is fed in blocks of
  /// this many tokens and the cache is cut back to the budget after each block. 0 = whole prompt.
  virtual int64_t prefill_block() const { return 0; }
  /// Share of the kept budget reserved for the most recent entries (KeyDiff's sliding-window
  /// variant, methods.md §2.2). 0 = none.
  virtual double recent_share() const { return 0.0; }
};

/// S2: turns scores into kept entries per KV head under a budget.
class BudgetPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kBudget; }
  /// scores: fp32 [n_head_kv, n_tok]; n_kept: the average kept entries per KV head for this layer
  /// (kvpress: int(n_tok * (1 - compression_ratio))). Returns, per KV head, the sorted int64 indices
  /// to keep (ragged lengths allowed; their sum must not exceed n_head_kv * n_kept).
  virtual std::vector<at::Tensor> select(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const = 0;
};

/// S4/S5 decode-time attention: replaces the dense attention of one decode step of one layer
/// (channel pruning with recovery: SPARK, ThinK; sparse selection: RocketKV HSA, Quest, SparQ,
/// Exact-TopK). An instance belongs to one run: it owns its side stores (page min/max, channel
/// masks, recovery statistics) and is not shared between threads.
class DecodeAttentionPolicy : public Policy {
 public:
  /// Called once per layer right after prefill compression with the layer's window context, so
  /// side stores can be built from the retained cache (same LayerPrefill the scorers saw; its
  /// keys/values are the pre-eviction tensors, the cache holds the retained ones).
  virtual void on_prefill(int64_t layer, const LayerPrefill& in, const class KvCache& cache) = 0;
  /// Entries per KV head that the eviction stages before this one should keep, when this policy
  /// derives it from the run budget (RocketKV §3.6: stage-1 capacity P = C - n_gen); nullopt = the
  /// budget's own kept_per_head(n_prompt).
  virtual std::optional<int64_t> eviction_budget(const RunBudget& budget) const { return std::nullopt; }
  /// Called once before prefill with the run's budget (token budgets k, k2, page size, ...).
  virtual void configure(const RunBudget& budget, const ModelConfig& config) = 0;
  /// One decode step of `layer`. q: [n_head, head_dim] post-RoPE query; the step's own key/value
  /// are already appended to `cache`. Returns [n_head, head_dim] in q's dtype.
  virtual at::Tensor attend(int64_t layer, const at::Tensor& q, const class KvCache& cache) = 0;
  /// K/V/side-store bytes the last attend() read (all heads of that layer).
  virtual int64_t bytes_read_last() const = 0;
  /// Bytes of side stores held (all layers).
  virtual int64_t side_store_bytes() const = 0;
  /// The cache rows the last attend() read, for telemetry (generate()'s selection recall) and
  /// tests: one int64 CPU tensor per KV head of that layer, in KV-head order, holding storage-order
  /// row indices into the `cache` attend() was given (rows of cache.head_keys(layer, h)), sorted
  /// ascending: [1, n] when the G query heads of the group share one selection, [G, n] when each
  /// query head has its own (e.g. exacttopk); every row when the step ran dense. Empty (the
  /// default) = this policy does not select rows. May synchronise (copies device tensors).
  virtual std::vector<at::Tensor> last_selection() const { return {}; }

  // CUDA-graph decode (DecodeGraph). A policy that can run inside a captured decode step returns
  // true from prepare_graph; DecodeGraph then captures attend_device in place of attend, and the
  // caller runs after_graph_step after each replay. Default: not supported.
  /// Readies side stores for `steps` decode steps over `cache` without reallocation (e.g. page
  /// summaries up to date and reserved). Returns false when this policy cannot run in a graph.
  virtual bool prepare_graph(const class KvCache& cache, int64_t steps) { return false; }
  /// attend() reading only device state: offset_dev / length_dev int64 [n_head_kv] (lengths
  /// include the step's entry; the cache's host lengths are stale while capturing).
  virtual at::Tensor attend_device(int64_t layer, const at::Tensor& q, const class KvCache& cache,
                                   const at::Tensor& offset_dev, const at::Tensor& length_dev) {
    throw std::logic_error(name() + ": no CUDA-graph decode (prepare_graph returned false)");
  }
  /// Host bookkeeping after a replayed step (the cache's host lengths are committed). Returns the
  /// K/V and side-store bytes the step read, all layers.
  virtual int64_t after_graph_step(const class KvCache& cache) { return 0; }
};

/// The catalogue of policies: name -> stage, ParamSpec table, factory. Built once in main by
/// register_builtin_policies and passed by const reference.
class PolicyRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Policy>(const ParamValues& resolved)>;
  struct Entry {
    std::string name;
    Stage stage;
    std::vector<ParamSpec> spec;
    std::string summary;  ///< one line with the paper reference
    Factory make;
  };
  void add(Entry e);
  /// Throws InputError("unknown policy 'x' (known: ...)").
  const Entry& at(const std::string& name) const;
  /// Validates params against the spec and builds the policy.
  std::unique_ptr<Policy> make(const std::string& name, const ParamValues& values) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Entry> entries_;
};

/// Adds every built-in policy (scoring, budget allocation, ...) to `registry`.
void register_builtin_policies(PolicyRegistry& registry);

}  // namespace kvscope
