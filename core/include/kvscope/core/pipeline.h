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
#include "kvscope/core/pipeline_spec.h"
#include "kvscope/core/policy.h"

namespace kvscope {

class Pipeline {
 public:
  /// Builds the stages of `spec` (validated by resolve_pipeline against registry.catalog(): known
  /// policies and parameters, stage rules, `uniform` after a scorer without a budget stage) with
  /// `registry`'s factories. Throws InputError naming what is wrong (the message lists the valid
  /// policies or keys), also from a factory (e.g. an unreadable head-pattern file).
  Pipeline(const PolicyRegistry& registry, std::string_view spec);

  /// Canonical SPEC with every parameter resolved (what a session stores).
  std::string canonical() const;
  /// Whether any stage runs under the run's budget (pipeline_uses_budget): false for a head
  /// pattern or channel pruning alone, which must be run without one.
  bool uses_budget() const { return uses_budget_; }
  const std::vector<std::unique_ptr<Policy>>& stages() const { return stages_; }

  /// Prepares a run: configures decode-time stages and returns the entries per KV head that
  /// eviction keeps after prefill. Throws InputError for an invalid budget.
  int64_t begin_run(const RunBudget& budget, const ModelConfig& config) const;

  /// Compresses layer `ev.layer` of `ev.cache` to `n_kept` entries per KV head on average
  /// (physical eviction, no-op when n_kept >= n_tok and there is no scoring stage), leaving room
  /// for `reserve` appended entries per head, then lets the decode-time stage build its side stores.
  /// Returns the decisive scores: exactly the tensor the budget stage's select() ranked, fp32
  /// [n_head_kv, n_tok] in the cache's row order before eviction (kKeepScore = the largest finite
  /// float for entries always kept: observation window, sinks, recent share); undefined when no
  /// scorer ran (no scoring stage, or nothing to evict).
  at::Tensor compress_layer(const LayerEvent& ev, int64_t n_kept, int64_t reserve) const;

  /// Whether the pipeline evicts while decoding (an S6 `decoding` stage).
  bool evicts_during_decode() const { return decode_eviction_ != nullptr; }
  /// Eviction while decoding (S6): called right after layer ev.layer's attention at decode step
  /// `step` (0-based; ev.q the step's queries [1, n_head, head_dim]). Every interval() steps, when
  /// the layer holds more than target() entries per KV head (0: `n_kept`, the run's budget), the
  /// scorer ranks them with the step's query as its only query, the head budget keeps that many,
  /// and the rest are freed (the layer re-packed with room for interval() more). An accumulating
  /// scorer (H2O) adds the step's attention to every entry's running total at every step and ranks
  /// by the totals (docs/methods.md §7.13). No-op without the
  /// stage and on sliding-window layers. The cache must hold equal lengths per head (a uniform head
  /// budget); throws InputError otherwise.
  void evict_decode(const LayerEvent& ev, int64_t step, int64_t n_kept) const;

  /// Entries per KV head an eviction while decoding leaves: the stage's target, else `n_kept` (the
  /// run's budget). 0 without the stage.
  int64_t decode_target(int64_t n_kept) const;
  /// Whether evict_decode can run as evict_decode_device: an S6 stage with the uniform head budget
  /// and no layer budget, so that every eviction keeps the top-target of target + interval entries
  /// in every KV head (at interval 1: drops the one lowest-ranked); H2O (accumulating) only at
  /// interval 1, as its totals grow at every step.
  bool evicts_in_place() const;
  /// Decode steps between evictions (the S6 stage's interval); 0 without the stage.
  int64_t decode_interval() const;
  /// Before the first evict_decode_device of a decode: an accumulating scorer (H2O) moves each
  /// global layer's running totals into a device buffer of target + 1 columns that the steps update
  /// in place (a captured step allocates nothing that outlives it). Returns false (nothing moved)
  /// when a layer's totals do not cover exactly `target` entries (the cache is not at its cap).
  /// Other scorers: true, nothing to do.
  bool begin_decode_device(const ModelConfig& config, int64_t target) const;
  /// After the last evict_decode_device of a decode: the running totals back where evict_decode
  /// and a later turn read them.
  void end_decode_device() const;
  /// evict_decode at an eviction step, on the device only, for a captured decode step
  /// (DecodeGraph, DeviceLayerHook): the step's entry has made n = target + interval live entries
  /// per head (the host lengths still say one fewer); the scorer ranks them with the step's queries
  /// q [n_head, head_dim] (post-RoPE) and the head budget's top-target stay, in order, as
  /// evict_decode's retain keeps them: KvCache::drop_lowest at interval 1 (one kernel), else
  /// KvCache::keep_in_place. `length` (int64 [n_head_kv], the device's live lengths) falls by
  /// interval. The caller commits the drop on the host (KvCache::commit_drop) after the step. H2O
  /// (after begin_decode_device) adds the step's attention to the running totals and ranks by them,
  /// and the totals drop the same row. No-op on sliding-window layers. Same kept set as
  /// evict_decode, up to ties in the scores. Throws std::logic_error unless evicts_in_place(), or
  /// for H2O without begin_decode_device.
  void evict_decode_device(const ModelConfig& config, int64_t layer, const at::Tensor& q, KvCache& cache,
                           int64_t target, const at::Tensor& length) const;

