#pragma once
// Engine: the Llama forward pass (embedding, RMSNorm, RoPE, GQA attention, SwiGLU MLP, tied or
// untied head) over a KvCache, for prefill (whole or chunked) and decode.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/model.h"
#include "kvscope/core/rope.h"

namespace kvscope {

/// What a layer hands to an observer after its attention ran on a block of tokens (used by the
/// compression pipeline and capture). q: post-RoPE queries [T, n_head, head_dim] of the block.
struct LayerEvent {
  const ModelConfig& config;
  int64_t layer;
  const at::Tensor& q;
  KvCache& cache;
};
using LayerObserver = std::function<void(const LayerEvent&)>;

class DecodeAttentionPolicy;

/// Called inside Engine::decode_step_device after each layer's attention with the layer index,
/// the step's post-RoPE queries q [B * n_head, head_dim] and the layer's device offsets and live
/// lengths (int64 [n_head_kv], the step's entry included). What it enqueues is captured with the
/// step (DecodeGraph), so it must not read the device back nor depend on host state that changes
/// between replays (capture full's exact top-k oracle: core/src/decode_oracle.h).
using DeviceLayerHook =
    std::function<void(int64_t layer, const at::Tensor& q, const at::Tensor& offset, const at::Tensor& length)>;

/// Device-resident inputs of a decode step that never reads the host, so a CUDA graph can capture
/// it (DecodeGraph). All tensors on the model's CUDA device.
struct DeviceDecodeState {
  /// int64 [B]: the token to run. B > 1 decodes B sequences at the same position at once (the
  /// batch of bench_engine --batch): the cache then holds B x n_head_kv heads, sequence b owning
  /// heads b * n_head_kv .. (b + 1) * n_head_kv - 1, with dense attention or a decode policy whose
  /// attend_device treats every cache head as its own (page selection: query head i reads cache
  /// head i / G, which is sequence b's head for b's rows).
  at::Tensor token;
  at::Tensor position;             ///< int64 [1]: its position; the step adds 1
  std::vector<at::Tensor> meta;    ///< per layer int64 [3, n_head_kv]: offsets, live lengths (the step adds 1), append
                                   ///< tickets (zeros); [5, n_head_kv] for a layer holding compact keys: rows 3 and 4 =
                                   ///< the key and value rows' bases (LayerKv::key_row / value_row of entry 0)
  std::vector<int64_t> max_len;    ///< per layer: host bound of every length after the step (e.g. capacity)
  std::vector<int64_t> total_len;  ///< per layer: host bound of their sum
  DeviceLayerHook after_attention;  ///< optional, see DeviceLayerHook
};

class Engine {
 public:
  /// The engine borrows `model` (which must outlive it).
  explicit Engine(const Model& model);
  const Model& model() const { return model_; }

  /// A cache with room for `capacity` tokens per (layer, KV head) on the model's device/dtype.
  KvCache new_cache(int64_t capacity) const;

  /// Runs `ids` through the model at positions cache.next_position() onward, appending their keys
  /// and values to `cache`. Returns fp32 logits: [T, vocab] if all_logits, else [vocab] of the last
  /// token. `observer`, if set, is called once per layer after that layer's attention.
  /// Throws InputError on an empty block or an id outside [0, vocab).
  /// `decode_attention`, if set, replaces dense attention for single-token blocks (decode steps).
  at::Tensor forward(KvCache& cache, std::span<const int32_t> ids, bool all_logits = false,
                     const LayerObserver& observer = {}, DecodeAttentionPolicy* decode_attention = nullptr) const;

  /// One decode token through the fused CUDA path from `s` alone (no host reads or uploads, no
  /// observer; a decode policy runs its attend_device after prepare_graph): appends its K/V to
  /// `cache` in place but leaves the cache's host lengths and position alone (the caller commits
  /// them). Returns fp32 logits [vocab] ([B, vocab] for B tokens). Throws std::invalid_argument
  /// when `s` does not have one meta tensor per layer, or for a batch over a cache that is not
  /// B x n_head_kv heads.
  at::Tensor decode_step_device(KvCache& cache, DeviceDecodeState& s,
                                DecodeAttentionPolicy* decode_attention = nullptr) const;

