#pragma once
// TimelineRecorder: fills a Timeline (timeline.h) while generate() runs. Evictions come from the
// cache's host state (lengths, ring cursors) and one read of the live positions after each prefill;
// selections from the decode policy's last_selection(); nothing is synchronised per decode step
// except what the selection read-back already costs.
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
  /// Also compute, per decode step and (layer, KV head), the recall of the exact top-k.
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
  /// After a whole decode step that appended `position` to every head.
  void after_decode(const KvCache& cache, int64_t position);
  /// The rows the decode policy read in layer `layer` this step (DecodeAttentionPolicy::
  /// last_selection: per KV head int64 [1, n] or [G, n] storage rows), with the step's post-RoPE
  /// queries q [n_head, head_dim] for the recall. Call after after_layer(layer).
  void on_selection(const KvCache& cache, int64_t layer, const std::vector<at::Tensor>& rows, const at::Tensor& q);
  /// The same for every layer of a step from host rows (DecodeAttentionPolicy::graph_selections:
  /// one selection per KV head, ascending), without recall. Call after after_decode().
  void on_selections(const KvCache& cache, const StepSelections& s);
  /// Mean of the current step's recall values over (layer, KV head), nullopt when none (reads the
  /// pending device values back).
  std::optional<double> step_recall_mean();
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
  /// Appends head h's entries of the current step: `sel` = its storage rows, ascending and unique
  /// (turned into ranks here).
  void record_head(const KvCache& cache, int64_t layer, int64_t h, std::vector<int64_t>& sel);
  Timeline t_;
  TimelineOptions o_;
  int64_t step_ = 0, cap_positions_ = 0;
  bool all_tokens_ = false;
  std::vector<uint8_t> pinned_;                                // [layer * n_head_kv + head]
  std::vector<std::vector<std::vector<int32_t>>> rows_;        // [layer][head]: position of each storage row
  std::vector<int64_t> layer_step_;                            // last step whose append a layer recorded
  std::vector<std::pair<size_t, at::Tensor>> pending_recall_;  // recall index, 0-d fp32 tensor
  std::vector<double> step_recall_;
};

}  // namespace kvscope
