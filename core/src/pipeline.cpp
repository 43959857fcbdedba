#include "kvscope/core/pipeline.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "kvscope/core/errors.h"
#include "stacked_decode.h"

namespace kvscope {
Pipeline::Pipeline(const PolicyRegistry& registry, std::string_view spec) {
  const std::vector<ResolvedStage> resolved = resolve_pipeline(registry.catalog(), spec);
  uses_budget_ = pipeline_uses_budget(resolved);
  for (const ResolvedStage& s : resolved) {
    auto policy = registry.make(s);
    // resolve_pipeline allows at most one stage of each kind below.
    if (auto* hp = dynamic_cast<const HeadPatternPolicy*>(policy.get()))
      heads_ = hp;
    else if (auto* sc = dynamic_cast<const ScoringPolicy*>(policy.get()))
      scorer_ = sc;
    else if (auto* lb = dynamic_cast<const LayerBudgetPolicy*>(policy.get()))
      layer_budget_ = lb;
    else if (auto* b = dynamic_cast<const BudgetPolicy*>(policy.get()))
      budget_ = b;
    else if (auto* d = dynamic_cast<DecodeAttentionPolicy*>(policy.get()))
      decode_ = decode_ ? (stacked_ = std::make_unique<StackedDecode>(*decode_, *d)).get() : d;  // S4 under S5/S7
    else if (auto* e = dynamic_cast<const DecodeEvictionPolicy*>(policy.get()))
      decode_eviction_ = e;
    stages_.push_back(std::move(policy));
  }
  if (scorer_ && !budget_)
    throw InputError("pipeline '" + std::string(spec) + "': no budget allocation policy is registered");
  // A decode step has one query: scorers that rank by more (SnapKV's window) are not defined there,
  // unless they accumulate every step's attention into running totals (H2O, norm=sum).
  if (decode_eviction_ && scorer_->prefill_queries() != 0 && scorer_->prefill_queries() != 1 && !scorer_->accumulates())
    throw InputError("pipeline '" + std::string(spec) +
                     "': eviction while decoding needs a scorer that ranks with at most the step's query (tova, "
                     "keydiff, knorm, streamingllm, random) or accumulates every step's attention (h2o with "
                     "norm=sum and gqa=mean|sum); '" +
                     scorer_->name() + "' ranks with " +
                     (scorer_->prefill_queries() < 0
                          ? std::string("every query so far")
                          : "its last " + std::to_string(scorer_->prefill_queries()) + " queries"));
  if (accumulating() && layer_budget_)
    throw InputError("pipeline '" + std::string(spec) + "': h2o's eviction while decoding with a layer budget ('" +
                     layer_budget_->name() +
                     "') is not supported: its running totals are ranked against the run's budget in every layer");
}

std::string Pipeline::canonical() const {
  std::string out;
  for (const auto& p : stages_) {
    out += (out.empty() ? "" : "+") + p->name();
    std::string kv;
    for (const auto& [k, v] : p->params()) kv += (kv.empty() ? ":" : ",") + k + "=" + v;
    out += kv;
  }
  return out;
}

int64_t Pipeline::begin_run(const RunBudget& budget, const ModelConfig& config) const {
  budget.spec.validate();
  attention_sums_.clear();
  device_sums_.clear();
  if (heads_) heads_->check(config);
  if (decode_) {
    decode_->configure(budget, config);
    if (auto p = decode_->eviction_budget(budget)) return std::clamp<int64_t>(*p, 0, budget.n_prompt);
  }
  return budget.spec.kept_per_head(budget.n_prompt);
}

void Pipeline::apply_head_pattern(const LayerEvent& ev, int64_t reserve) const {
  KvCache& cache = ev.cache;
  const int64_t n_tok = cache.layer(ev.layer).length[0];
  const auto dev = cache.layer(ev.layer).k.device();
  std::vector<at::Tensor> kept;
  std::vector<int64_t> reserves;
  std::vector<HeadPlan> plans;
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
    const HeadPlan p = heads_->plan(ev.layer, h);
    plans.push_back(p);
    const auto opts = at::TensorOptions().device(dev).dtype(at::kLong);
    if (!p.streaming || n_tok <= p.sink + p.window) {
      kept.push_back(at::arange(n_tok, opts));
      reserves.push_back(p.streaming ? p.sink + p.window - n_tok : reserve);
    } else {
      kept.push_back(at::cat({at::arange(p.sink, opts), at::arange(n_tok - p.window, n_tok, opts)}));
      reserves.push_back(0);
    }
  }
  cache.retain(ev.layer, kept, reserves);
  for (int64_t h = 0; h < cache.n_head_kv(); ++h)
    if (plans[h].streaming) cache.set_window(ev.layer, h, plans[h].sink, plans[h].window);
}

