#pragma once
// A differentiable forward pass of a loaded model for head-pattern learning. The inference Engine
// runs token blocks over a KV cache; this runs whole batches of fixed-length sequences with
// attention masks, so LibTorch autograd reaches the per-head gates and per-layer window logits.
// The model weights are used as they are (frozen: they never require grad); RoPE and RMSNorm are
// the engine's own (rope.h, engine.h).
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/model.h"

namespace kvscope::learn {

/// How one layer's attention is computed. Per KV head h (shared by its G query heads):
///   P_h = a_h * P_full + (1 - a_h) * sum_i w_i * P_stream(i)
///   out = P_h V
/// P_full: causal softmax; P_stream(i): softmax over the `sink` first keys and the `windows[i]`
/// most recent keys (the query's own included), the mask a streaming head sees at inference
/// (StreamingLLM §3.2; DuoAttention §3.1 mixes the two outputs by a learned gate a in [0, 1];
/// HS-SFT §2.2 picks one window per layer from a candidate set). Mixing the probabilities is the
/// same as mixing the outputs, since out is linear in P.
struct AttentionMix {
  int64_t sink = 0;              ///< sink tokens every streaming head keeps (>= 0)
  std::vector<int64_t> windows;  ///< candidate windows (>= 1 each); empty: plain causal attention
  at::Tensor window_weights;     ///< fp32 [windows.size()] (may carry gradients); undefined: windows[0] alone
  at::Tensor full_weight;        ///< fp32 [n_head_kv] a_h (may carry gradients); undefined: all 0 (streaming)
};

/// Causal/streaming attention mask as in AttentionMix: bool [T, T], true where query i may read
/// key j: j <= i and (j < sink or i - j < window). window <= 0: causal only.
at::Tensor streaming_mask(int64_t T, int64_t sink, int64_t window, const at::Device& device);

class TrainingForward {
 public:
  /// Borrows `model` (which must outlive this object).
  explicit TrainingForward(const Model& model);
  const Model& model() const { return model_; }

  /// Final hidden states (after the final RMSNorm, as HF's last_hidden_state) of `ids`:
  /// int64 [B, T] on the model's device, every id in [0, vocab). `mixes`: one per layer, or empty
  /// for the dense model. Returns [B, T, hidden] in the model dtype. Differentiable with respect
  /// to the tensors inside `mixes`. Throws InputError for a wrong shape or count of mixes.
  at::Tensor hidden_states(const at::Tensor& ids, const std::vector<AttentionMix>& mixes) const;

  /// Logits of hidden states: fp32 [B, T, vocab].
  at::Tensor logits(const at::Tensor& hidden) const;

  /// Next-token cross-entropy in nats, mean over the B * (T - 1) predicted positions.
  at::Tensor lm_loss(const at::Tensor& ids, const std::vector<AttentionMix>& mixes) const;

 private:
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMix* mix) const;
  const Model& model_;
  at::Tensor inv_freq_;
};

}  // namespace kvscope::learn
