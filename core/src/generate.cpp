#include "kvscope/core/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string_view>

#include <ATen/ATen.h>

#include "decode_oracle.h"
#include "kvscope/core/decode_graph.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/timeline_recorder.h"

namespace kvscope {
namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Sorted kept positions per [layer][KV head] from KvCache::host_positions.
std::vector<std::vector<std::vector<int64_t>>> kept_positions(
    const std::vector<std::vector<std::vector<int32_t>>>& host_positions) {
  std::vector<std::vector<std::vector<int64_t>>> out(host_positions.size());
  for (size_t l = 0; l < host_positions.size(); ++l)
    for (const auto& head : host_positions[l]) {
      std::vector<int64_t>& k = out[l].emplace_back(head.begin(), head.end());
      std::sort(k.begin(), k.end());
    }
  return out;
}

bool is_out_of_memory(const char* what) {
  const std::string_view m(what);
  for (std::string_view needle :
       {"out of memory", "not enough memory", "can't allocate memory", "Cannot allocate memory"})
    if (m.find(needle) != std::string_view::npos) return true;  // CUDA caching allocator; CPU allocators
  return false;
}

std::string first_line(const char* what) {
  const std::string_view m(what);
  return std::string(m.substr(0, m.find('\n')));
}

/// Runs one prefill or decode forward `f`; an allocator's out-of-memory error (c10 on GPU or CPU,
/// std::bad_alloc) becomes a ResourceError that says where it happened and what to try.
template <class F>
auto out_of_memory_guard(const GenerateRequest& req, std::string_view phase, int64_t step, const std::string& where,
                         F&& f) {
  std::string cause;
  try {
    if (req.fault_hook && !phase.empty()) req.fault_hook(phase, step);
    return f();
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e.what())) throw;
    cause = first_line(e.what());
  } catch (const std::bad_alloc&) {
    cause = "std::bad_alloc";
  }
  throw ResourceError("out of memory " + where +
                      ": try a smaller budget (--budget / --compression-ratio), chunked prefill (--prefill-chunk 256), "
                      "fewer --max-new-tokens or a shorter prompt (" +
                      cause + ")");
}

/// Per layer, whether a captured decode step evicts in place (Pipeline::evict_decode_device) from
/// decode step `step` on: the pipeline's S6 stage keeps the top-target of target + interval
/// (Pipeline::evicts_in_place), no timeline records the evictions layer by layer, and every global
/// layer is uniform at target + step % interval entries (the steps since the last eviction: the
/// eager path evicts after the steps with (step + 1) % interval == 0) with room for the interval.
/// Empty when any of that fails: the step then runs eagerly (Pipeline::evict_decode).
std::vector<bool> in_place_drops(const Pipeline& p, const ModelConfig& config, const KvCache& cache, int64_t n_kept,
                                 int64_t step, bool recording) {
  if (recording || !p.evicts_in_place()) return {};
  const int64_t target = p.decode_target(n_kept), interval = p.decode_interval();
  std::vector<bool> drops(static_cast<size_t>(cache.n_layer()), false);
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    if (config.window(l) > 0) continue;  // sliding layers keep their ring
    const LayerKv& kv = cache.layer(l);
    if (!kv.uniform() || kv.length.at(0) != target + step % interval || kv.capacity.at(0) < target + interval)
      return {};
    drops[static_cast<size_t>(l)] = true;
  }
  return drops;
}

}  // namespace

