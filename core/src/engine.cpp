#include "kvscope/core/engine.h"

#include <algorithm>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/attention.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/rope.h"
#include "ops/cuda_ops.h"

namespace kvscope {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  // Gemma's (1 + w) weights stay fp32 and scale before the cast, as HF's Gemma RMSNorm does.
  if (weight.scalar_type() == at::kFloat && x.scalar_type() != at::kFloat) return (normed * weight).to(x.scalar_type());
  return weight * normed.to(x.scalar_type());
}

Engine::Engine(const Model& model) : model_(model) {
  const ModelConfig& c = model.config;
  // Distinct frequency sets, one per regime of the context length (HF's longrope short / long;
  // dynamic NTK is recomputed past its threshold, rope_sets), and which one each layer takes.
  for (const int64_t seq_len : {int64_t{0}, std::numeric_limits<int64_t>::max() / 2}) {
    std::vector<int> per_layer;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const RopeFrequencies f = rope_frequencies(c, l, seq_len);
      const at::Tensor inv = f.inv_freq.to(model.device);
      std::size_t k = 0;
      while (k < rope_sets_.size() &&
             !(rope_sets_[k].scaling == f.attention_scaling && at::equal(rope_sets_[k].inv_freq, inv)))
        ++k;
      if (k == rope_sets_.size()) rope_sets_.push_back({inv, f.attention_scaling});
      per_layer.push_back(static_cast<int>(k));
    }
    layer_freq_[seq_len == 0 ? 0 : 1] = per_layer;
  }
  // Gemma: embeddings times sqrt(hidden), the factor rounded to the weights' dtype as HF does.
  embed_scale_ = c.embed_scale == 1.0
                     ? 1.0
                     : at::scalar_tensor(c.embed_scale, at::TensorOptions().dtype(model.dtype)).item<double>();
  const std::string extras = c.unfused_features();
  fused_layers_ = extras.empty();
  if (!fused_layers_ && model.device.is_cuda() && ops::cuda_kernels_available())
    std::cerr << "kvscope: " << c.model_type << " (" << extras
              << ") runs the unfused LibTorch layers on CUDA, without the CUDA graph: the fused decode kernels "
                 "do not take it\n";
}

std::vector<RopeTable> Engine::rope_tables(const at::Tensor& positions, int64_t seq_len) const {
  const ModelConfig& c = model_.config;
  std::vector<RopeTable> out(static_cast<std::size_t>(c.n_layer));
  const RopeSeqDependence dep = rope_seq_dependence(c);
  const bool past = dep.kind != RopeSeqDependence::Kind::kNone && seq_len > dep.threshold;
  std::vector<RopeTable> sets(rope_sets_.size());
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const auto k = static_cast<std::size_t>(layer_freq_[past ? 1 : 0][static_cast<std::size_t>(l)]);
    if (past && dep.kind == RopeSeqDependence::Kind::kDynamic &&
        rope_seq_dependence(c, l).kind == RopeSeqDependence::Kind::kDynamic) {
      // Dynamic NTK: the base grows with the context (HF recomputes it at every new length).
      const RopeFrequencies f = rope_frequencies(c, l, seq_len);
      out[static_cast<std::size_t>(l)] =
          rope_table(positions, f.inv_freq.to(positions.device()), model_.dtype, f.attention_scaling);
      continue;
    }
    if (!sets[k].cos.defined())
      sets[k] = rope_table(positions, rope_sets_[k].inv_freq, model_.dtype, rope_sets_[k].scaling);
    out[static_cast<std::size_t>(l)] = sets[k];
  }
  return out;
}

bool Engine::rope_fixed_over(int64_t first_seq_len, int64_t last_seq_len) const {
  const RopeSeqDependence dep = rope_seq_dependence(model_.config);
  switch (dep.kind) {
    case RopeSeqDependence::Kind::kNone:
      return true;
    case RopeSeqDependence::Kind::kLongShort:
      return (first_seq_len > dep.threshold) == (last_seq_len > dep.threshold);
    case RopeSeqDependence::Kind::kDynamic:
      return last_seq_len <= dep.threshold;
  }
  return false;
}

KvCache Engine::new_cache(int64_t capacity) const {
  return KvCache(model_.config, capacity, model_.device, model_.dtype);
}