  /// True when every context length in [first_seq_len, last_seq_len] rotates with the same RoPE
  /// tables (always, but for longrope across its threshold and dynamic NTK past it): what one
  /// captured CUDA graph needs.
  bool rope_fixed_over(int64_t first_seq_len, int64_t last_seq_len) const;
  /// Prefill in blocks of `chunk` tokens (0 = whole prompt at once). Same result as forward; then
  /// the sliding-window layers keep only their window (KvCache::ring_windows).
  at::Tensor prefill(KvCache& cache, std::span<const int32_t> ids, int64_t chunk = 0, bool all_logits = false,
                     const LayerObserver& observer = {}) const;

 private:
  /// The residual rows [B, hidden] between fused decode layers and the RMSNorm that comes next,
  /// left pending by the projection that produced them (ops::NormedRows): gx = g ⊙ x, sumsq fp32
  /// [B, parts] partial sums of x². gx undefined: nothing pending.
  struct DecodeRows {
    at::Tensor x, gx, sumsq;
  };
  /// One layer over T rows; a decode token (T = 1) on CUDA takes the fused kernels, with in's
  /// pending norm and next_norm as fused_decode_layer has them (ignored by the other paths).
  DecodeRows layer_forward(int64_t l, const DecodeRows& in, const at::Tensor& positions, const RopeTable& rope,
                           KvCache& cache, bool self_only, const LayerObserver& observer,
                           DecodeAttentionPolicy* decode_attention, const at::Tensor& next_norm) const;
  /// Device metadata of one fused decode layer: offsets/lengths int64 [n_head_kv], the append
  /// tickets int64 [n_head_kv] (zeros; ops::qkv_rope_append), position int64 [1], host bounds for
  /// the attention plan, and whether to commit the append to the host lengths.
  struct DecodeLayerMeta {
    at::Tensor offset, length, tickets, position;
    int64_t max_len, total_len;
    bool commit;
    const DeviceLayerHook* hook = nullptr;  ///< decode_step_device's after_attention
    at::Tensor k_offset = {};               ///< key rows' bases on the device (compact keys), or undefined
    at::Tensor v_offset = {};               ///< value rows' bases on the device (compact keys), or undefined
  };
  DecodeRows decode_layer_cuda(int64_t l, const DecodeRows& in, const RopeTable& rope, KvCache& cache,
                               const LayerObserver& observer, DecodeAttentionPolicy* decode_attention,
                               const at::Tensor& next_norm) const;
  /// One decode layer through the fused kernels; next_norm: the weight of the RMSNorm after the
  /// layer (the next layer's attention norm, or the final norm), left pending in the result, or
  /// undefined.
  DecodeRows fused_decode_layer(int64_t l, const DecodeRows& in, const RopeTable& rope, KvCache& cache,
                                const DecodeLayerMeta& m, DecodeAttentionPolicy* decode_attention,
                                const LayerObserver& observer, const at::Tensor& next_norm) const;
  /// The RMSNorm weight applied to layer l's output: layer l + 1's attention norm, or the final
  /// norm after the last layer (the next_norm a fused decode layer leaves pending).
  const at::Tensor& norm_after(int64_t l) const;
  /// Every layer's RoPE table for a block of positions when the context is seq_len tokens long
  /// (rope.h: longrope and dynamic NTK depend on it); layers sharing a frequency set share a table.
  std::vector<RopeTable> rope_tables(const at::Tensor& positions, int64_t seq_len) const;
  struct RopeSet {
    at::Tensor inv_freq;  // fp32 [rope_dim/2] on the model device
    double scaling = 1;   // YaRN / longrope attention scaling of cos and sin
  };
  const Model& model_;
  std::vector<RopeSet> rope_sets_;  // distinct frequency sets over layers and context regimes
  std::vector<int> layer_freq_[2];  // per layer: index into rope_sets_, at or below / past the threshold
  bool fused_layers_ = true;        // the fused CUDA kernels take the family's layers
  double embed_scale_ = 1.0;        // Gemma: sqrt(hidden) rounded to the weights' dtype; 1 otherwise
  /// Gemma 2's final logit soft-capping (identity for other models).
  at::Tensor final_softcap(const at::Tensor& logits) const;
};

/// RMSNorm as HF computes it: x in fp32, x * rsqrt(mean(x^2) + eps), cast back, times weight (an
/// fp32 weight with a lower-precision x, Gemma's (1 + w): times weight in fp32, then cast).
/// Zhang & Sennrich 2019. x: [..., hidden]; weight: [hidden].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace kvscope