void add_fidelity(Fidelity& f, const at::Tensor& full, const at::Tensor& comp, int32_t token) {
  const at::Tensor lf = full.reshape(-1), lc = comp.reshape(-1);
  TORCH_CHECK(lf.numel() == lc.numel(), "add_fidelity: logits of ", lf.numel(), " and ", lc.numel(), " entries");
  TORCH_CHECK(token >= 0 && token < lc.numel(), "add_fidelity: token ", token, " outside the vocabulary of ",
              lc.numel());
  const at::Tensor lp = at::log_softmax(lf.to(at::kDouble), -1), lq = at::log_softmax(lc.to(at::kDouble), -1);
  const at::Tensor pf = at::softmax(lf.to(at::kFloat), -1), pc = at::softmax(lc.to(at::kFloat), -1);
  const at::Tensor full_top = lf.argmax(), comp_top = lc.argmax();
  const at::Tensor p_full_top = pf.index_select(0, full_top.reshape(1)).reshape({});
  // Everything into one double vector, read back with one copy.
  const at::Tensor v =
      at::stack({(lp.exp() * (lp - lq)).sum(), full_top.to(at::kDouble), comp_top.to(at::kDouble),
                 pc.select(0, token).to(at::kDouble), p_full_top.to(at::kDouble), pf.select(0, token).to(at::kDouble)})
          .to(at::kCPU)
          .contiguous();
  const double* x = v.data_ptr<double>();
  f.kl.push_back(x[0]);
  f.top1.push_back(x[1] == x[2]);
  f.token.push_back(token);
  f.full_top.push_back(static_cast<int32_t>(x[1]));
  f.p_token.push_back(x[3]);
  f.p_full_top.push_back(x[4]);
  f.p_full_token.push_back(x[5]);
}

int64_t positions_needed(const GenerateRequest& req, int64_t min_new_tokens) {
  const int64_t n_new = std::max(req.max_new_tokens, min_new_tokens);
  int64_t n = static_cast<int64_t>(req.prompt_ids.size() + req.question_ids.size()) + n_new;
  for (const auto& t : req.follow_up_turns) n += static_cast<int64_t>(t.size()) + 1 + n_new;
  return n;
}

SharedPrefill prefill_shared(const Engine& engine, std::vector<int32_t> ids, int64_t n_queries, int64_t capacity) {
  if (ids.empty()) throw InputError("the prompt is empty");
  const ModelConfig& c = engine.model().config;
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (c.window(l) > 0)
      throw InputError(engine.model().source,
                       "has sliding-window layers: their caches are rings and cannot be shared between pipelines");
  SharedPrefill s{std::move(ids), engine.new_cache(std::max<int64_t>(capacity, 1)), {}, {}};
  s.queries.resize(static_cast<size_t>(c.n_layer));
  const auto n = static_cast<int64_t>(s.ids.size());
  const int64_t keep = std::clamp<int64_t>(n_queries, 0, n);
  const LayerObserver keep_queries = [&](const LayerEvent& ev) {
    s.queries[static_cast<size_t>(ev.layer)] = ev.q.narrow(0, ev.q.size(0) - keep, keep).clone();
  };
  s.logits = engine.prefill(s.cache, s.ids, 0, false, keep_queries);
  return s;
}

