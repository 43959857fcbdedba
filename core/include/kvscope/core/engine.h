#pragma once
// Engine: the Llama forward pass (embedding, RMSNorm, RoPE, GQA attention, SwiGLU MLP, tied or
// untied head) over a KvCache, for prefill (whole or chunked) and decode.
#include <cstdint>
#include <functional>
#include <span>

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

  /// Prefill in blocks of `chunk` tokens (0 = whole prompt at once). Same result as forward.
  at::Tensor prefill(KvCache& cache, std::span<const int32_t> ids, int64_t chunk = 0, bool all_logits = false,
                     const LayerObserver& observer = {}) const;

 private:
  at::Tensor layer_forward(int64_t l, const at::Tensor& x, const at::Tensor& positions, const RopeTable& rope,
                           KvCache& cache, bool self_only, const LayerObserver& observer,
                           DecodeAttentionPolicy* decode_attention) const;
  at::Tensor decode_layer_cuda(int64_t l, const at::Tensor& x, const RopeTable& rope, KvCache& cache,
                               const LayerObserver& observer, DecodeAttentionPolicy* decode_attention) const;
  const Model& model_;
  at::Tensor inv_freq_;  // fp32 [head_dim/2] on the model device
};

/// RMSNorm as HF computes it: x in fp32, x * rsqrt(mean(x^2) + eps), cast back, times weight.
/// Zhang & Sennrich 2019. x: [..., hidden]; weight: [hidden].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace kvscope