int64_t Pipeline::prefill_queries() const {
  if (prefill_block() > 0) return -1;
  int64_t most = 0;
  for (const auto& s : stages_) {
    const int64_t n = s->prefill_queries();
    if (n < 0) return -1;
    most = std::max(most, n);
  }
  return most;
}

at::Tensor Pipeline::compress_layer(const LayerEvent& ev, int64_t n_kept, int64_t reserve) const {
  KvCache& cache = ev.cache;
  // Sliding-window layers keep their window and are never compressed (as kvpress does for Gemma 3:
  // only global layers are); they also attend densely over it at decode, so a decode-time stage
  // never sees them (Engine, generate).
  if (ev.config.window(ev.layer) > 0) return {};
  if (!cache.layer(ev.layer).uniform()) return compress_ragged(ev, n_kept, reserve);
  const int64_t n_tok = cache.layer(ev.layer).length[0];
  const LayerPrefill in{ev.config, ev.layer, ev.q, cache.keys(ev.layer), cache.values(ev.layer)};
  if (heads_) apply_head_pattern(ev, reserve);
  at::Tensor scores;
  if (accumulating()) {  // H2O decoding next: the totals follow the kept rows
    const at::Tensor sums = accumulate(ev.layer, in);
    if (n_kept < n_tok) scores = retain_accumulated(ev, sums, in, n_kept, reserve);
  } else if (scorer_ && n_kept < n_tok) {
    scores = rank(in, n_kept);
    const int64_t layer_kept = layer_budget_ ? layer_budget_->layer_kept(scores, n_kept, in) : n_kept;
    cache.retain(ev.layer, budget_->select(scores, layer_kept, in), reserve);
  }
  if (decode_) decode_->on_prefill(ev.layer, in, cache);
  return scores;
}

at::Tensor Pipeline::compress_ragged(const LayerEvent& ev, int64_t n_kept, int64_t reserve) const {
  KvCache& cache = ev.cache;
  const LayerKv& kv = cache.layer(ev.layer);
  if (kv.has_ring())
    throw InputError(
        "pipeline: a later turn after streaming heads is not supported: a ring buffer holds its last "
        "tokens in place, so the new turn's block cannot attend causally within it; use a pattern-free "
        "method or rocketkv-mt");
  if (accumulating()) throw InputError("pipeline: h2o's running totals need equal lengths per KV head on a later turn");
  if (scorer_ && !scorer_->per_head())
    throw InputError("pipeline: '" + scorer_->name() +
                     "' scores a token for the whole layer (every query head), which heads of different lengths "
                     "do not share: a later turn after a head-wise budget needs a per-head score (tova: gqa=mean)");
  const int64_t Hkv = cache.n_head_kv(), D = cache.head_dim(), H = ev.q.size(1), G = H / Hkv;
  int64_t n_max = 0;
  for (int64_t n : kv.length) n_max = std::max(n_max, n);
  const auto dev = kv.k.device();
  // Each KV head is ranked on its own entries with its group's queries (a scorer's score of one
  // head does not depend on the others), then the heads' scores share one [Hkv, n_max] table,
  // padded with -inf, for the budget stages; picks in the padding are dropped.
  // What the budget and decode stages read of the layer: every head's entries, zero-padded.
  at::Tensor keys = at::zeros({Hkv, n_max, D}, kv.k.options()), values = at::zeros_like(keys);
  at::Tensor scores;
  if (scorer_)
    scores = at::full({Hkv, n_max}, -std::numeric_limits<float>::infinity(), kv.k.options().dtype(at::kFloat));
  for (int64_t h = 0; h < Hkv; ++h) {
    const at::Tensor k = keys[h].narrow(0, 0, kv.length[h]), v = values[h].narrow(0, 0, kv.length[h]);
    k.copy_(cache.head_keys(ev.layer, h));  // read once: a compact head's keys are recovered on read
    v.copy_(cache.head_values(ev.layer, h));
    if (scorer_) {
      const LayerPrefill one{ev.config, ev.layer, ev.q.narrow(1, h * G, G), k.unsqueeze(0), v.unsqueeze(0)};
      scores[h].narrow(0, 0, kv.length[h]).copy_(rank(one, n_kept)[0]);
    }
  }
  const LayerPrefill in{ev.config, ev.layer, ev.q, keys, values};
  int64_t total = 0;
  for (int64_t n : kv.length) total += n;
  if (scorer_ && n_kept * Hkv < total) {
    const int64_t layer_kept = layer_budget_ ? layer_budget_->layer_kept(scores, n_kept, in) : n_kept;
    std::vector<at::Tensor> kept = budget_->select(scores, layer_kept, in);
    for (int64_t h = 0; h < Hkv; ++h) {
      const at::Tensor k = kept[static_cast<size_t>(h)].to(dev);
      kept[static_cast<size_t>(h)] = k.masked_select(k.lt(kv.length[h]));
    }
    cache.retain(ev.layer, kept, reserve);
  }
  if (decode_) decode_->on_prefill(ev.layer, in, cache);
  return scores;
}

