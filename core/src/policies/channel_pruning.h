#pragma once
// Internal header of the key-channel pruning policies (S4: SPARK, ThinK): ChannelPruningBase, the
// decode path both share (pruned-key store per layer and KV head, recovery bias, byte accounting,
// the fold into the cache for the dense CUDA kernels), and kept_channels. Both are defined in
// spark.cpp. Used by spark.cpp, think.cpp and the tests test_channel_pruning.cpp and
// test_cuda_key_scores.cpp.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"

namespace kvscope::policies {

/// Shared decode path of the key-channel pruning policies ("spark", "think"; defined in spark.cpp).
/// on_prefill (in the subclass) prunes the n_h entries each KV head holds right after eviction
/// (rows 0..n_h-1 of cache.head_keys(l, h)) and records, per entry t, its kept-channel mask m_t and
/// the key k̂_t the compute path uses (k_t ⊙ m_t, or with the pruned channels refilled: spark
/// sign=key) and an additive logit term r_t (query-independent recovery). One decode step then
/// computes, per query head of group h,
///
///   s_t = ( q·k̂_t + r_t ) / sqrt(D)            for t < n_h (pruned at prefill)
///   s_t = q·k_t / sqrt(D)                      for t >= n_h (appended during decode: never pruned,
///                                              nor is a row a ring-buffer head has overwritten since)
///   out = softmax_fp32(s) · V                  (values are not pruned)
///
/// Compute layout: the keys k̂ are kept dense [n_h, D] (cache dtype) beside the cache; on a CUDA
/// cache with a zero recovery bias they are also written over the pruned cache rows
/// (fold_into_cache), so decode is the dense attention kernel. Accounting assumes the pruned layout instead:
/// side_store_bytes() is what the subclass reports as the pruned key storage (kept values + channel indices + recovery
/// statistics); bytes_read_last() = that storage for the layer + dense K of decode-time entries + all
/// V. The K bytes saved versus a dense cache are dense_key_bytes() - side_store_bytes().
class ChannelPruningBase : public DecodeAttentionPolicy {
 public:
  ChannelPruningBase(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }
  Stage stage() const override { return Stage::kChannel; }
  void configure(const RunBudget& budget, const ModelConfig& config) override;
  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override;
  int64_t bytes_read_last() const override { return bytes_read_last_; }
  int64_t side_store_bytes() const override;

  /// Entries of (layer, kv_head) pruned at prefill (0 before on_prefill ran for that layer).
  int64_t pruned_entries(int64_t layer, int64_t kv_head) const;
  /// bool [n_h, D]: kept key channels of the entries pruned at prefill (true = kept).
  at::Tensor channel_mask(int64_t layer, int64_t kv_head) const;
  /// fp32 [n_h]: the additive logit term r_t before the 1/sqrt(D) scaling (zeros without recovery).
  at::Tensor recovery_bias(int64_t layer, int64_t kv_head) const;
  /// fp32 [G, len_h]: the scaled logits s of one decode step for the G query heads q_group [G, D] of
  /// kv_head over all len_h entries the cache holds for it now (formula above).
  at::Tensor head_logits(int64_t layer, int64_t kv_head, const at::Tensor& q_group, const KvCache& cache) const;
  /// Bytes the pruned entries' keys would take stored dense (n_h * D * itemsize, all layers and heads).
  int64_t dense_key_bytes() const;

  // CUDA-graph decode: with a zero recovery bias (sign=key, or no recovery) the logits are q·k̂ for
  // pruned entries and q·k for the rest, so k̂ folded into the cache rows makes the step plain dense
  // attention (the fused decode-attention kernel); see fold_into_cache.
  bool prepare_graph(const KvCache& cache, int64_t steps) override;
  at::Tensor attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset_dev,
                           const at::Tensor& length_dev) override;
  int64_t after_graph_step(const KvCache& cache) override;

 protected:
  /// The pruned state of one (layer, KV head).
  struct HeadStore {
    int64_t n = 0;          ///< entries pruned at prefill
    at::Tensor masked_k;    ///< [n, D] cache dtype: k̂ = K ⊙ mask (+ refilled channels); compute copy, not accounted
    at::Tensor mask;        ///< bool [n, D]
    at::Tensor bias;        ///< fp32 [n]
    at::Tensor pos;         ///< int64 [n]: true positions of the pruned entries (set by set_head)
    int64_t key_bytes = 0;  ///< accounted storage of the pruned keys, indices and statistics
    int64_t dense_bytes = 0;  ///< n * D * itemsize
  };
  /// Replaces the store of (layer, kv_head) with `s`, whose n entries are rows 0..n-1 of the head in
  /// `cache` now (their positions are recorded: a row a ring buffer later overwrites attends densely).
  void set_head(int64_t layer, int64_t kv_head, HeadStore s, const KvCache& cache);
  /// Bytes of one channel index: uint8 while D <= 256, else int16.
  static int64_t index_bytes(int64_t head_dim) { return head_dim <= 256 ? 1 : 2; }

 private:
  const HeadStore* find(int64_t layer, int64_t kv_head) const;
  /// On a CUDA cache: writes k̂ over the pruned rows of every KV head of `layer` (once per prefill)
  /// when the recovery bias is zero, no head is a ring buffer and head_dim suits the kernels.
  /// Returns whether the layer's cache rows now hold k̂ (the logits' keys). Syncs once per layer.
  bool fold_into_cache(int64_t layer, const KvCache& cache);
  /// Bytes one step reads in `layer` (pruned keys as stored, other keys and all values dense).
  int64_t layer_bytes(int64_t layer, const KvCache& cache) const;
  std::vector<char> folded_;  // [layer]: k̂ is in the cache rows
  std::string name_;
  ParamValues params_;
  std::vector<std::vector<HeadStore>> stores_;  // [layer][kv head]
  std::vector<int64_t> steps_;                  // [layer]: attend() calls since the layer's stores were set
  int64_t bytes_read_last_ = 0;
};

/// Channels kept per entry for pruning ratio lambda: T = floor((1 - lambda) * D) (SPARK §4.2), with a
/// 1e-9 guard so that e.g. (1 - 0.75) * 64 gives 16, clamped to [0, D].
int64_t kept_channels(double ratio, int64_t head_dim);

}  // namespace kvscope::policies
