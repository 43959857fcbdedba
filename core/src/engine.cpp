#include "kvscope/core/engine.h"

#include <algorithm>
#include <iostream>
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
  inv_freq_ = rope_inv_freq(c).to(model.device);
  inv_freqs_ = {inv_freq_};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const at::Tensor f = rope_inv_freq(c, l).to(model.device);
    int k = 0;
    while (k < static_cast<int>(inv_freqs_.size()) && !at::equal(inv_freqs_[static_cast<std::size_t>(k)], f)) ++k;
    if (k == static_cast<int>(inv_freqs_.size())) inv_freqs_.push_back(f);
    layer_freq_.push_back(k);
  }
  std::string extras = c.unfused_features();
  if (c.head_dim != 64 && c.head_dim != 128)  // what the fused decode attention kernels take
    extras += (extras.empty() ? "" : ", ") + std::string("head_dim ") + std::to_string(c.head_dim);
  fused_layers_ = extras.empty();
  if (!fused_layers_ && model.device.is_cuda() && ops::cuda_kernels_available())
    std::cerr << "kvscope: " << c.model_type << " (" << extras
              << ") runs the unfused LibTorch layers on CUDA, without the CUDA graph: the fused decode kernels "
                 "take Llama-style layers only\n";
}

std::vector<RopeTable> Engine::rope_tables(const at::Tensor& positions) const {
  std::vector<RopeTable> out;
  for (const at::Tensor& f : inv_freqs_) out.push_back(rope_table(positions, f, model_.dtype));
  return out;
}

const RopeTable& Engine::layer_rope(const std::vector<RopeTable>& tables, int64_t l) const {
  return tables[static_cast<std::size_t>(layer_freq_[static_cast<std::size_t>(l)])];
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
  cache.append(l, kh, vh, positions);
  const AttentionShape shape{c.attn_scale, c.attn_softcap, c.window(l)};
  at::Tensor attn;
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
                          nullptr};
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
  const LayerKv& L = cache.layer(l);
  if (B > 1 && (m.commit || observer || cache.n_head_kv() != B * Hkv))
    throw std::invalid_argument(
        "fused_decode_layer: a batch of rows needs a cache of B x n_head_kv heads, the graph path and no observer");
  const ops::NormedRows h = in.gx.defined() ? ops::NormedRows(in.gx, in.sumsq, c.rms_norm_eps)
                                            : ops::NormedRows(ops::rms_norm(x, w.attn_norm, c.rms_norm_eps));
  // One launch for the fused QKV projection with RoPE and the cache append in its epilogue; its
  // output comes in q, k, v blocks, so a batch's heads are [B * heads, D] (sequence b's heads at
  // b * heads ..). Advances m.length on the device.
  const auto [q, k, v] =
      ops::qkv_rope_append(h, w.w_qkv, w.b_qkv, H, Hkv, rope.cos.view({D / 2}), rope.sin.view({D / 2}), c.rope_layout,
                           L.k, L.v, L.pos, m.offset, m.length, m.tickets, m.position);
  if (m.commit) cache.commit_append(l, 1);
  at::Tensor attn;
  if (!decode_attention)
    attn = ops::decode_attention(q, L.k, L.v, m.offset, m.length, m.max_len, m.total_len, H / Hkv).view({B, H * D});
  else if (m.commit)
    attn = decode_attention->attend(l, q, cache).reshape({1, H * D});
  else
    attn = decode_attention->attend_device(l, q, cache, m.offset, m.length).reshape({B, H * D});
  if (observer) observer(LayerEvent{c, l, q.unsqueeze(0), cache});
  if (m.hook && *m.hook) (*m.hook)(l, q, m.offset, m.length);
  // The o and down projections add the residual stream as their bias (one kernel, one rounding).
  const auto [residual, h2] = ops::linear_row_norm_out(attn, w.w_o, x, w.mlp_norm, c.rms_norm_eps);
  const at::Tensor act = ops::linear_row_swiglu(h2, w.w_gate_up);  // gate/up with its SwiGLU: one launch
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
  const RopeTable rope = rope_table(s.position, inv_freq_, model_.dtype);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const DecodeLayerMeta m{s.meta[l][0],     s.meta[l][1],      s.meta[l][2], s.position, s.max_len[l], s.total_len[l],
                            /*commit=*/false, &s.after_attention};
    x = fused_decode_layer(l, x, rope, cache, m, decode_attention, {}, norm_after(l));
  }
  s.position.add_(1);
  const ops::NormedRows normed(x.gx, x.sumsq, c.rms_norm_eps);                  // the final norm, pending
  return ops::linear_row(normed, model_.weights.lm_head, {}, true).squeeze(0);  // [vocab] or [B, vocab]
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
  // Gemma: embeddings times sqrt(hidden), the factor rounded to the weights' dtype as HF does.
  if (c.embed_scale != 1.0)
    rows.x = rows.x * at::scalar_tensor(c.embed_scale, at::TensorOptions().dtype(model_.dtype)).item<double>();
  const std::vector<RopeTable> ropes = rope_tables(positions);
  for (int64_t l = 0; l < c.n_layer; ++l)
    rows = layer_forward(l, rows, positions, layer_rope(ropes, l), cache, self_only, observer, decode_attention,
                         norm_after(l));
  cache.advance_position(T);
  if (rows.gx.defined()) {  // a fused decode step: the final norm is pending, as in decode_step_device
    const at::Tensor logits =
        ops::linear_row(ops::NormedRows(rows.gx, rows.sumsq, c.rms_norm_eps), model_.weights.lm_head, {}, true);
    return all_logits ? logits : logits.squeeze(0);
  }
  at::Tensor x = rows.x;
  if (!all_logits) x = x.narrow(0, T - 1, 1);
  const at::Tensor normed = rms_norm(x, model_.weights.final_norm, c.rms_norm_eps);
  at::Tensor logits = !all_logits && x.is_cuda() && ops::cuda_kernels_available()
                          ? ops::linear_row(normed, model_.weights.lm_head, {}, /*fp32_out=*/true)
                          : at::linear(normed, model_.weights.lm_head).to(at::kFloat);
  if (c.final_softcap > 0) logits = at::tanh(logits / c.final_softcap) * c.final_softcap;  // Gemma 2
  return all_logits ? logits : logits.squeeze(0);
}

at::Tensor Engine::prefill(KvCache& cache, std::span<const int32_t> ids, int64_t chunk, bool all_logits,
                           const LayerObserver& observer) const {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (chunk <= 0 || chunk >= T) return forward(cache, ids, all_logits, observer);
  std::vector<at::Tensor> logits;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const bool last = t0 + n == T;
    at::Tensor lg = forward(cache, ids.subspan(t0, n), all_logits, observer);
    if (all_logits)
      logits.push_back(lg);
    else if (last)
      return lg;
  }
  return at::cat(logits, 0);
}

}  // namespace kvscope