Engine::DecodeRows Engine::layer_forward(int64_t l, const DecodeRows& in, const at::Tensor& positions,
                                         const RopeTable& rope, KvCache& cache, bool self_only,
                                         const LayerObserver& observer, DecodeAttentionPolicy* decode_attention,
                                         const at::Tensor& next_norm) const {
  const ModelConfig& c = model_.config;
  const LayerWeights& w = model_.weights.layers[l];
  const at::Tensor& x = in.x;
  const int64_t T = x.size(0), H = c.n_head, Hkv = c.n_head_kv, D = c.head_dim;
  if (fused_layers_ && T == 1 && x.is_cuda() && ops::cuda_kernels_available() && cache.reserve_append(l, 1))
    return decode_layer_cuda(l, in, rope, cache, observer, decode_attention, next_norm);
  at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps);
  at::Tensor qkv = w.b_qkv.defined() ? at::linear(h, w.w_qkv, w.b_qkv) : at::linear(h, w.w_qkv);
  at::Tensor qk = qkv.narrow(1, 0, (H + Hkv) * D).view({T, H + Hkv, D});
  if (w.q_norm.defined())  // Qwen3 / Gemma 3: per-head RMSNorm of q and k before RoPE
    qk = at::cat({rms_norm(qk.narrow(1, 0, H), w.q_norm, c.rms_norm_eps),
                  rms_norm(qk.narrow(1, H, Hkv), w.k_norm, c.rms_norm_eps)},
                 1);
  // q and k heads rotate together: one RoPE pass over [T, n_head + n_head_kv, D].
  qk = apply_rope(qk, rope, c.rope_layout);
  at::Tensor q = qk.narrow(1, 0, H), k = qk.narrow(1, H, Hkv);
  at::Tensor v = qkv.narrow(1, (H + Hkv) * D, Hkv * D).view({T, Hkv, D});
  at::Tensor kh = k.transpose(0, 1), vh = v.transpose(0, 1);  // [Hkv, T, D]
  const AttentionShape shape{c.attn_scale, c.attn_softcap, c.window(l)};
  at::Tensor attn;
  if (shape.window > 0 && !self_only) {
    // A sliding-window layer: its ring holds the last `window` positions in any order (KvCache), so
    // the block attends over them and itself by position, before the append overwrites the oldest.
    const at::Tensor kv_pos = at::cat({cache.positions(l).select(0, 0), positions});
    attn =
        gqa_attention(q, at::cat({cache.keys(l), kh}, 1), at::cat({cache.values(l), vh}, 1), shape, positions, kv_pos);
    cache.append(l, kh, vh, positions);
  } else {
    cache.append(l, kh, vh, positions);
    if (decode_attention && T == 1) {
      attn = decode_attention->attend(l, q[0], cache).reshape({1, H * D});
    } else if (self_only) {
      attn = gqa_causal_self_attention(q, kh, vh, shape);
    } else if (cache.layer(l).uniform()) {
      attn = gqa_attention(q, cache.keys(l), cache.values(l), shape);
    } else {
      // Ragged heads (head-wise budgets): one attention per KV head over its own entries.
      const int64_t G = H / Hkv;
      std::vector<at::Tensor> per_head;
      for (int64_t g = 0; g < Hkv; ++g)
        per_head.push_back(gqa_attention(q.narrow(1, g * G, G), cache.head_keys(l, g).unsqueeze(0),
                                         cache.head_values(l, g).unsqueeze(0), shape)
                               .view({T, G, D}));
      attn = at::cat(per_head, 1).view({T, H * D});
    }
  }
  if (observer) observer(LayerEvent{c, l, q, cache});
  at::Tensor attn_out = at::linear(attn, w.w_o);
  if (w.post_attn_norm.defined()) attn_out = rms_norm(attn_out, w.post_attn_norm, c.rms_norm_eps);  // Gemma
  at::Tensor out = x + attn_out;
  at::Tensor gu = at::linear(rms_norm(out, w.mlp_norm, c.rms_norm_eps), w.w_gate_up);
  const int64_t I = c.intermediate_size;
  at::Tensor gate = gu.narrow(1, 0, I);
  gate = c.activation == GatedActivation::kGeluTanh ? at::gelu(gate, "tanh") : at::silu(gate);
  at::Tensor mlp = at::linear(gate * gu.narrow(1, I, I), w.w_down);
  if (w.post_ffn_norm.defined()) mlp = rms_norm(mlp, w.post_ffn_norm, c.rms_norm_eps);
  return DecodeRows{out + mlp, {}, {}};
}

