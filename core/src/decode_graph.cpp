// DecodeGraph (see decode_graph.h). The step reads only device state (token, position, per-layer
// offsets and lengths), which the step itself advances on the device; the host mirrors the same
// bookkeeping (KvCache::commit_append, advance_position) after each replay. The attention plan is
// sized for each layer's capacity, so a graph captured at one length serves every later one.
#include "kvscope/core/decode_graph.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "ops/cuda_ops.h"

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace kvscope {

bool DecodeGraph::supported(const Engine& engine, const KvCache& cache, int64_t steps, const std::vector<bool>& drops,
                            int64_t interval) {
#ifdef KVSCOPE_HAVE_CUDA_KERNELS
  const Model& m = engine.model();
  if (!m.device.is_cuda()) return false;
  if (!m.config.unfused_features().empty()) return false;         // what the fused kernels cannot take (engine.cpp)
  if (cache.n_head_kv() % m.config.n_head_kv != 0) return false;  // B x n_head_kv heads: a batch of B
  // One captured table serves every step only within one RoPE regime (longrope, dynamic NTK).
  if (!engine.rope_fixed_over(cache.next_position() + 1, cache.next_position() + steps)) return false;
  if (!drops.empty() && static_cast<int64_t>(drops.size()) != cache.n_layer()) return false;
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    const LayerKv& L = cache.layer(l);
    const bool drop = !drops.empty() && drops[l];
    if (drop && (L.window > 0 || !L.uniform())) return false;
    for (size_t h = 0; h < L.length.size(); ++h) {
      if (!L.ring_window.empty() && L.ring_window[h] > 0) return false;
      if (L.window > 0) {  // a sliding-window layer decodes as its ring, which stays within the window
        if (!L.ringed || std::min(L.length[h] + steps, L.window) > L.capacity[h]) return false;
      } else if (L.length[h] + (drop ? interval : steps) > L.capacity[h]) {
        return false;
      }
    }
  }
  return true;
#else
  return false;
#endif
}

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

struct DecodeGraph::Impl {
  const Engine& engine;
  KvCache& cache;
  DecodeAttentionPolicy* policy;
  std::vector<bool> drops;          // per layer, or empty (see supported())
  int64_t interval = 1, phase = 0;  // the hooked graph runs when phase + 1 reaches interval
  DeviceDecodeState state;
  at::Tensor logits;  // fp32 [vocab], the graph's output
  at::cuda::CUDAGraph graph;
  // interval > 1: the step without the hook, and its output.
  std::optional<at::cuda::CUDAGraph> plain;
  at::Tensor plain_logits;
  // The after_attention hook's work runs on a side stream, forked from the step after each layer's
  // attention and joined at the step's end: off the critical path of the layers that follow.
  std::optional<c10::cuda::CUDAStream> side;
  std::vector<cudaEvent_t> events;  // one fork per layer, then the join; created before capture
  size_t next_event = 0;

  ~Impl() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  cudaEvent_t event() {
    if (next_event >= events.size()) throw std::runtime_error("DecodeGraph: more hook calls than layers");
    return events[next_event++];
  }

  Impl(const Engine& e, KvCache& c, DecodeAttentionPolicy* p, std::vector<bool> d, int64_t every, int64_t since)
      : engine(e), cache(c), policy(p), drops(std::move(d)), interval(every), phase(since) {}

  /// Device state from the cache's host bookkeeping, copied into the tensors the graph reads.
  void load_state() {
    const c10::Device dev = engine.model().device;
    for (int64_t l = 0; l < cache.n_layer(); ++l) {
      const LayerKv& L = cache.layer(l);
      std::vector<int64_t> m(L.offset);
      m.insert(m.end(), L.length.begin(), L.length.end());
      m.insert(m.end(), L.length.size(), 0);  // the append tickets (ops::qkv_rope_append)
      if (L.has_compact()) {                  // rows 3, 4: the key and value rows' bases
        for (const auto& bases : {L.key_bases(), L.value_bases()}) m.insert(m.end(), bases.begin(), bases.end());
      }
      const at::Tensor up = ops::upload_int64(m, dev).view({L.has_compact() ? 5 : 3, cache.n_head_kv()});
      if (static_cast<int64_t>(state.meta.size()) <= l) state.meta.push_back(at::empty_like(up));
      state.meta[l].copy_(up);
    }
    state.position.fill_(cache.next_position());
  }
};

