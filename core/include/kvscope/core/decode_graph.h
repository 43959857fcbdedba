#pragma once
// DecodeGraph: the whole decode step (every layer, final norm, LM head) captured once as a CUDA
// graph and replayed per token, so the ~10 launches per layer cost one graph launch. For the
// eager-fused path's work (Engine::decode_step_device) over a cache whose buffers stay put:
// no per-layer observer (capture off), and either no decode-attention policy or one whose
// prepare_graph accepts (HSA, Quest); the caller runs its after_graph_step after each step. A cache
// of B x n_head_kv heads decodes B sequences at once (dense attention; each step feeds its token to
// every sequence and returns [B, vocab] logits): the batch of bench_engine --batch.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/kv_cache.h"

namespace kvscope {

class DecodeGraph {
 public:
  /// True when a graph can run `steps` decode steps of `engine` over `cache`: a CUDA build with
  /// the kernels, the model on a CUDA device, no ring-buffer (streaming) heads, head_dim 64 or 128,
  /// and room in every head for `steps` more entries (no growth, so buffers do not move).
  /// `drops`: per layer, whether the after_attention hook evicts `interval` entries per KV head
  /// every `interval` steps (eviction while decoding at its cap, Pipeline::evict_decode_device);
  /// such a layer's lengths stay within `interval` of where they were, so it needs room for
  /// `interval` more entries only. Empty: none.
  static bool supported(const Engine& engine, const KvCache& cache, int64_t steps, const std::vector<bool>& drops = {},
                        int64_t interval = 1);

  /// Captures one step at the cache's current lengths and position (one warm-up step runs first
  /// and is undone). The cache (and policy) must outlive the graph and the cache get no other
  /// appends while it is used. `decode_attention`: optional, already prepare_graph()ed.
  /// `after_attention`: optional, captured into the step after each layer's attention (engine.h), on
  /// a side stream forked there and joined at the step's end, so its work overlaps the later layers:
  /// it must touch only its own layer's cache rows and lengths and its own buffers.
  /// Throws std::runtime_error when not supported() or when capture fails.
  /// `drops`: as in supported(); a step that evicts commits it to the host (KvCache::commit_drop).
  /// `interval` > 1 (with drops, no decode_attention): the hook runs at every interval-th step only,
  /// the first after `interval - phase` steps (phase: the steps taken since the last eviction); two
  /// graphs are captured, the step with the hook and the step without.
  DecodeGraph(const Engine& engine, KvCache& cache, DecodeAttentionPolicy* decode_attention = nullptr,
              DeviceLayerHook after_attention = {}, std::vector<bool> drops = {}, int64_t interval = 1,
              int64_t phase = 0);
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;

  /// Runs `token` at cache.next_position(): appends its K/V to every layer (and, at an eviction
  /// step, drops `interval` entries per head of the dropping layers) and commits that to the
  /// cache's host lengths and position. Returns fp32 logits
  /// [vocab], a view of a buffer the next step overwrites (copy to keep). Throws InputError on a token outside the
  /// vocabulary.
  at::Tensor step(int32_t token);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope
