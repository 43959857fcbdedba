#pragma once
// TimelineRecorder: fills a Timeline (timeline.h) while generate() runs. Evictions come from the
// cache's host state (lengths, ring cursors) and one read of the live positions after each prefill;
// selections from the decode policy's last_selection(); nothing is synchronised per decode step
// except what the selection read-back already costs.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/timeline.h"

namespace kvscope {

struct TimelineOptions {
  int64_t page = 16;  ///< ranks per page of the page-granular selection record
  /// (layer, KV head) pairs whose selections are also recorded per token.
  std::vector<std::pair<int64_t, int64_t>> pinned;
  /// Every head is recorded per token when that record is at most this many bytes (before zstd):
  /// n_layer · n_head_kv · positions · steps / 8.
  int64_t all_tokens_bytes = int64_t(8) << 20;
  /// Also compute, per decode step and (layer, KV head), the recall of the exact top-k, and keep that
  /// top-k (Timeline::exact) for the heads recorded per token.
  bool recall = false;
};

class TimelineRecorder {
 public:
  /// Room for `max_positions` positions and `max_steps` steps (generate(): positions_needed and
  /// its step count); more grows the record. Throws InputError for a pinned head outside the model.
  TimelineRecorder(int64_t n_layer, int64_t n_head_kv, int64_t max_positions, int64_t max_steps, TimelineOptions o);
  int64_t step() const { return step_; }
  /// Starts the next step (a decode forward pass, or a later turn's prefill).
  void begin_step();
  /// After a prefill block of positions [first, first + n) and its compression, given every head's
  /// live positions (KvCache::host_positions): records what entered and what left (EvictionCause
  /// kPrefill at step 0, kTurn later).
  void after_prefill(const std::vector<std::vector<std::vector<int32_t>>>& live_positions, int64_t first, int64_t n);
  /// During a decode step, after layer `layer` appended `position`: records the append (and a ring
  /// buffer's overwrite). after_decode() does it for the layers not seen.
  void after_layer(const KvCache& cache, int64_t layer, int64_t position);
  /// After a decode-time eviction in layer `layer` (Pipeline::evict_decode), after after_layer():
  /// every entry no longer live is recorded as evicted at this step (EvictionCause kDecode: the
  /// step's attention was the last to read it). Reads the layer's positions to the host.
  void after_decode_eviction(const KvCache& cache, int64_t layer);
  /// After a whole decode step that appended `position` to every head.
  void after_decode(const KvCache& cache, int64_t position);
  /// The rows the decode policy read in layer `layer` this step (DecodeAttentionPolicy::
  /// last_selection: per KV head int64 [1, k] or [G, k] storage rows), with the step's post-RoPE
  /// queries q [n_head, head_dim] for the recall. Call after after_layer(layer). With
  /// TimelineOptions::recall, per head with k < live entries: recall = |selection ∩ exact top-k| / k
  /// (per query head and averaged for [G, k]), the exact top-k being the k largest group-summed
  /// q·k logits ([1, k]) or each query head's own k largest ([G, k]; RocketKV's Exact-TopK oracle,
  /// §A.3 / Fig. 2, docs/methods.md §7.10). For the heads recorded per token that top-k (the union
  /// over the group for [G, k]) goes to on_exact() when the step's values are read back (the next
  /// begin_step(), step_recall_mean() or finish(): one device read per step for all of them).
  void on_selection(const KvCache& cache, int64_t layer, const std::vector<at::Tensor>& rows, const at::Tensor& q);
  /// Records the exact top-k of (layer, head) at the current decode step (Timeline::exact): `rows`
  /// = its storage rows in the head's current cache, any order, duplicates allowed (turned into ranks
  /// as the selections are); entries of earlier heads and steps not given stay empty. For a second
  /// producer of the oracle (on_selection() is the first). Ignored before the first decode step;
  /// throws std::logic_error for a head already recorded at this step (or one before it, out of
  /// order) or a row outside the head's cache.
  void on_exact(const KvCache& cache, int64_t layer, int64_t head, std::vector<int64_t> rows);
  /// The same for every layer of a step from host rows (DecodeAttentionPolicy::graph_selections:
  /// one selection per KV head, ascending), without recall. Call after after_decode().
  void on_selections(const KvCache& cache, const StepSelections& s);
  /// The current step's recall from another producer (the graph path's DecodeOracle): values
  /// [n_layer * n_head_kv] (NaN: none). Ignored when recall is off or before the first decode step;
  /// throws std::invalid_argument for another size. Returns the mean of the measured (finite)
  /// values, nullopt when none, as step_recall_mean() does for on_selection's.
  std::optional<double> on_recall(const std::vector<float>& values);
  /// Mean of the current step's recall values over (layer, KV head), nullopt when none (reads the
  /// pending device values back).
  std::optional<double> step_recall_mean();
  /// True when head h of `layer` records its selections per token.
  bool per_token(int64_t layer, int64_t h) const {
    return all_tokens_ || pinned_[static_cast<size_t>(layer * t_.n_head_kv + h)];
  }
  /// True when some head records per token.
  bool any_per_token() const { return all_tokens_ || std::find(pinned_.begin(), pinned_.end(), 1) != pinned_.end(); }
  /// The record (the recorder is spent).
  Timeline finish(int64_t n_positions);
  /// A copy of the record so far, as finish() would give it (for live views).
  Timeline snapshot(int64_t n_positions) const;

 private:
  void grow_positions(int64_t n);
  void evict(int64_t layer, int64_t head, int64_t position, EvictionCause cause);
  void flush_recall();
  /// finish()'s compaction of `t` (a copy or the record itself) to n_positions and step_ steps.
  Timeline compact(Timeline t, int64_t n_positions) const;
  /// Storage rows of head h of `layer` -> ranks (position order), ascending and unique (`ring`: the
  /// head is a ring buffer, whose slots are not in position order); throws std::logic_error for a
  /// row outside the head's cache.
  std::vector<int64_t> ranks_of(int64_t layer, int64_t h, bool ring, std::vector<int64_t> rows) const;
  /// on_exact() with the head's ring flag given.
  void record_exact(int64_t layer, int64_t h, bool ring, std::vector<int64_t> rows);
  /// Appends head h's entries of the current step: `sel` = its storage rows, ascending and unique.
  void record_head(const KvCache& cache, int64_t layer, int64_t h, std::vector<int64_t> sel);
  Timeline t_;
  TimelineOptions o_;
  int64_t step_ = 0, cap_positions_ = 0;
  bool all_tokens_ = false;
  std::vector<uint8_t> pinned_;                                // [layer * n_head_kv + head]
  std::vector<std::vector<std::vector<int32_t>>> rows_;        // [layer][head]: position of each storage row
  std::vector<int64_t> layer_step_;                            // last step whose append a layer recorded
  std::vector<std::pair<size_t, at::Tensor>> pending_recall_;  // recall index, 0-d fp32 tensor
  struct PendingExact {
    int64_t layer, head;
    bool ring;
    at::Tensor rows;  // int64 storage rows on the device, flat
  };
  std::vector<PendingExact> pending_exact_;  // this step's exact top-k, read back with the recall
  std::vector<double> step_recall_;
};

}  // namespace kvscope
