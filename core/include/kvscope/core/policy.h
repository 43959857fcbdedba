#pragma once
// Compression policies: the interface of each stage (S0 head pattern .. S7 multi-turn) and the
// registry that the CLI/GUI build once in main: the torch-free catalogue (policy_catalog.h: names,
// stages, ParamSpec tables) plus a factory per policy. docs/architecture.md "The stage model".
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/budget.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/param_spec.h"
#include "kvscope/core/policy_catalog.h"
#include "kvscope/core/stage.h"

namespace kvscope {

/// What prefill-time policies see for one layer, after its attention ran on the whole prompt
/// (the inputs kvpress passes to `press.score`).
struct LayerPrefill {
  const ModelConfig& config;
  int64_t layer;
  at::Tensor queries;  ///< [n_tok, n_head, head_dim] post-RoPE queries of the prompt
  at::Tensor keys;     ///< [n_head_kv, n_tok, head_dim] post-RoPE keys
  at::Tensor values;   ///< [n_head_kv, n_tok, head_dim]
};

/// The cache rows a decode step's selection read, on the host, for every layer: KV head h of
/// layer l read the storage rows rows[offsets[l * n_head_kv + h] .. offsets[l * n_head_kv + h + 1]),
/// ascending (what last_selection() gives per layer, flattened).
struct StepSelections {
  int64_t n_layer = 0, n_head_kv = 0;
  std::vector<int64_t> rows;
  std::vector<int64_t> offsets;  ///< n_layer * n_head_kv + 1 entries, or none
  bool empty() const { return offsets.empty(); }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  virtual Stage stage() const = 0;
  /// The resolved parameters this instance runs with (for sessions and display).
  virtual ParamValues params() const = 0;
  /// How many of a prefill's last queries this stage reads (LayerPrefill::queries): 0 none, w the
  /// last w, -1 all of them (H2O's accumulated attention). A pipeline whose stages all read a
  /// bounded number can compress a shared prefill (SharedPrefill: prefill once, compress many).
  virtual int64_t prefill_queries() const { return -1; }
};

/// S0: an offline head pattern (DuoAttention, HS-SFT): per KV head dense, or streaming with sink
/// tokens and a recent window that decode keeps as a ring buffer (retention mode "window").
class HeadPatternPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kHeadPattern; }
  int64_t prefill_queries() const override { return 0; }
  /// Retention of one KV head. Throws std::out_of_range outside the pattern.
  virtual HeadPlan plan(int64_t layer, int64_t kv_head) const = 0;
  /// Checked when a run begins (Pipeline::begin_run): the pattern covers exactly the model's layers
  /// and KV heads. Throws InputError naming the pattern's file otherwise.
  virtual void check(const ModelConfig& config) const = 0;
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
  /// variant, docs/methods.md §2.2). 0 = none.
  virtual double recent_share() const { return 0.0; }
  /// Scorers that rank by attention accumulated over every query so far (H2O §3, Alg. 1): true when
  /// eviction while decoding can keep a running total per entry, adding each step's attention_sum.
  virtual bool accumulates() const { return false; }
  /// For an accumulating scorer: the attention in.queries pay each entry, summed over those queries
  /// and reduced over the GQA group, fp32 [n_head_kv, n_tok], without the always-keep marks (score()
  /// is this with the newest keep_newest() entries marked). Undefined for other scorers.
  virtual at::Tensor attention_sum(const LayerPrefill&) const { return {}; }
  /// For an accumulating scorer: the newest entries it always keeps (H2O's recent window).
  virtual int64_t keep_newest() const { return 0; }
  /// Whether KV head h's scores depend only on its own entries and its group's queries (so a layer
  /// with head-wise lengths can be ranked head by head: a later turn after Ada-KV). False for a
  /// layer-wide score, e.g. TOVA's mean over every query head of the layer.
  virtual bool per_head() const { return true; }
};

/// S2, across layers: the kept entries per KV head of one layer, from the run's per-head average
/// (PyramidKV's schedule). The head budget stage then allocates that count within the layer.
class LayerBudgetPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kLayerBudget; }
  int64_t prefill_queries() const override { return 0; }
  /// scores: fp32 [n_head_kv, n_tok] of the layer in.layer (what the head budget will rank);
  /// n_kept: the run's average kept entries per KV head. Returns this layer's average per KV head,
  /// in [0, n_tok]; over all layers the mean stays n_kept (up to rounding).
  virtual int64_t layer_kept(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const = 0;
};