at::Tensor Pipeline::rank(const LayerPrefill& in, int64_t n_kept) const {
  return mark_recent(scorer_->score(in), n_kept);
}

at::Tensor Pipeline::accumulate(int64_t layer, const LayerPrefill& in) const {
  at::Tensor sums = scorer_->attention_sum(in);  // [Hkv, rows]
  if (static_cast<int64_t>(attention_sums_.size()) <= layer) attention_sums_.resize(layer + 1);
  at::Tensor& run = attention_sums_[layer];
  if (run.defined()) {
    if (run.size(1) > sums.size(1))
      throw std::logic_error("pipeline: running attention totals of more rows than layer " + std::to_string(layer) +
                             " holds");
    sums.narrow(1, 0, run.size(1)).add_(run);
  }
  run = sums;
  return sums;
}

at::Tensor Pipeline::retain_accumulated(const LayerEvent& ev, const at::Tensor& sums, const LayerPrefill& in,
                                        int64_t n_kept, int64_t reserve) const {
  at::Tensor scores = sums.clone();
  const int64_t n = scores.size(1), newest = std::min(accumulated_newest_kept(n_kept), n);
  if (newest > 0) scores.narrow(1, n - newest, newest).fill_(std::numeric_limits<float>::max());
  const std::vector<at::Tensor> kept = budget_->select(scores, n_kept, in);
  for (const at::Tensor& k : kept)
    if (k.numel() != kept[0].numel())
      throw InputError("pipeline: eviction while decoding needs equal lengths per KV head (a uniform head budget)");
  attention_sums_[ev.layer] = sums.gather(1, at::stack(kept).to(sums.device()));
  ev.cache.retain(ev.layer, kept, reserve);
  return scores;
}

int64_t Pipeline::accumulated_newest_kept(int64_t n_kept) const {
  return std::max(static_cast<int64_t>(scorer_->recent_share() * n_kept), scorer_->keep_newest());
}

at::Tensor Pipeline::mark_recent(at::Tensor scores, int64_t n_kept) const {
  // Recent-window share: the newest entries are always kept (KeyDiff sliding-window variant).
  const int64_t n_tok = scores.size(1);
  const int64_t n_recent = std::min<int64_t>(static_cast<int64_t>(scorer_->recent_share() * n_kept), n_tok);
  if (n_recent > 0) scores.narrow(1, n_tok - n_recent, n_recent).fill_(std::numeric_limits<float>::max());
  return scores;
}

void Pipeline::evict_decode(const LayerEvent& ev, int64_t step, int64_t n_kept) const {
  if (!decode_eviction_ || ev.config.window(ev.layer) > 0) return;
  KvCache& cache = ev.cache;
  if (!cache.layer(ev.layer).uniform())
    throw InputError("pipeline: eviction while decoding needs equal lengths per KV head (a uniform head budget)");
  const int64_t target = decode_target(n_kept);
  const LayerPrefill in{ev.config, ev.layer, ev.q, cache.keys(ev.layer), cache.values(ev.layer)};
  // H2O: every step's attention adds to the running totals, evicting or not.
  const at::Tensor sums = accumulating() ? accumulate(ev.layer, in) : at::Tensor();
  if ((step + 1) % decode_eviction_->interval() != 0 || cache.layer(ev.layer).length[0] <= target) return;
  if (sums.defined())
    (void)retain_accumulated(ev, sums, in, target, decode_eviction_->interval());
  else
    cache.retain(ev.layer, budget_->select(rank(in, target), target, in), decode_eviction_->interval());
}