DecodeGraph::DecodeGraph(const Engine& engine, KvCache& cache, DecodeAttentionPolicy* decode_attention,
                         DeviceLayerHook after_attention, std::vector<bool> drops, int64_t interval, int64_t phase) {
  const Model& m = engine.model();
  if (interval < 1 || phase < 0 || phase >= interval)
    throw std::invalid_argument("DecodeGraph: phase " + std::to_string(phase) + " outside interval " +
                                std::to_string(interval));
  if (interval > 1 && (decode_attention || !after_attention))
    throw std::invalid_argument("DecodeGraph: an eviction interval needs the hook and no decode-attention policy");
  if (!supported(engine, cache, 1, drops, interval))
    throw std::runtime_error("DecodeGraph: this model/cache cannot run as a CUDA graph");
  impl_ = std::make_unique<Impl>(engine, cache, decode_attention, std::move(drops), interval, phase);
  Impl& s = *impl_;
  const c10::cuda::CUDAGuard guard(m.device);
  const auto i64 = at::TensorOptions().device(m.device).dtype(at::kLong);
  s.state.token = at::zeros({cache.n_head_kv() / m.config.n_head_kv}, i64);  // B sequences (see DeviceDecodeState)
  s.state.position = at::zeros({1}, i64);
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    int64_t max_len = 0, total = 0;
    for (int64_t c : cache.layer(l).capacity) {
      max_len = std::max(max_len, c);
      total += c;
    }
    s.state.max_len.push_back(max_len);
    s.state.total_len.push_back(total);
  }
  // Capture on a side stream (required); warm up there first (cuBLAS handles and workspaces,
  // kernel attributes), then put the device state back: the warm-up's append sits past the live
  // lengths and is overwritten by the first real step. The side stream must not start before the
  // caller's stream has run what it queued: the cache and side stores just built, and the zeroed
  // token and position above (a batched cache's eviction and page summaries can queue
  // milliseconds of work; the warm-up then read an unwritten token and failed the embedding's
  // index check).
  c10::cuda::getCurrentCUDAStream(m.device.index()).synchronize();
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  stream.synchronize();
  {
    const c10::cuda::CUDAStreamGuard sg(stream);
    s.load_state();
    (void)engine.decode_step_device(cache, s.state, s.policy);
    s.load_state();
    stream.synchronize();
    if (interval > 1) {  // the steps between evictions: no hook
      s.plain.emplace();
      s.plain->capture_begin();
      s.plain_logits = engine.decode_step_device(cache, s.state, s.policy);
      s.plain->capture_end();
      s.load_state();
      stream.synchronize();
    }
    if (after_attention) {  // not in the warm-up: it would record a step
      // Forked per layer (its queries, offsets and lengths are ready once the attention ran), joined
      // at the end: a layer's eviction (Pipeline::evict_decode_device) only has to be done before
      // that layer's next step, so its ~20 small launches overlap the later layers' projections.
      s.side = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, m.device.index());
      s.events.assign(static_cast<size_t>(cache.n_layer()) + 1, nullptr);
      for (cudaEvent_t& e : s.events)
        if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
          throw std::runtime_error("DecodeGraph: cannot create a CUDA event");
      s.state.after_attention = [&s, hook = std::move(after_attention)](int64_t layer, const at::Tensor& q,
                                                                        const at::Tensor& offset,
                                                                        const at::Tensor& length) {
        const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
        const cudaEvent_t fork = s.event();
        C10_CUDA_CHECK(cudaEventRecord(fork, main.stream()));
        C10_CUDA_CHECK(cudaStreamWaitEvent(s.side->stream(), fork, 0));
        const c10::cuda::CUDAStreamGuard on_side(*s.side);
        hook(layer, q, offset, length);
        // q is the step's own tensor: its memory is not reused while the side stream reads it.
        c10::cuda::CUDACachingAllocator::recordStream(q.storage().data_ptr(), *s.side);
      };
    }
    s.graph.capture_begin();
    s.logits = engine.decode_step_device(cache, s.state, s.policy);
    if (s.side) {  // join: the step ends when every layer's hook work has
      const cudaEvent_t join = s.event();
      C10_CUDA_CHECK(cudaEventRecord(join, s.side->stream()));
      C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), join, 0));
    }
    s.graph.capture_end();
    s.load_state();  // capture records without running, but keep it obviously clean
    stream.synchronize();
  }
}

DecodeGraph::~DecodeGraph() = default;

at::Tensor DecodeGraph::step(int32_t token) {
  Impl& s = *impl_;
  const ModelConfig& c = s.engine.model().config;
  if (token < 0 || token >= c.vocab_size)
    throw InputError("token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                     std::to_string(c.vocab_size) + ")");
  const c10::cuda::CUDAGuard guard(s.engine.model().device);
  s.state.token.fill_(static_cast<int64_t>(token));  // a fill kernel: no host buffer to race with
  const bool evicts = !s.plain || s.phase + 1 == s.interval;
  (evicts ? s.graph : *s.plain).replay();
  s.phase = evicts ? 0 : s.phase + 1;
  for (int64_t l = 0; l < s.cache.n_layer(); ++l) {
    s.cache.commit_append(l, 1);
    if (evicts && !s.drops.empty() && s.drops[l]) s.cache.commit_drop(l, s.interval);
  }
  s.cache.advance_position(1);
  return evicts ? s.logits : s.plain_logits;
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

struct DecodeGraph::Impl {};

DecodeGraph::DecodeGraph(const Engine&, KvCache&, DecodeAttentionPolicy*, DeviceLayerHook, std::vector<bool>, int64_t,
                         int64_t) {
  throw std::runtime_error("DecodeGraph: kvscope was built without the CUDA kernels (KVSCOPE_WITH_CUDA=OFF)");
}
DecodeGraph::~DecodeGraph() = default;
at::Tensor DecodeGraph::step(int32_t) { throw std::runtime_error("DecodeGraph: built without the CUDA kernels"); }

#endif

}  // namespace kvscope
