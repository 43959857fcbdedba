#pragma once
// Internal header of the key-channel pruning policies (S4: SPARK, ThinK): ChannelPruningBase, the
// decode path both share (compact keys in the cache, recovery bias, byte accounting, the CUDA
// graph path), and kept_channels. Both are defined in
// spark.cpp. Used by spark.cpp, think.cpp and the tests test_channel_pruning.cpp and
// test_cuda_key_scores.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"
#include "ops/compact_ops.h"

namespace kvscope::policies {

/// Shared decode path of the key-channel pruning policies ("spark", "think"; defined in spark.cpp).
/// on_prefill (in the subclass) prunes the n_h entries each KV head holds right after eviction:
/// it picks each entry's kept channels m_t and how the others recover, and stores the keys
/// compactly in the cache (KvCache::compact_keys with CompactKeys: kept values + kept-channel bits
/// + recovery statistics), which frees their dense rows. Reads of those keys give the recovered
/// key k̂_t (k_t on the kept channels; the pruned ones 0, or refilled: spark sign=key). A
/// query-independent recovery term r_t (spark sign=positive) is an fp32 bias per entry held here.
/// One decode step then computes, per query head of group h,
///
///   s_t = ( q·k̂_t + r_t ) / sqrt(D)            for t < n_h (pruned at prefill)
///   s_t = q·k_t / sqrt(D)                      for t >= n_h (appended during decode: never pruned)
///   out = softmax_fp32(s) · V                  (values are not pruned)
///
/// On the CPU each head's k̂ is recovered on the fly (LibTorch, one head at a time). On CUDA (no
/// bias, G <= 8) one kernel reads the compact layout directly and recovers the pruned channels in
/// registers (kernels/compact_decode.h), eagerly and in the CUDA graph; a layout it cannot read
/// (SPARK-p's per-entry counts) is recovered into one workspace shared by all layers (one layer's
/// dense keys) for the dense kernel. Layers with streaming ring-buffer heads are not pruned (their
/// rows are overwritten in place); sliding-window layers never reach a decode stage.
/// bytes_read_last() = the layer's compact keys as stored + dense K of decode-time entries + all V
/// (+ the bias).
class ChannelPruningBase : public DecodeAttentionPolicy {
 public:
  ChannelPruningBase(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }
  Stage stage() const override { return Stage::kChannel; }
  void configure(const RunBudget& budget, const ModelConfig& config) override;
  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  int64_t bytes_read_last() const override { return bytes_read_last_; }
  /// Bytes of the recovery biases held here (the compact keys are the cache's: KvCache::bytes_allocated).
  int64_t side_store_bytes() const override;

  /// Entries of (layer, kv_head) pruned at prefill (0 before on_prefill ran for that layer).
  int64_t pruned_entries(int64_t layer, int64_t kv_head) const;
  /// bool [n_h, D]: kept key channels of the entries pruned at prefill (true = kept), read from `cache`.
  at::Tensor channel_mask(int64_t layer, int64_t kv_head, const KvCache& cache) const;
  /// fp32 [n_h]: the additive logit term r_t before the 1/sqrt(D) scaling (zeros without one).
  at::Tensor recovery_bias(int64_t layer, int64_t kv_head) const;
  /// fp32 [G, len_h]: the scaled logits s of one decode step for the G query heads q_group [G, D] of
  /// kv_head over all len_h entries the cache holds for it now (formula above).
  at::Tensor head_logits(int64_t layer, int64_t kv_head, const at::Tensor& q_group, const KvCache& cache) const;
  /// Bytes the pruned entries' keys would take stored dense (n_h * D * itemsize, all layers and heads).
  int64_t dense_key_bytes() const;

  // CUDA-graph decode (no recovery bias): see the class comment.
  bool prepare_graph(const KvCache& cache, int64_t steps) override;
  at::Tensor attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                           const at::Tensor& length_dev) override;
  int64_t after_graph_step(const KvCache& cache) override;