Engine::DecodeRows Engine::decode_layer_cuda(int64_t l, const DecodeRows& in, const RopeTable& rope, KvCache& cache,
                                             const LayerObserver& observer, DecodeAttentionPolicy* decode_attention,
                                             const at::Tensor& next_norm) const {
  // The eager fused step: this layer's offsets, lengths and the position go up in one pinned copy.
  const LayerKv& L = cache.layer(l);
  const int64_t Hkv = cache.n_head_kv();
  std::vector<int64_t> meta(L.offset);
  meta.insert(meta.end(), L.length.begin(), L.length.end());
  meta.insert(meta.end(), Hkv, 0);  // the append tickets (ops::qkv_rope_append)
  meta.push_back(cache.next_position());
  const bool compact = L.has_compact();
  if (compact) {  // the key and value rows' bases
    for (const auto& bases : {L.key_bases(), L.value_bases()}) meta.insert(meta.end(), bases.begin(), bases.end());
  }
  const at::Tensor dev = ops::upload_int64(meta, in.x.device());
  int64_t max_len = 0, total_len = 0;
  for (int64_t n : L.length) {
    max_len = std::max(max_len, n + 1);
    total_len += n + 1;
  }
  const DecodeLayerMeta m{dev.narrow(0, 0, Hkv),
                          dev.narrow(0, Hkv, Hkv),
                          dev.narrow(0, 2 * Hkv, Hkv),
                          dev.narrow(0, 3 * Hkv, 1),
                          max_len,
                          total_len,
                          /*commit=*/true,
                          nullptr,
                          compact ? dev.narrow(0, 3 * Hkv + 1, Hkv) : at::Tensor(),
                          compact ? dev.narrow(0, 4 * Hkv + 1, Hkv) : at::Tensor()};
  return fused_decode_layer(l, in, rope, cache, m, decode_attention, observer, next_norm);
}