GenerateResult generate(const Engine& engine, const GenerateRequest& req,
                        const std::function<void(int32_t)>& on_token) {
  if (req.prompt_ids.empty()) throw InputError("the prompt is empty (give text or use --bos always)");
  GenerateResult res;
  Sampler sampler(req.sampling);
  const int64_t capacity = positions_needed(req, 1);
  const std::string where_cache =
      "while allocating the KV cache for " + std::to_string(capacity) + " tokens on " + engine.model().device.str();
  if (req.shared) {
    if (req.shared->ids != req.prompt_ids)
      throw std::invalid_argument("generate: the shared prefill holds other tokens than the prompt");
    const int64_t need = req.pipeline ? req.pipeline->prefill_queries() : 0;
    if (need < 0 || (!req.shared->queries.empty() &&
                     req.shared->queries[0].size(0) < std::min<int64_t>(need, req.prompt_ids.size())))
      throw std::invalid_argument("generate: the pipeline reads more prefill queries than the shared prefill kept");
  }
  KvCache cache = out_of_memory_guard(
      req, "", 0, where_cache, [&] { return req.shared ? req.shared->cache.clone() : engine.new_cache(capacity); });
  std::optional<KvCache> full;
  if (req.reference_full)
    full.emplace(out_of_memory_guard(req, "", 0, where_cache, [&] { return engine.new_cache(capacity); }));
  auto is_stop = [&](int32_t id) {
    return std::find(req.stop_ids.begin(), req.stop_ids.end(), id) != req.stop_ids.end();
  };
  DecodeAttentionPolicy* decode_attention = req.pipeline ? req.pipeline->decode_attention() : nullptr;

  // Bytes each decode step's attention reads: the policy's own count per layer, else every live entry.
  int64_t step_bytes = 0;
  std::optional<TopkUnion> topk;
  if (req.capture == CaptureLevel::kFull)
    topk.emplace(engine.model().config.n_layer, engine.model().config.n_head, 256, capacity, engine.model().device);
  // The time-resolved record (timeline.h): evictions from the cache's host state, the decode
  // policy's selections per step and, at capture full, their recall of the exact top-k.
  std::optional<TimelineRecorder> recorder;
  if (req.capture != CaptureLevel::kOff) {
    TimelineOptions o;
    o.pinned = req.pinned_heads;
    o.recall = req.capture == CaptureLevel::kFull;
    if (decode_attention) {
      const ParamValues params = decode_attention->params();
      if (auto it = params.find("page"); it != params.end() && std::atoll(it->second.c_str()) > 0)
        o.page = std::atoll(it->second.c_str());
    }
    const int64_t turns = 1 + static_cast<int64_t>(req.follow_up_turns.size());
    recorder.emplace(engine.model().config.n_layer, engine.model().config.n_head_kv, capacity,
                     turns * (std::max<int64_t>(req.max_new_tokens, 0) + 1), o);
  }
  int64_t step_no = 0;  // Timeline's step: decode forward passes and later turns' prefills
  // Eviction while decoding (an S6 stage): after each layer's attention, once the step's telemetry
  // saw the cache the attention read; the timeline records the evicted entries at this step.
  const bool evicting = req.pipeline && req.pipeline->evicts_during_decode();
  int64_t decode_n_kept = 0;  // the run's budget per KV head, the eviction's default target
  const LayerObserver count_bytes = [&](const LayerEvent& ev) {
    // A sliding-window layer attends densely over its ring (no decode-time selection there).
    const bool dense = ev.config.window(ev.layer) > 0;
    if (decode_attention && dense) {
      const LayerKv& kv = ev.cache.layer(ev.layer);
      for (int64_t n : kv.length) step_bytes += 2 * n * kv.k.size(1) * kv.k.element_size();
    } else if (decode_attention) {
      step_bytes += decode_attention->bytes_read_last();
    }
    if (topk) topk->add(ev.layer, ev.q[0], ev.cache);
    if (recorder) {
      recorder->after_layer(ev.cache, ev.layer, ev.cache.next_position());
      if (decode_attention && !dense) {
        const auto rows = decode_attention->last_selection();
        if (!rows.empty()) recorder->on_selection(ev.cache, ev.layer, rows, ev.q[0]);
      }
    }
    if (req.decode_probe) req.decode_probe(ev, step_no);
    if (evicting) {
      req.pipeline->evict_decode(ev, res.decode_steps, decode_n_kept);
      if (recorder) recorder->after_decode_eviction(ev.cache, ev.layer);
    }
  };
  double reference_ms = 0;
  at::Tensor full_logits;
  // Live snapshots (GenerateRequest::on_progress).
  auto last_progress = std::chrono::steady_clock::now();
  auto decode_start = last_progress;
  double progress_gap_ms = req.progress_interval_ms;  // grows so snapshots take at most ~5% of the time
  auto progress = [&](bool force) {
    if (!req.on_progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && std::chrono::duration<double, std::milli>(now - last_progress).count() < progress_gap_ms) return;
    last_progress = now;
    GenerateProgress p;
    p.decode_steps = res.decode_steps;
    const double ms = std::chrono::duration<double, std::milli>(now - decode_start).count() - reference_ms;
    p.decode_tokens_per_s = ms > 0 ? res.decode_steps * 1000.0 / ms : 0.0;
    p.cache_bytes_live = cache.bytes_live();
    p.decode_graph = res.decode_graph;
    p.kl = res.fidelity.kl;
    if (recorder) p.timeline = std::make_shared<const Timeline>(recorder->snapshot(cache.next_position()));
    req.on_progress(p);
    progress_gap_ms = std::max(req.progress_interval_ms, 20.0 * ms_since(now));
  };
  // Fidelity of the token `chosen` from `comp_logits` (Fidelity: entry i belongs to token i).
  auto step_reference = [&](const at::Tensor& comp_logits, int32_t chosen) {
    if (!full) return;
    const auto r0 = std::chrono::steady_clock::now();
    add_fidelity(res.fidelity, full_logits, comp_logits, chosen);
    reference_ms += ms_since(r0);
  };

  std::vector<int32_t> block = req.prompt_ids;
  for (size_t turn = 0; turn <= req.follow_up_turns.size(); ++turn) {
    // Where this turn's block starts (a shared prefill's cache already holds the prompt).
    const int64_t first_position = turn == 0 && req.shared ? 0 : cache.next_position();
    // Prefill this turn's block (the prompt; later: the previous turn's last token + the new turn),
    // compressing each layer after its attention (RocketKV-MT and evicting methods reselect per turn).
    LayerObserver compress;
    if (turn == 0 && req.capture != CaptureLevel::kOff) res.captures.resize(engine.model().config.n_layer);
    if (req.pipeline) {
      const int64_t n_history = first_position + static_cast<int64_t>(block.size());
      const int64_t n_kept =
          req.pipeline->begin_run(RunBudget{req.budget, n_history, req.max_new_tokens}, engine.model().config);
      decode_n_kept = n_kept;
      // Room for what follows the compressed block without compression: the question, then decoding.
      const auto n_question = static_cast<int64_t>(turn == 0 ? req.question_ids.size() : 0);
      const int64_t reserve = std::max(req.max_new_tokens + n_question, req.pipeline->prefill_block());
      // Capture full records the scores the budget stage ranked, by prompt position.
      const bool record_scores = turn == 0 && req.capture == CaptureLevel::kFull;
      const auto n_prompt = static_cast<int64_t>(block.size());
      compress = [&, n_kept, reserve, record_scores, n_prompt](const LayerEvent& ev) {
        const bool uniform = ev.cache.layer(ev.layer).uniform();
        const at::Tensor positions = record_scores && uniform ? ev.cache.positions(ev.layer).clone() : at::Tensor();
        const at::Tensor scores = req.pipeline->compress_layer(ev, n_kept, reserve);
        if (scores.defined() && positions.defined())
          record_policy_scores(res.captures[ev.layer], scores, positions, n_prompt);
      };
    }
    if (turn > 0) {
      ++step_no;
      if (recorder) recorder->begin_step();
      if (req.on_turn) req.on_turn(static_cast<int64_t>(turn));
    }
    if (!res.captures.empty() && turn == 0)  // capture sees the layer before compression
      compress = [&, then = compress](const LayerEvent& ev) {
        if (ev.cache.layer(ev.layer).uniform()) {
          const LayerPrefill in{ev.config, ev.layer, ev.q, ev.cache.keys(ev.layer), ev.cache.values(ev.layer)};
          at::Tensor scores = std::move(res.captures[ev.layer].policy_score);  // earlier blocks' scores
          res.captures[ev.layer] = capture_layer(in, req.capture_window, req.capture);
          res.captures[ev.layer].policy_score = std::move(scores);
        }
        if (then) then(ev);
      };
    // Block-wise prefill with a hard cap when the scorer asks for it (KeyDiff), else as requested.
    const int64_t chunk =
        req.pipeline && req.pipeline->prefill_block() > 0 ? req.pipeline->prefill_block() : req.prefill_chunk;
    auto t0 = std::chrono::steady_clock::now();
    const std::string device = engine.model().device.str();
    at::Tensor logits;
    if (turn == 0 && req.shared) {
      // Prefill once, compress many: the prompt's full cache is a copy; each layer is compressed as
      // its own prefill would have compressed it, with the queries the shared prefill kept.
      if (compress)
        for (int64_t l = 0; l < engine.model().config.n_layer; ++l)
          compress(LayerEvent{engine.model().config, l, req.shared->queries[static_cast<size_t>(l)], cache});
      logits = req.shared->logits;
    } else {
      logits = out_of_memory_guard(req, "prefill", int64_t(turn),
                                   "during the prefill of " + std::to_string(block.size()) + " tokens on " + device,
                                   [&] { return engine.prefill(cache, block, chunk, false, compress); });
    }
    if (turn == 0 && !req.question_ids.empty()) {
      // Question-agnostic: the question joins the compressed context uncompressed, at its true positions.
      logits = out_of_memory_guard(
          req, "prefill", 0,
          "during the prefill of the " + std::to_string(req.question_ids.size()) + "-token question on " + device,
          [&] { return engine.prefill(cache, req.question_ids, req.prefill_chunk); });
      block.insert(block.end(), req.question_ids.begin(), req.question_ids.end());
    }
    const at::Tensor block_logits = logits.to(at::kCPU);  // also synchronises the device before the clock stops
    if (turn == 0) captures_to_host(res.captures);
    // Every head's live positions, read once: the kept sets and the timeline both come from them.
    std::vector<std::vector<std::vector<int32_t>>> live_positions;
    if (recorder || turn == 0) live_positions = cache.host_positions();
    if (recorder) recorder->after_prefill(live_positions, first_position, static_cast<int64_t>(block.size()));
    if (turn == 0) {
      res.last_logits = block_logits;
      res.prefill_ms = ms_since(t0);
      res.kept = kept_positions(live_positions);
      res.cache_bytes_live = cache.bytes_live();
      res.cache_bytes_allocated = cache.bytes_allocated();
      if (decode_attention) res.side_store_bytes = decode_attention->side_store_bytes();
    }
    if (turn == 0) progress(true);
    if (req.max_new_tokens <= 0) break;
    if (full)
      full_logits = out_of_memory_guard(
          req, "prefill", int64_t(turn),
          "during the full-cache reference prefill of " + std::to_string(block.size()) + " tokens on " + device,
          [&] { return engine.prefill(*full, block, req.prefill_chunk); });

    std::vector<int32_t>& out = res.turn_output_ids.emplace_back();
    // Without per-layer telemetry, each step replays one CUDA graph of the whole decode step
    // (DecodeGraph), captured here for this turn's cache, when the decode policy (if any) can run
    // in one (HSA, Quest).
    // A replayed graph records no selection (DecodeAttentionPolicy::last_selection), so the
    // decode-time selection policies (stage S5) step eagerly while capture wants their recall.
    std::unique_ptr<DecodeGraph> graph;
    const bool selects = decode_attention && decode_attention->stage() == Stage::kDecodeSelection;
    // A replay cannot record per layer: the oracle's hook or a policy's staged selections stand in.
    std::unique_ptr<DecodeOracle> oracle;
    bool device_drops = false;  // H2O's totals live on the device (begin_decode_device)
    // Eviction while decoding keeps the graph where each eviction keeps the top-target of target +
    // interval in place (uniform head budget, every global layer at its phase, no timeline to record
    // the evictions per layer); else it re-packs the cache and the step runs eagerly. An eager
    // eviction re-packs at the target (a question past the budget, a prompt under it at first), so
    // the graph is tried again after each eager step (`graph_later`).
    auto capture_graph = [&] {
      const std::vector<bool> drops = evicting ? in_place_drops(*req.pipeline, engine.model().config, cache,
                                                                decode_n_kept, res.decode_steps, recorder.has_value())
                                               : std::vector<bool>{};
      const int64_t interval = drops.empty() ? 1 : req.pipeline->decode_interval();
      const bool can_graph = !req.decode_probe && (!evicting || !drops.empty()) &&
                             DecodeGraph::supported(engine, cache, req.max_new_tokens, drops, interval) &&
                             (!decode_attention || decode_attention->prepare_graph(cache, req.max_new_tokens));
      // A timeline of a selection policy keeps the graph when the policy records its selections in
      // it (graph_selections). Capture full keeps it too when the exact top-k oracle runs inside the
      // step (DecodeOracle: the union record and the selection's recall from kernels); else eager.
      if (topk && can_graph && (!selects || decode_attention->stages_graph_selections()) &&
          DecodeOracle::supported(cache, engine.model().config.n_head))
        oracle =
            std::make_unique<DecodeOracle>(cache, engine.model().config.n_head, *topk,
                                           selects ? decode_attention : nullptr, recorder && recorder->any_per_token());
      const bool eager_selection = selects && recorder && (req.capture == CaptureLevel::kFull) && !oracle;
      const bool telemetry = (topk && !oracle) || eager_selection;
      DeviceLayerHook hook;
      if (oracle)
        hook = [&cache, o = oracle.get()](int64_t layer, const at::Tensor& q, const at::Tensor& offset,
                                          const at::Tensor& length) { o->add(layer, q, cache, offset, length); };
      if (!drops.empty())
        hook = [&cache, &req, config = &engine.model().config, target = req.pipeline->decode_target(decode_n_kept)](
                   int64_t layer, const at::Tensor& q, const at::Tensor&, const at::Tensor& length) {
          req.pipeline->evict_decode_device(*config, layer, q, cache, target, length);
        };
      // H2O's running totals move into device buffers the captured steps update
      // (begin_decode_device); where they cannot, the steps run eagerly on the totals as they are.
      device_drops =
          !drops.empty() && !telemetry && can_graph &&
          req.pipeline->begin_decode_device(engine.model().config, req.pipeline->decode_target(decode_n_kept));
      if (!telemetry && can_graph && (drops.empty() || device_drops))
        graph = std::make_unique<DecodeGraph>(engine, cache, decode_attention, hook, drops, interval,
                                              drops.empty() ? 0 : res.decode_steps % interval);
      if (graph && selects && recorder && !decode_attention->stages_graph_selections()) graph.reset();
    };
    capture_graph();
    const bool graph_later =
        !graph && evicting && !recorder && !topk && !req.decode_probe && req.pipeline->evicts_in_place();
    bool staged = false;  // a replayed step's selections wait in pinned memory (recorded after the next launch)
    // The previous replay's selections (and, with the oracle, their recall) into the timeline.
    auto record_staged = [&] {
      recorder->on_selections(cache, decode_attention->staged_graph_selections());
      if (!oracle || !oracle->measures_recall()) return;
      const std::vector<float> recall = oracle->staged_recall();
      if (auto mean = recorder->on_recall(recall)) res.selection_recall.push_back(*mean);
      // The exact top-k of the per-token heads (where the step measured one), in head order.
      const int64_t L = cache.n_layer(), H = cache.n_head_kv();
      for (int64_t l = 0; l < L; ++l)
        for (int64_t h = 0; h < H; ++h)
          if (recorder->per_token(l, h) && std::isfinite(recall[static_cast<size_t>(l * H + h)]))
            recorder->on_exact(cache, l, h, oracle->staged_exact_rows(l, h));
    };
    res.decode_graph = res.decode_graph || graph != nullptr;
    int32_t next = sampler.next(block_logits);
    t0 = std::chrono::steady_clock::now();
    if (turn == 0) decode_start = t0;
    step_reference(logits, next);
    while (!is_stop(next)) {
      out.push_back(next);
      if (on_token) on_token(next);
      if (static_cast<int64_t>(out.size()) >= req.max_new_tokens) break;
      const int32_t tok[1] = {next};
      step_bytes = 0;
      const int64_t step = res.decode_steps;
      ++step_no;
      if (recorder && !graph) recorder->begin_step();
      logits =
          out_of_memory_guard(req, "decode", step, "at decode step " + std::to_string(step) + " on " + device, [&] {
            if (graph) {
              at::Tensor lg = graph->step(next);
              if (decode_attention) step_bytes = decode_attention->after_graph_step(cache);
              if (recorder) {  // the previous step's selections, recorded while this one runs
                if (staged) record_staged();
                staged = false;
                recorder->begin_step();
              }
              return lg;
            }
            const bool observe = decode_attention || topk || req.decode_probe || evicting;
            return engine.forward(cache, tok, false, observe ? count_bytes : LayerObserver{}, decode_attention);
          });
      res.bytes_read.push_back(decode_attention ? step_bytes : cache.bytes_live());
      if (recorder) {
        recorder->after_decode(cache, cache.next_position() - 1);
        if (graph && selects) {
          decode_attention->stage_graph_selections();
          if (oracle) oracle->stage();
          staged = true;
        }
        if (auto recall = recorder->step_recall_mean()) res.selection_recall.push_back(*recall);
      }
      ++res.decode_steps;
      next = sampler.next(logits);  // reads the result back: the step is complete
      if (graph_later && !graph) {
        capture_graph();
        res.decode_graph = res.decode_graph || graph != nullptr;
      }
      progress(false);
      if (full) {
        const auto r0 = std::chrono::steady_clock::now();
        full_logits = out_of_memory_guard(
            req, "decode", step, "at decode step " + std::to_string(step) + " of the full-cache reference on " + device,
            [&] { return engine.forward(*full, tok); });
        reference_ms += ms_since(r0);
        step_reference(logits, next);
      }
    }
    if (staged) record_staged();  // synchronised above
    if (device_drops) req.pipeline->end_decode_device();
    res.decode_ms += ms_since(t0);
    if (turn < req.follow_up_turns.size()) {
      block.assign(1, next);  // the last chosen token has not been run yet
      block.insert(block.end(), req.follow_up_turns[turn].begin(), req.follow_up_turns[turn].end());
    }
  }
  res.decode_ms -= reference_ms;
  if (topk) res.topk_unique = topk->unique_counts();
  progress(true);
  if (recorder) res.timeline = recorder->finish(cache.next_position());
  if (!res.turn_output_ids.empty()) res.output_ids = res.turn_output_ids.front();
  return res;
}

