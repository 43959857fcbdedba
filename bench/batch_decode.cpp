// See batch_decode.h.
#include "batch_decode.h"
#include "device_timing.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <ATen/ATen.h>

#include "kvscope/core/decode_graph.h"
#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policy.h"

namespace kvscope::bench {

BatchDecode time_batched_decode(const Engine& engine, const std::vector<std::vector<int64_t>>& lengths, int64_t batch,
                                int64_t steps, DecodeAttentionPolicy* policy) {
  const Model& model = engine.model();
  ModelConfig bc = model.config;
  if (static_cast<int64_t>(lengths.size()) != bc.n_layer)
    throw std::invalid_argument("time_batched_decode: one length list per layer expected");
  const int64_t Hkv = bc.n_head_kv, D = bc.head_dim, reserve = steps + 8;
  bc.n_head_kv *= batch;
  int64_t longest = 1;
  bool ragged = false;
  for (const auto& layer : lengths) {
    if (static_cast<int64_t>(layer.size()) != Hkv)
      throw std::invalid_argument("time_batched_decode: one length per KV head");
    for (int64_t n : layer) longest = std::max(longest, n);
  }
  for (const auto& layer : lengths)
    for (int64_t n : layer) ragged = ragged || n != longest;
  KvCache cache(bc, longest + reserve, model.device, model.dtype);
  {
    const auto o = at::TensorOptions().device(model.device).dtype(model.dtype);
    const at::Tensor k = at::randn({bc.n_head_kv, longest, D}, o), v = at::randn({bc.n_head_kv, longest, D}, o);
    const at::Tensor pos = at::arange(longest, o.dtype(at::kLong));
    for (int64_t l = 0; l < bc.n_layer; ++l) {
      cache.append(l, k, v, pos);
      if (!ragged) continue;
      std::vector<at::Tensor> kept;
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < Hkv; ++h) kept.push_back(at::arange(lengths[l][h], at::kLong));
      cache.retain(l, kept, reserve);
    }
    cache.advance_position(longest);
  }
  if (!DecodeGraph::supported(engine, cache, steps + 4))
    throw std::runtime_error("batched decode needs a CUDA build and device (DecodeGraph)");
  if (policy && !policy->prepare_graph(cache, steps + 4))
    throw std::runtime_error(policy->name() + " cannot run in a decode graph over the batch");
  DecodeGraph graph(engine, cache, policy);
  // The policy's host bookkeeping follows every replay (DecodeGraph); it reports the bytes read.
  double policy_bytes = 0;
  auto step = [&](int32_t token) {
    at::Tensor logits = graph.step(token);
    if (policy) policy_bytes += static_cast<double>(policy->after_graph_step(cache));
    return logits;
  };
  for (int i = 0; i < 3; ++i) sync(step(1));
  policy_bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) (void)step(static_cast<int32_t>(i + 2));
  sync(step(1));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double entries = 0;  // per step, mean over the timed steps
  for (const auto& layer : lengths)
    for (int64_t n : layer) entries += n + 3 + (steps + 1) / 2.0;
  BatchDecode r;
  r.tokens_per_s = batch * (steps + 1) / s;
  r.kv_bytes_per_step =
      policy ? policy_bytes / static_cast<double>(steps + 1) : 2.0 * batch * entries * D * at::elementSize(model.dtype);
  return r;
}

}  // namespace kvscope::bench