Engine::DecodeRows Engine::fused_decode_layer(int64_t l, const DecodeRows& in, const RopeTable& rope, KvCache& cache,
                                              const DecodeLayerMeta& m, DecodeAttentionPolicy* decode_attention,
                                              const LayerObserver& observer, const at::Tensor& next_norm) const {
  // One decode token through the fused kernels (kernels/): the QKV projection with RoPE + in-place
  // cache append, split-K GQA attention over the (possibly ragged) cache, the o projection adding
  // the residual, the gate/up projection with its SiLU-mul, the down projection adding the
  // residual. The RMSNorms have no launch of their own: the o and down projections leave the next
  // norm pending (g ⊙ x and partial sums of x²) and the QKV and gate/up projections apply it
  // (ops::NormedRows); only a layer entered with nothing pending (the first, or one after a layer
  // that took the unfused path) runs its attention norm as a launch. A decode-attention policy (HSA, Quest, SparQ, ...)
  // replaces the attention step only. Without m.commit or an observer it reads no host state but m's bounds (graph
  // capture; a policy then runs attend_device).
  const ModelConfig& c = model_.config;
  const at::Tensor& x = in.x;
  const LayerWeights& w = model_.weights.layers[l];
  const int64_t H = c.n_head, Hkv = c.n_head_kv, D = c.head_dim, B = x.size(0);
  // A sliding-window layer attends densely over its ring: decode-time selection is for global layers.
  if (c.window(l) > 0) decode_attention = nullptr;
  const LayerKv& L = cache.layer(l);
  if (B > 1 && (m.commit || observer || cache.n_head_kv() != B * Hkv))
    throw std::invalid_argument(
        "fused_decode_layer: a batch of rows needs a cache of B x n_head_kv heads, the graph path and no observer");
  // Nothing pending (the first layer, or after an unfused one): the norm as a launch (fp32 Gemma
  // weights: LibTorch).
  const ops::NormedRows h = in.gx.defined() ? ops::NormedRows(in.gx, in.sumsq, c.rms_norm_eps)
                            : w.attn_norm.scalar_type() == x.scalar_type()
                                ? ops::NormedRows(ops::rms_norm(x, w.attn_norm, c.rms_norm_eps))
                                : ops::NormedRows(rms_norm(x, w.attn_norm, c.rms_norm_eps));
  ops::QkvFeatures features;
  features.q_norm = w.q_norm;  // Qwen3 / Gemma 3 (undefined otherwise)
  features.k_norm = w.k_norm;
  features.norm_eps = c.rms_norm_eps;
  features.ring = L.window;  // a sliding-window layer's ring
  features.k_offset = m.k_offset;
  features.v_offset = m.v_offset;
  // One launch for the fused QKV projection with RoPE and the cache append in its epilogue; its
  // output comes in q, k, v blocks, so a batch's heads are [B * heads, D] (sequence b's heads at
  // b * heads ..). Advances m.length on the device.
  const auto [q, k, v] =
      ops::qkv_rope_append(h, w.w_qkv, w.b_qkv, H, Hkv, rope.cos.view({-1}), rope.sin.view({-1}), c.rope_layout, L.k,
                           L.v, L.pos, m.offset, m.length, m.tickets, m.position, features);
  if (m.commit) cache.commit_append(l, 1);
  at::Tensor attn;
  if (!decode_attention)
    attn = ops::decode_attention(q, L.k, L.v, m.offset, m.length, m.max_len, m.total_len, H / Hkv, c.attn_scale, 0, {},
                                 c.attn_softcap)
               .view({B, H * D});
  else if (m.commit)
    attn = decode_attention->attend(l, q, cache).reshape({1, H * D});
  else
    attn = decode_attention->attend_device(l, q, cache, m.offset, m.length).reshape({B, H * D});
  if (observer) observer(LayerEvent{c, l, q.unsqueeze(0), cache});
  if (m.hook && *m.hook) (*m.hook)(l, q, m.offset, m.length);
  if (w.post_attn_norm.defined()) {
    // Gemma's sandwich norms: each sublayer's output is normalised before the residual add, one
    // launch that also leaves the next norm pending (ops::rms_norm_residual).
    const auto [residual, h2] =
        ops::rms_norm_residual(ops::linear_row(attn, w.w_o), w.post_attn_norm, x, w.mlp_norm, c.rms_norm_eps);
    const at::Tensor act = ops::linear_row_swiglu(h2, w.w_gate_up, c.activation);
    const auto [out, next] =
        ops::rms_norm_residual(ops::linear_row(act, w.w_down), w.post_ffn_norm, residual, next_norm, c.rms_norm_eps);
    return next.pending() ? DecodeRows{out, next.x, next.sumsq} : DecodeRows{out, {}, {}};
  }
  // The o and down projections add the residual stream as their bias (one kernel, one rounding).
  const auto [residual, h2] = ops::linear_row_norm_out(attn, w.w_o, x, w.mlp_norm, c.rms_norm_eps);
  const at::Tensor act = ops::linear_row_swiglu(h2, w.w_gate_up, c.activation);  // gate/up + activation: one launch
  if (!next_norm.defined()) return DecodeRows{ops::linear_row(act, w.w_down, residual), {}, {}};
  const auto [out, next] = ops::linear_row_norm_out(act, w.w_down, residual, next_norm, c.rms_norm_eps);
  return DecodeRows{out, next.x, next.sumsq};
}

const at::Tensor& Engine::norm_after(int64_t l) const {
  return l + 1 < model_.config.n_layer ? model_.weights.layers[l + 1].attn_norm : model_.weights.final_norm;
}

at::Tensor Engine::decode_step_device(KvCache& cache, DeviceDecodeState& s,
                                      DecodeAttentionPolicy* decode_attention) const {
  const ModelConfig& c = model_.config;
  if (static_cast<int64_t>(s.meta.size()) != c.n_layer || s.max_len.size() != s.meta.size() ||
      s.total_len.size() != s.meta.size())
    throw std::invalid_argument("decode_step_device: one meta tensor and bound per layer expected");
  DecodeRows x{at::embedding(model_.weights.embed, s.token), {}, {}};  // [B, hidden]
  if (embed_scale_ != 1.0) x.x = x.x * embed_scale_;
  // The tables of the context length at capture (DecodeGraph::supported keeps within one regime).
  const std::vector<RopeTable> ropes = rope_tables(s.position, cache.next_position() + 1);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const DecodeLayerMeta m{s.meta[l][0],
                            s.meta[l][1],
                            s.meta[l][2],
                            s.position,
                            s.max_len[l],
                            s.total_len[l],
                            /*commit=*/false,
                            &s.after_attention,
                            s.meta[l].size(0) > 3 ? s.meta[l][3] : at::Tensor(),
                            s.meta[l].size(0) > 4 ? s.meta[l][4] : at::Tensor()};
    x = fused_decode_layer(l, x, ropes[static_cast<std::size_t>(l)], cache, m, decode_attention, {}, norm_after(l));
  }
  s.position.add_(1);
  const ops::NormedRows normed(x.gx, x.sumsq, c.rms_norm_eps);  // the final norm, pending
  return final_softcap(ops::linear_row(normed, model_.weights.lm_head, {}, true).squeeze(0));  // [vocab] or [B, vocab]
}