/// S2, across the KV heads of a layer: turns scores into kept entries per KV head under a budget.
class BudgetPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kBudget; }
  int64_t prefill_queries() const override { return 0; }  // ranks the scores alone
  /// scores: fp32 [n_head_kv, n_tok]; n_kept: the average kept entries per KV head for this layer
  /// (kvpress: int(n_tok * (1 - compression_ratio))). Returns, per KV head, the sorted int64 indices
  /// to keep (ragged lengths allowed; their sum must not exceed n_head_kv * n_kept).
  virtual std::vector<at::Tensor> select(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const = 0;
};

/// S6: eviction while generating (kvpress DecodingPress; TOVA, KeyDiff's cache cap and
/// StreamingLLM's rolling window evict at every step in their papers). The Pipeline runs it with
/// its scoring and head budget stages (Pipeline::evict_decode).
class DecodeEvictionPolicy : public Policy {
 public:
  Stage stage() const override { return Stage::kMaintenance; }
  int64_t prefill_queries() const override { return 0; }
  /// Decode steps between evictions (1: every step; kvpress DecodingPress compression_interval).
  virtual int64_t interval() const = 0;
  /// Entries per KV head an eviction leaves (kvpress DecodingPress target_size); 0: the run's
  /// budget, the entries per KV head prefill kept.
  virtual int64_t target() const = 0;
};

/// S4/S5 decode-time attention: replaces the dense attention of one decode step of one layer
/// (channel pruning with recovery: SPARK, ThinK; sparse selection: RocketKV HSA, Quest, SparQ,
/// Exact-TopK). An instance belongs to one run: it owns its side stores (page min/max, channel
/// masks, recovery statistics) and is not shared between threads.
class DecodeAttentionPolicy : public Policy {
 public:
  /// Called once per layer right after prefill compression with the layer's window context, so
  /// side stores can be built from the retained cache (same LayerPrefill the scorers saw; its
  /// keys/values are the pre-eviction tensors, the cache holds the retained ones). A channel-pruning
  /// stage stores the layer's keys compactly in `cache` here (KvCache::compact_keys).
  virtual void on_prefill(int64_t layer, const LayerPrefill& in, class KvCache& cache) = 0;
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
  // Timelines on the graph path: the captured step also writes each layer's selection into a
  // staging buffer of the graph; after a replay the caller stages it to pinned host memory (no
  // wait) and reads it once the stream has passed the copy (after the next sync), so recording
  // overlaps the next step. A policy that cannot makes generate() step eagerly instead.
  /// True when attend_device writes its selections into the graph's staging buffer (after
  /// prepare_graph).
  virtual bool stages_graph_selections() const { return false; }
  /// Enqueues the copy of the last replay's selections to pinned host memory; returns at once.
  virtual void stage_graph_selections() {}
  /// The staged selections; valid once the stream has passed the copy (any later sync).
  virtual StepSelections staged_graph_selections() const { return {}; }
  /// What the last attend_device of `layer` selected, as device tensors the graph keeps: {rows
  /// int32 [n_head_kv, S] (within each head, the first count[h] valid), count int64 [n_head_kv]};
  /// empty for policies that select nothing or keep no such buffers. For the exact top-k oracle
  /// (DeviceLayerHook) that runs after the layer's attention inside the same graph.
  virtual std::pair<at::Tensor, at::Tensor> device_selection(int64_t layer) const { return {}; }
};

/// The catalogue of policies (policy_catalog.h) with a factory per policy. Built once in main by
/// register_builtin_policies and passed by const reference.
class PolicyRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Policy>(const ParamValues& resolved)>;
  /// What each policy file defines (core/src/policies/<name>.cpp): its description and factory.
  struct Entry {
    std::string name;
    Stage stage;
    std::vector<ParamSpec> spec;
    std::string summary;  ///< one line with the paper reference
    Factory make;
    std::string score = {};         ///< scoring policies: PolicyDescription::score
    std::string layer_budget = {};  ///< scoring policies: PolicyDescription::layer_budget
  };
  void add(Entry e);
  /// The descriptions of every added policy (torch-free; the GUI and the session writer read it).
  const PolicyCatalog& catalog() const { return catalog_; }
  /// Validates params against the policy's ParamSpec and builds it. Throws InputError for an
  /// unknown policy or parameter.
  std::unique_ptr<Policy> make(const std::string& name, const ParamValues& values) const;
  /// Builds a stage resolve_pipeline validated.
  std::unique_ptr<Policy> make(const ResolvedStage& stage) const;

 private:
  PolicyCatalog catalog_;
  std::map<std::string, Factory> factories_;
};

/// Adds every built-in policy (scoring, budget allocation, ...) to `registry`.
void register_builtin_policies(PolicyRegistry& registry);

}  // namespace kvscope
