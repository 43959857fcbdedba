#include "kvscope/core/learn/training_forward.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/rope.h"

namespace kvscope::learn {

at::Tensor streaming_mask(int64_t T, int64_t sink, int64_t window, const at::Device& device) {
  const auto opts = at::TensorOptions().device(device).dtype(at::kLong);
  at::Tensor i = at::arange(T, opts).unsqueeze(1), j = at::arange(T, opts).unsqueeze(0);
  at::Tensor causal = j <= i;
  if (window <= 0) return causal;
  return causal.logical_and((j < sink).logical_or(i - j < window));
}

TrainingForward::TrainingForward(const Model& model) : model_(model) {
  inv_freq_ = rope_inv_freq(model.config).to(model.device);
}

at::Tensor TrainingForward::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const AttentionMix* mix) const {
  // q: [B, T, H, D]; k, v: [B, T, Hkv, D]. Scores [B, Hkv, G, T, T] in fp32 (softmax as HF eager).
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), G = H / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor qg = q.reshape({B, T, Hkv, G, D}).permute({0, 2, 3, 1, 4});  // [B, Hkv, G, T, D]
  at::Tensor kt = k.permute({0, 2, 3, 1}).unsqueeze(2);                   // [B, Hkv, 1, D, T]
  at::Tensor vv = v.permute({0, 2, 1, 3}).unsqueeze(2);                   // [B, Hkv, 1, T, D]
  at::Tensor s = at::matmul(qg, kt).to(at::kFloat).mul_(scale);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  auto masked_softmax = [&](int64_t sink, int64_t window) {
    return at::softmax(s.masked_fill(streaming_mask(T, sink, window, s.device()).logical_not(), neg_inf), -1);
  };
  at::Tensor p;
  if (!mix || mix->windows.empty()) {
    p = masked_softmax(0, 0);
  } else {
    at::Tensor stream;
    for (size_t i = 0; i < mix->windows.size(); ++i) {
      if (mix->window_weights.defined() || i == 0) {
        at::Tensor pi = masked_softmax(mix->sink, mix->windows[i]);
        if (mix->window_weights.defined()) pi = pi * mix->window_weights[static_cast<int64_t>(i)];
        stream = stream.defined() ? stream + pi : pi;
      }
    }
    if (mix->full_weight.defined()) {
      at::Tensor a = mix->full_weight.to(at::kFloat).view({1, Hkv, 1, 1, 1});
      p = a * masked_softmax(0, 0) + (1 - a) * stream;
    } else {
      p = stream;
    }
  }
  at::Tensor o = at::matmul(p.to(v.scalar_type()), vv);  // [B, Hkv, G, T, D]
  return o.permute({0, 3, 1, 2, 4}).reshape({B, T, H * D});
}

at::Tensor TrainingForward::hidden_states(const at::Tensor& ids, const std::vector<AttentionMix>& mixes) const {
  const ModelConfig& c = model_.config;
  if (ids.dim() != 2 || ids.size(1) < 1) throw InputError("training forward: ids must be int64 [B, T] with T >= 1");
  if (!mixes.empty() && static_cast<int64_t>(mixes.size()) != c.n_layer)
    throw InputError("training forward: " + std::to_string(mixes.size()) + " attention mixes for " +
                     std::to_string(c.n_layer) + " layers");
  const int64_t B = ids.size(0), T = ids.size(1), H = c.n_head, Hkv = c.n_head_kv, D = c.head_dim,
                I = c.intermediate_size;
  at::Tensor positions = at::arange(T, at::TensorOptions().device(model_.device).dtype(at::kLong));
  const RopeTable rope = rope_table(positions, inv_freq_, model_.dtype);      // [T, 1, D/2]: broadcasts over B
  at::Tensor x = at::embedding(model_.weights.embed, ids.to(model_.device));  // [B, T, hidden]
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = model_.weights.layers[l];
    at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps);
    at::Tensor qkv = w.b_qkv.defined() ? at::linear(h, w.w_qkv, w.b_qkv) : at::linear(h, w.w_qkv);
    at::Tensor qk = apply_rope(qkv.narrow(2, 0, (H + Hkv) * D).reshape({B, T, H + Hkv, D}), rope, c.rope_layout);
    at::Tensor q = qk.narrow(2, 0, H), k = qk.narrow(2, H, Hkv);
    at::Tensor v = qkv.narrow(2, (H + Hkv) * D, Hkv * D).reshape({B, T, Hkv, D});
    at::Tensor attn = attention(q, k, v, mixes.empty() ? nullptr : &mixes[l]);
    x = x + at::linear(attn, w.w_o);
    at::Tensor gu = at::linear(rms_norm(x, w.mlp_norm, c.rms_norm_eps), w.w_gate_up);
    x = x + at::linear(at::silu(gu.narrow(2, 0, I)) * gu.narrow(2, I, I), w.w_down);
  }
  return rms_norm(x, model_.weights.final_norm, c.rms_norm_eps);
}

at::Tensor TrainingForward::logits(const at::Tensor& hidden) const {
  return at::linear(hidden, model_.weights.lm_head).to(at::kFloat);
}

at::Tensor TrainingForward::lm_loss(const at::Tensor& ids, const std::vector<AttentionMix>& mixes) const {
  const int64_t T = ids.size(1);
  if (T < 2) throw InputError("training forward: the LM loss needs sequences of >= 2 tokens");
  at::Tensor lg = logits(hidden_states(ids, mixes)).narrow(1, 0, T - 1);
  at::Tensor target = ids.to(model_.device).narrow(1, 1, T - 1);
  return at::cross_entropy_loss(lg.reshape({-1, lg.size(2)}), target.reshape({-1}));
}

}  // namespace kvscope::learn