  /// Prefill block size the scoring stage asks for (KeyDiff block-wise prefill), 0 = whole prompt.
  int64_t prefill_block() const { return scorer_ ? scorer_->prefill_block() : 0; }

  /// How many of the prefill's last queries the stages read (the most any reads, Policy::
  /// prefill_queries), or -1 when one reads them all or the scorer prefills block-wise: then the
  /// pipeline cannot compress a shared prefill (SharedPrefill) and must prefill on its own.
  int64_t prefill_queries() const;

  /// The decode-time attention stage (S4/S5/S7), or null; a channel stage with a selection stage
  /// is both in one (channel pruning first, the selection over the recovered keys). Mutable: it
  /// owns per-run side stores.
  DecodeAttentionPolicy* decode_attention() const { return decode_; }

 private:
  std::vector<std::unique_ptr<Policy>> stages_;
  bool uses_budget_ = true;
  void apply_head_pattern(const LayerEvent& ev, int64_t reserve) const;
  /// compress_layer for a layer with head-wise lengths (a later turn after Ada-KV, a pyramid or any
  /// ragged budget): each KV head ranked on its own entries, the budget stages over the heads'
  /// scores padded with -inf [n_head_kv, longest]. Refuses ring-buffer heads and H2O's totals.
  at::Tensor compress_ragged(const LayerEvent& ev, int64_t n_kept, int64_t reserve) const;
  const HeadPatternPolicy* heads_ = nullptr;
  const ScoringPolicy* scorer_ = nullptr;
  /// The scorer's scores of `in`, the newest recent_share() x n_kept entries marked kKeepScore.
  at::Tensor rank(const LayerPrefill& in, int64_t n_kept) const;
  /// `scores` with the newest recent_share() x n_kept entries marked kKeepScore (in place).
  at::Tensor mark_recent(at::Tensor scores, int64_t n_kept) const;
  /// Newest entries an accumulating eviction (H2O) always keeps at `n_kept`: the recent share and
  /// the scorer's own newest (retain_accumulated and evict_decode_device rank alike).
  int64_t accumulated_newest_kept(int64_t n_kept) const;
  /// Whether eviction while decoding keeps a running attention total per entry (H2O, an
  /// accumulating scorer): attention_sums_ then follows the cache's rows.
  bool accumulating() const { return decode_eviction_ && scorer_ && scorer_->accumulates(); }
  /// H2O while decoding: adds `in`'s attention sums to layer `layer`'s running totals (the rows
  /// past them, appended since, start at 0); returns the totals over the layer's live rows.
  at::Tensor accumulate(int64_t layer, const LayerPrefill& in) const;
  /// Ranks the running totals `sums` (the scorer's newest entries and the recent share marked),
  /// keeps `n_kept` per head by the head budget and re-packs the cache and the totals alike.
  /// Returns the ranked scores [n_head_kv, rows].
  at::Tensor retain_accumulated(const LayerEvent& ev, const at::Tensor& sums, const LayerPrefill& in, int64_t n_kept,
                                int64_t reserve) const;
  /// Per layer: fp32 [n_head_kv, rows] running attention totals of the live rows, in row order
  /// (accumulating pipelines only; reset by begin_run). Per-run state, as decode_'s side stores.
  mutable std::vector<at::Tensor> attention_sums_;
  /// Per layer, between begin_decode_device and end_decode_device: fp32 [n_head_kv, target + 1],
  /// the running totals of the live rows in the first target columns (the last: scratch for the
  /// step's entry).
  mutable std::vector<at::Tensor> device_sums_;

  const LayerBudgetPolicy* layer_budget_ = nullptr;
  const BudgetPolicy* budget_ = nullptr;
  const DecodeEvictionPolicy* decode_eviction_ = nullptr;
  DecodeAttentionPolicy* decode_ = nullptr;
  /// A channel stage stacked under a selection stage (stacked_decode.h): decode_ points here.
  std::unique_ptr<DecodeAttentionPolicy> stacked_;
};

}  // namespace kvscope