std::vector<int32_t> prompt_ids(const Model& model, const std::string& text, BosMode bos) {
  if (!model.tokenizer) throw InputError(model.source, "this model has no tokenizer");
  std::vector<int32_t> ids;
  const bool add = bos == BosMode::kAlways || (bos == BosMode::kAuto && model.add_bos);
  if (add) {
    if (model.config.bos_token_id < 0)
      throw InputError(model.source, "--bos always: the model defines no bos_token_id");
    ids.push_back(model.config.bos_token_id);
  }
  const auto body = model.tokenizer->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  if (ids.empty()) throw InputError("the prompt is empty (give text or use --bos always)");
  return ids;
}

std::string decode_continuation(const Tokenizer& tok, const std::vector<int32_t>& context_ids,
                                const std::vector<int32_t>& new_ids) {
  constexpr size_t kContext = 16;  // enough for any piece's rendering to depend only on its neighbours
  const std::vector<int32_t> context(context_ids.end() - std::min(context_ids.size(), kContext), context_ids.end());
  std::vector<int32_t> all = context;
  all.insert(all.end(), new_ids.begin(), new_ids.end());
  const std::string whole = tok.decode(all), prefix = tok.decode(context);
  if (whole.compare(0, prefix.size(), prefix) == 0) return whole.substr(prefix.size());
  return tok.decode(new_ids);
}

}  // namespace kvscope