int64_t Pipeline::decode_target(int64_t n_kept) const {
  if (!decode_eviction_) return 0;
  return decode_eviction_->target() > 0 ? decode_eviction_->target() : n_kept;
}

bool Pipeline::evicts_in_place() const {
  return decode_eviction_ && (decode_eviction_->interval() == 1 || !accumulating()) && !layer_budget_ &&
         budget_->name() == "uniform";
}

int64_t Pipeline::decode_interval() const { return decode_eviction_ ? decode_eviction_->interval() : 0; }

bool Pipeline::begin_decode_device(const ModelConfig& config, int64_t target) const {
  if (!accumulating()) return true;
  std::vector<at::Tensor> sums(static_cast<size_t>(config.n_layer));
  for (int64_t l = 0; l < config.n_layer; ++l) {
    if (config.window(l) > 0) continue;                                   // sliding layers are never compressed
    if (l >= static_cast<int64_t>(attention_sums_.size())) return false;  // never accumulated
    const at::Tensor& run = attention_sums_[l];
    if (!run.defined() || run.dim() != 2 || run.size(1) != target) return false;
    sums[l] = at::zeros({run.size(0), target + 1}, run.options().dtype(at::kFloat));
    sums[l].narrow(1, 0, target).copy_(run);
  }
  device_sums_ = std::move(sums);
  return true;
}

void Pipeline::end_decode_device() const {
  for (size_t l = 0; l < device_sums_.size(); ++l)
    if (device_sums_[l].defined())
      attention_sums_[l] = device_sums_[l].narrow(1, 0, device_sums_[l].size(1) - 1).clone();
  device_sums_.clear();
}

void Pipeline::evict_decode_device(const ModelConfig& config, int64_t layer, const at::Tensor& q, KvCache& cache,
                                   int64_t target, const at::Tensor& length) const {
  if (!evicts_in_place()) throw std::logic_error("pipeline: evict_decode_device without an in-place S6 stage");
  if (config.window(layer) > 0) return;
  const LayerKv& kv = cache.layer(layer);
  if (!kv.uniform()) throw std::logic_error("pipeline: evict_decode_device on a ragged layer");
  const int64_t Hkv = cache.n_head_kv(), D = cache.head_dim(), cap = kv.capacity.at(0);
  const int64_t n = target + decode_eviction_->interval();
  const at::Tensor keys = kv.k.view({Hkv, cap, D}).narrow(1, 0, n);
  const at::Tensor values = kv.v.view({Hkv, cap, D}).narrow(1, 0, n);
  const at::Tensor queries = q.view({1, q.size(0), q.size(1)});
  const LayerPrefill in{config, layer, queries, keys, values};
  if (!accumulating() && n == target + 1) {
    cache.drop_lowest(layer, rank(in, target), n, length);
    return;
  }
  if (!accumulating()) {  // kvpress DecodingPress: the top-target of target + interval
    cache.keep_in_place(layer, at::stack(budget_->select(rank(in, target), target, in)), n, length);
    return;
  }
  // H2O: the totals of the target kept rows plus this step's attention (the step's entry starts at
  // 0), ranked as retain_accumulated ranks them; the totals drop the row the cache drops.
  if (layer >= static_cast<int64_t>(device_sums_.size()) || !device_sums_[layer].defined() ||
      device_sums_[layer].size(1) != n)
    throw std::logic_error("pipeline: evict_decode_device for h2o without begin_decode_device at this target");
  // retain_accumulated's ranking: the recent share and the scorer's newest entries marked kept, so
  // the argmin ranges over the entries before them (at least the first: every entry marked kept
  // ties, and at::argmin then drops the first).
  const at::Tensor& sums = device_sums_[layer];
  sums.narrow(1, n - 1, 1).zero_();
  sums.add_(scorer_->attention_sum(in));
  cache.drop_lowest(layer, sums, n, length, std::max<int64_t>(1, n - accumulated_newest_kept(target)), sums);
}

}  // namespace kvscope
