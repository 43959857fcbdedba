#pragma once
// Capture: what a run records per layer and KV head for the views and sessions, computed from the
// prefill's window queries and keys before compression. Never an n_tok x n_tok matrix: the window
// attention is [n_head, w, n_tok] with w <= 64.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "kvscope/core/policy.h"

namespace kvscope {

/// off: nothing; summary: per-head scalars (cheap enough to leave on); full: also per-token and
/// per-channel arrays (window attention, cosine to the mean key, channel saliency).
enum class CaptureLevel { kOff, kSummary, kFull };
/// "off" | "summary" | "full". Throws InputError.
CaptureLevel parse_capture_level(const std::string& text);

/// Per-head scalar names of the summary level, in the order of LayerCapture::summary's columns:
///   entropy        H(a) of the window-mean attention a over prompt tokens, nats (Ada-KV Fig. 1 idea)
///   mass_top1pct   attention mass on the top 1% of tokens
///   mass_top5pct   attention mass on the top 5% of tokens (Ada-KV §3.4: most heads reach ~all of it)
///   tokens95_frac  fraction of tokens needed for 95% of the mass (Ada-KV Fig. 12 heatmap scalar)
///   sink_share     mass on the first 4 tokens (StreamingLLM §3 attention sinks)
///   cos_mean       mean cosine of keys to the mean normalised key (KeyDiff Eq. 8 anchor)
///   channel_cv     mean over channels of CV_j = std_t(w_tj) / mean_t(w_tj), w = |q̄_j|·|k_tj| (SPARK Fig. 2b)
const std::vector<std::string>& summary_metric_names();

/// One layer's capture. Arrays are fp32, on CPU after captures_to_host().
struct LayerCapture {
  at::Tensor summary;       // [n_head_kv, n_summary_metrics]
  at::Tensor attention;     // full: [n_head_kv, n_tok] window-mean attention (group mean), sums to 1
  at::Tensor cos_to_mean;   // full: [n_head_kv, n_tok]
  at::Tensor channel_mean;  // full: [n_head_kv, head_dim] mean_t |q̄_j|·|k_tj|
  at::Tensor channel_cv;    // full: [n_head_kv, head_dim]
  at::Tensor keys_pca;      // full: [n_head_kv, n_tok, 2] keys projected on their 2 principal axes (KeyDiff Fig. 3)
  /// full, with a scoring stage: [n_head_kv, n_tok] by prompt position, the score the budget stage
  /// ranked (Pipeline::compress_layer), e.g. SnapKV's pooled GQA-combined window vote, KeyDiff's
  /// negative cosine, H2O's accumulated attention; the largest finite float where always kept
  /// (window, sinks, recent); NaN where never scored. Block-wise prefill: the last score a position
  /// got (its eviction's, or the last block's for kept ones).
  at::Tensor policy_score;
};

/// Writes one compression's decisive scores into capture.policy_score by prompt position:
/// scores fp32 [n_head_kv, n] in cache-row order (Pipeline::compress_layer), positions int64
/// [n_head_kv, n] (KvCache::positions before the eviction); positions >= n_prompt are skipped.
/// Allocates policy_score (NaN) [n_head_kv, n_prompt] on the scores' device on first use. Does not
/// wait for the device.
void record_policy_scores(LayerCapture& capture, const at::Tensor& scores, const at::Tensor& positions,
                          int64_t n_prompt);

/// RocketKV Fig. 2 (docs/methods.md §1.7): per (layer, query head), the set of distinct token positions
/// that Exact-TopK (k entries) picks over all decode steps. Fed by the decode loop at capture full.
class TopkUnion {
 public:
  /// Positions up to `max_positions` (generate(): positions_needed), flags kept on `device`.
  TopkUnion(int64_t n_layer, int64_t n_head, int64_t k, int64_t max_positions, c10::Device device);
  /// One decode step of one layer: q [n_head, D] post-RoPE, the layer's live keys/positions. Reads
  /// nothing back (the picks stay on the device): one batched top-k per uniform layer.
  void add(int64_t layer, const at::Tensor& q, const class KvCache& cache);
  /// int64 [n_layer, n_head]: distinct positions picked so far.
  at::Tensor unique_counts() const;
  int64_t k() const { return k_; }
  /// Layer `layer`'s flags, bool [n_head, max_positions] on the device (the graph path's exact
  /// top-k oracle, core/src/decode_oracle.h, sets them in place).
  const at::Tensor& seen(int64_t layer) const { return seen_.at(layer); }

 private:
  int64_t k_;
  std::vector<at::Tensor> seen_;  // per layer: bool [n_head, max_positions] on the device
};

/// Computes a layer's capture from the prefill inputs (queries, keys before eviction), on their
/// device and without waiting for it (CUDA: kernels/head_stats.h beside the SnapKV window-voting
/// kernels). `window`: observation window for the attention statistics (clamped to the queries
/// available). The tensors stay on the device until captures_to_host().
LayerCapture capture_layer(const LayerPrefill& in, int64_t window, CaptureLevel level);

/// Moves every layer's capture to the host as fp32 CPU tensors (the summaries in one copy).
void captures_to_host(std::vector<LayerCapture>& captures);

}  // namespace kvscope