at::Tensor Engine::forward(KvCache& cache, std::span<const int32_t> ids, bool all_logits, const LayerObserver& observer,
                           DecodeAttentionPolicy* decode_attention) const {
  const ModelConfig& c = model_.config;
  if (ids.empty()) throw InputError("forward: empty token block (nothing to run)");
  for (int32_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw InputError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(c.vocab_size) + ")");
  const int64_t T = static_cast<int64_t>(ids.size());
  const auto dev = model_.device;
  at::Tensor tok = at::from_blob(const_cast<int32_t*>(ids.data()), {T}, at::kInt).to(dev, at::kLong);
  at::Tensor positions =
      at::arange(cache.next_position(), cache.next_position() + T, at::TensorOptions().device(dev).dtype(at::kLong));
  bool self_only = true;
  for (int64_t l = 0; l < cache.n_layer(); ++l)
    for (int64_t n : cache.layer(l).length) self_only = self_only && n == 0;
  DecodeRows rows{at::embedding(model_.weights.embed, tok), {}, {}};  // [T, hidden]
  if (embed_scale_ != 1.0) rows.x = rows.x * embed_scale_;
  // HF's rotary embeddings take the block's last position + 1 as the context length (seq-length
  // dependent scalings: longrope, dynamic NTK; for one sequence HF's cached maximum is that value).
  const std::vector<RopeTable> ropes = rope_tables(positions, cache.next_position() + T);
  for (int64_t l = 0; l < c.n_layer; ++l)
    rows = layer_forward(l, rows, positions, ropes[static_cast<std::size_t>(l)], cache, self_only, observer,
                         decode_attention, norm_after(l));
  cache.advance_position(T);
  if (rows.gx.defined()) {  // a fused decode step: the final norm is pending, as in decode_step_device
    const at::Tensor logits = final_softcap(
        ops::linear_row(ops::NormedRows(rows.gx, rows.sumsq, c.rms_norm_eps), model_.weights.lm_head, {}, true));
    return all_logits ? logits : logits.squeeze(0);
  }
  at::Tensor x = rows.x;
  if (!all_logits) x = x.narrow(0, T - 1, 1);
  const at::Tensor normed = rms_norm(x, model_.weights.final_norm, c.rms_norm_eps);
  at::Tensor logits = !all_logits && x.is_cuda() && ops::cuda_kernels_available()
                          ? ops::linear_row(normed, model_.weights.lm_head, {}, /*fp32_out=*/true)
                          : at::linear(normed, model_.weights.lm_head).to(at::kFloat);
  logits = final_softcap(logits);
  return all_logits ? logits : logits.squeeze(0);
}

at::Tensor Engine::final_softcap(const at::Tensor& logits) const {
  const double cap = model_.config.final_softcap;  // Gemma 2: cap * tanh(logits / cap)
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

at::Tensor Engine::prefill(KvCache& cache, std::span<const int32_t> ids, int64_t chunk, bool all_logits,
                           const LayerObserver& observer) const {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (chunk <= 0 || chunk >= T) {
    at::Tensor logits = forward(cache, ids, all_logits, observer);
    cache.ring_windows();  // sliding-window layers keep only their window from here on
    return logits;
  }
  std::vector<at::Tensor> logits;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const bool last = t0 + n == T;
    at::Tensor lg = forward(cache, ids.subspan(t0, n), all_logits, observer);
    if (all_logits)
      logits.push_back(lg);
    else if (last) {
      cache.ring_windows();
      return lg;
    }
  }
  cache.ring_windows();
  return at::cat(logits, 0);
}

}  // namespace kvscope