  // A decode-time selection stacked over the compact keys (PagedSelectionBase::read_compact_rows_with).
  /// True when attend_rows can read `layer` of `cache`: on CUDA, a compact-key table (a layout the
  /// kernel reads), G <= 8, no recovery bias.
  bool reads_rows(int64_t layer, const KvCache& cache) const;
  /// Decode attention of q [n_head, D] (CUDA) over the rows `sel` selects per KV head, compact keys
  /// (and values) recovered on the fly (kernels/compact_decode.h); max_rows bounds sel's counts.
  /// graph: inside the CUDA graph (the row bases prepare_graph uploaded), else uploaded now.
  /// Returns [n_head, D] in q's dtype. Throws std::logic_error where !reads_rows.
  at::Tensor attend_rows(int64_t layer, const at::Tensor& q, const KvCache& cache, const ops::CompactSelection& sel,
                         int64_t max_rows, bool graph) const;

 protected:
  /// What on_prefill found for one (layer, KV head).
  struct HeadStore {
    int64_t n = 0;            ///< entries pruned at prefill
    at::Tensor bias;          ///< fp32 [n]: r_t, or undefined (no query-independent term)
    int64_t dense_bytes = 0;  ///< n * D * itemsize
  };
  /// Stores the compact keys of every KV head of `layer` in `cache` (KvCache::compact_keys) and
  /// records each head's store. heads[h].n must be the head's live entries.
  /// values: the same entries' values stored compactly too (SPARK value_ratio), or empty.
  void set_layer(int64_t layer, std::vector<CompactKeys> keys, std::vector<HeadStore> stores, KvCache& cache,
                 std::vector<CompactKeys> values = {});
  /// True when `layer` of `cache` can hold compact keys (no streaming ring-buffer head).
  static bool prunable(const KvCache& cache, int64_t layer);

 private:
  const HeadStore* find(int64_t layer, int64_t kv_head) const;
  /// Writes layer l's recovered keys and its decode-time keys (up to each head's capacity) into
  /// the workspace, laid out like the layer's values; returns the workspace (one layer's rows).
  at::Tensor recover_into_workspace(int64_t layer, const KvCache& cache);
  /// Whether the CUDA kernels can attend for this layer: CUDA, no bias, a supported head_dim, G <= 8.
  bool kernels_fit(int64_t layer, const KvCache& cache) const;
  /// One step of `layer` through the CUDA kernels (kernels_fit): the compact-key kernel, the dense
  /// kernel over the workspace (a layout it cannot read) or over the cache (no compact keys).
  /// value_base_dev / key_base_dev: int64 [n_head_kv], LayerKv::value_row / key_row of entry 0.
  at::Tensor attend_kernels(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& value_base_dev,
                            const at::Tensor& key_base_dev, const at::Tensor& length_dev, int64_t max_len,
                            int64_t total_len);
  /// Per head the value rows' bases, then the key rows' bases (LayerKv::value_row / key_row of 0).
  static std::vector<int64_t> row_bases(const LayerKv& L);
  /// The compact-key kernel's table of `layer` (tables_), or null where it has none.
  const ops::CompactLayerTable* table(int64_t layer) const;
  /// Bytes one step reads in `layer` (pruned keys as stored, other keys and all values dense).
  int64_t layer_bytes(int64_t layer, const KvCache& cache) const;
  std::string name_;
  ParamValues params_;
  std::vector<std::vector<HeadStore>> stores_;                 // [layer][kv head]
  std::vector<std::optional<ops::CompactLayerTable>> tables_;  // [layer]: the compact-key kernel's
  std::vector<at::Tensor> row_bases_;                          // [layer]: row_bases on the device (graph)
  at::Tensor workspace_;                                       // recovered keys of one layer (fallback)
  int64_t group_ = 1;                                          // G, query heads per KV head
  int64_t bytes_read_last_ = 0;
};

/// Channels kept per entry for pruning ratio lambda: T = floor((1 - lambda) * D) (SPARK §4.2), with a
/// 1e-9 guard so that e.g. (1 - 0.75) * 64 gives 16, clamped to [0, D].
int64_t kept_channels(double ratio, int64_t head_dim);

}  // namespace kvscope::policies
