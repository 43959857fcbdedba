// "spark" S4 channel pruning: SPARK (Liao et al. 2025, "Query-Aware Unstructured Sparsity with
// Recoverable KV Cache Channel Pruning"), §4.2-4.3 and App. A.2; docs/methods.md §4. Also the
// decode path shared with "think" (ChannelPruningBase, declared in channel_pruning.h).
//
// Prefill (on_prefill, per layer, per KV head h, over the n_h entries the cache holds after eviction):
//
//   q̄[i,:]    = mean of the last W prompt queries of query head i        [H, D]     fp32   (§4.3 [P])
//   a[h,:]    = reduce_{g in group h} |q̄[g,:]|   (gqa=mean|sum|max)      [Hkv, D]          (GQA: see below)
//               (query=rms: |q̄| replaced by the window RMS sqrt(mean_t q_tj²), see below)
//   w[t,j]    = a[h,j] · |k_tj|                                           [n_h, D]   saliency (eq. 7)
//   m[t,:]    = top-T_t channels of w[t,:]                                 bool [n_h, D]
//               mode=fixed: T_t = T = floor((1 - ratio) · D)               (§4.2)
//               mode=p:     T_t = fewest channels whose w sums to >= threshold · Σ_j w[t,j] (SPARK-p, §5.5)
//               mode=g:     the D channels ranked by w[t,:] fall into `groups` equal segments, most salient
//                           first; segment i prunes its floor(r_i · size) least salient channels,
//                           r = (0.25, 0.5, 0.75, 1.0) for 4 groups, (0.1, 0.3, 0.5, 0.7, 0.9) for 5
//                           (SPARK-g, §5.5; equal segments are kvscope's reading, docs/methods.md §4.9)
//   μ[t]      = mean_{j pruned} w[t,j]   (0 when nothing is pruned)        "μ_pruned", eq. 11
//
// Decode (ChannelPruningBase::attend), per query head with query q:
//
//   s_t = ( Σ_{j kept} q_j k_tj + Σ_{j pruned} q_j k̃_tj ) / sqrt(D),   q_j k̃_tj := +w̃_tj = +μ[t]
//       = ( (q ⊙ m_t)·k_t + (D - T_t) · μ[t] ) / sqrt(D)                 (recovery=degenerate)
//       = ( (q ⊙ m_t)·k_t + Σ_{j pruned} q_j·sign(k_tj)·μ[t]/a_j ) / sqrt(D)   (sign=key, see below)
//       = (q ⊙ m_t)·k_t / sqrt(D)                                        (recovery=zero: no recovery)
//   out = softmax_fp32(s) · V            (values unpruned; decode-time entries dense, see below)
//
// Sign convention (left open by the paper, docs/methods.md §4.9): the paper reconstructs
// k̃_tj = w̃ / |q_j|, which gives q_j k̃_tj = sign(q_j)·w̃, yet says the product is ≈ +w̃.
// Default: sign=key, the authors' code settling the ambiguity (below); on pycode-16m it also cuts
// the mean KL to the full cache about 3x at λ = 0.5 (0.156 vs 0.476, textwrap prompt, SnapKV 50%).
// sign=positive: the "always positive" form k̃_tj = sign(q_j)·w̃/|q_j|, so every pruned channel of
// entry t adds exactly +μ[t] to its logit, for every query head of the group and every decode step
// (the recovery is query-independent and is stored as one fp32 bias per entry:
// (D - T_t)·μ[t] = Σ_{j pruned} w[t,j]).
// μ is measured with the window query statistic a (the paper's), not the current decode query.
//
// The authors' released code (github.com/Xnhyacinth/SparK, kvpress0/presses/adathink_press.py [C])
// differs in two ways, offered as options:
//   query=rms   rank with the window's per-channel query magnitude instead of |mean| (the code uses
//               the L2 norm over the window on the group-mean query; we take the RMS, which ranks the
//               same for one head and keeps μ on the scale of one query). With RoPE, |mean| cancels
//               on fast-rotating channel pairs even when every query is large there.
//   sign=key    refill k̃_tj = sign(k_tj)·μ[t]/a_j (the code: sign(k_tj)·sqrt(μ/‖Q[:, j]‖) for its k²
//               saliency), so q_j k̃_tj follows the signs of the decode query and of the original key
//               (≈ sign(q̄_j k_tj)·μ[t] when q ≈ q̄); costs one sign bit per pruned channel, plus
//               μ[t] and 1/a_j, from which the cache recovers k̂ when it is read (no bias).
//
// GQA (the paper does not say how a group's query heads combine, docs/methods.md §4.9): the G
// query heads of a KV group share one mask per entry, ranked with a = mean (default) | sum | max
// over the group of |q̄|. sum scales w, hence μ and the recovery bias, by G relative to mean (the
// mask is the same); max ranks by the most demanding head.
//
// Decode-time entries (the paper does not say whether they are pruned, docs/methods.md §4.9 and §6.1
// S6): keys appended during decode are NOT pruned (they attend densely); only the n_h entries present
// at on_prefill are.
//
// On CUDA, mode=fixed runs the fused kernel of kernels/key_scores.h (ops::spark_prune_fixed): saliency,
// top-T mask and pruned sum in one pass over the keys, one warp per entry.
//
// Storage (CompactKeys in the cache, docs/methods.md §4.9): per pruned entry T_t kept key values
// (cache itemsize) + a kept-channel bitmask (ceil(D/8) bytes) + with sign=key and recovery=degenerate
// the pruned channels' sign bits and μ (fp32); per head 1/a (fp32 [D]); value offsets (int64) when
// the counts differ (mode=p). sign=positive keeps its bias (D - T_t)·μ[t] (fp32) in the policy.
//
// Values (value_ratio = λ_v > 0, App. D): per pruned entry the floor((1 - λ_v)·D) value channels of
// largest |v_tj| are kept, compactly as the keys (values + bitmask); the others read as 0 ("value
// recovery requires no additional operations"). Decode-time values stay dense.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/kv_cache.h"
#include "ops/cuda_ops.h"
#include "ops/key_score_ops.h"
#include "policies/channel_pruning.h"
#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {

// ---- ChannelPruningBase --------------------------------------------------------------------------

int64_t kept_channels(double ratio, int64_t head_dim) {
  const double t = std::floor((1.0 - ratio) * static_cast<double>(head_dim) + 1e-9);
  return std::clamp<int64_t>(static_cast<int64_t>(t), 0, head_dim);
}

void ChannelPruningBase::configure(const RunBudget&, const ModelConfig& config) {
  stores_.assign(static_cast<size_t>(config.n_layer), {});
  tables_.assign(static_cast<size_t>(config.n_layer), std::nullopt);
  row_bases_.assign(static_cast<size_t>(config.n_layer), at::Tensor());
  group_ = config.n_head_kv > 0 ? config.n_head / config.n_head_kv : 1;
  workspace_ = at::Tensor();
  bytes_read_last_ = 0;
}

bool ChannelPruningBase::prunable(const KvCache& cache, int64_t layer) { return !cache.layer(layer).has_ring(); }

void ChannelPruningBase::set_layer(int64_t layer, std::vector<CompactKeys> keys, std::vector<HeadStore> stores,
                                   KvCache& cache, std::vector<CompactKeys> values) {
  cache.compact_keys(layer, std::move(keys), std::move(values));
  if (static_cast<int64_t>(stores_.size()) <= layer) {
    stores_.resize(static_cast<size_t>(layer) + 1);
    tables_.resize(static_cast<size_t>(layer) + 1);
    row_bases_.resize(static_cast<size_t>(layer) + 1);
  }
  stores_[static_cast<size_t>(layer)] = std::move(stores);
  tables_[static_cast<size_t>(layer)] = ops::compact_layer_table(cache.layer(layer), cache.head_dim());  // CUDA only
}

const ChannelPruningBase::HeadStore* ChannelPruningBase::find(int64_t layer, int64_t kv_head) const {
  if (layer < 0 || layer >= static_cast<int64_t>(stores_.size())) return nullptr;
  const auto& heads = stores_[static_cast<size_t>(layer)];
  if (kv_head < 0 || kv_head >= static_cast<int64_t>(heads.size())) return nullptr;
  return &heads[static_cast<size_t>(kv_head)];
}

int64_t ChannelPruningBase::pruned_entries(int64_t layer, int64_t kv_head) const {
  const HeadStore* s = find(layer, kv_head);
  return s ? s->n : 0;
}

at::Tensor ChannelPruningBase::channel_mask(int64_t layer, int64_t kv_head, const KvCache& cache) const {
  const LayerKv& L = cache.layer(layer);
  if (L.compact_entries(kv_head) == 0 && pruned_entries(layer, kv_head) > 0)
    throw std::logic_error(name_ + ": the cache no longer holds this (layer, kv head)'s keys compactly");
  if (!find(layer, kv_head)) throw std::logic_error(name_ + ": no channel mask for this (layer, kv head) yet");
  return L.compact[kv_head].kept_mask();
}

at::Tensor ChannelPruningBase::recovery_bias(int64_t layer, int64_t kv_head) const {
  const HeadStore* s = find(layer, kv_head);
  if (!s) throw std::logic_error(name_ + ": no recovery statistics for this (layer, kv head) yet");
  return s->bias.defined() ? s->bias : at::zeros({s->n}, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor ChannelPruningBase::head_logits(int64_t layer, int64_t kv_head, const at::Tensor& q_group,
                                           const KvCache& cache) const {
  const at::Tensor k = cache.head_keys(layer, kv_head);  // [len, D]: k̂ of the pruned entries, then dense
  const int64_t len = k.size(0), D = k.size(1);
  const HeadStore* st = find(layer, kv_head);
  const int64_t n = st ? st->n : 0;
  if (n > len)
    throw std::logic_error(name_ + ": layer " + std::to_string(layer) + " kv head " + std::to_string(kv_head) +
                           " holds fewer entries than were pruned at prefill");
  // Scores in the cache dtype, then fp32 (as gqa_attention does); the recovery bias is fp32.
  at::Tensor s = at::matmul(q_group.to(k.scalar_type()), k.t()).to(at::kFloat);  // [G, len]
  if (n > 0 && st->bias.defined()) s.narrow(1, 0, n).add_(st->bias.to(s.device()));
  return s.mul_(1.0 / std::sqrt(static_cast<double>(D)));
}

bool ChannelPruningBase::kernels_fit(int64_t layer, const KvCache& cache) const {
  const LayerKv& L = cache.layer(layer);
  const int64_t d = cache.head_dim();  // the head_dims both decode kernels take
  if (!L.v.is_cuda() || !ops::cuda_kernels_available() || (d != 64 && d != 96 && d != 128 && d != 256)) return false;
  for (int64_t h = 0; h < cache.n_head_kv(); ++h)
    if (const HeadStore* st = find(layer, h); st && st->bias.defined()) return false;
  // Compact values only through the compact-key kernel (the workspace holds keys).
  return L.compact_v.empty() || (table(layer) && group_ <= 8);
}

const ops::CompactLayerTable* ChannelPruningBase::table(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(tables_.size())) return nullptr;
  const auto& t = tables_[static_cast<size_t>(layer)];
  return t ? &*t : nullptr;
}

std::vector<int64_t> ChannelPruningBase::row_bases(const LayerKv& L) {
  std::vector<int64_t> out = L.value_bases();
  const std::vector<int64_t> keys = L.key_bases();
  out.insert(out.end(), keys.begin(), keys.end());
  return out;
}

at::Tensor ChannelPruningBase::attend_kernels(int64_t layer, const at::Tensor& q, const KvCache& cache,
                                              const at::Tensor& value_base_dev, const at::Tensor& key_base_dev,
                                              const at::Tensor& length_dev, int64_t max_len, int64_t total_len) {
  const LayerKv& L = cache.layer(layer);
  const int64_t G = q.size(0) / cache.n_head_kv();
  if (const ops::CompactLayerTable* t = table(layer); !L.compact.empty() && t && G <= 8)
    return ops::compact_decode_attention(q, L, *t, value_base_dev, key_base_dev, length_dev, max_len, G);
  // Dense values (kernels_fit): their rows sit at the offsets, as the workspace's keys do.
  const at::Tensor k = L.compact.empty() ? L.k : recover_into_workspace(layer, cache);
  return ops::decode_attention(q, k, L.v, value_base_dev, length_dev, max_len, total_len, G);
}

bool ChannelPruningBase::reads_rows(int64_t layer, const KvCache& cache) const {
  return table(layer) && group_ <= 8 && kernels_fit(layer, cache);
}

at::Tensor ChannelPruningBase::attend_rows(int64_t layer, const at::Tensor& q, const KvCache& cache,
                                           const ops::CompactSelection& sel, int64_t max_rows, bool graph) const {
  if (!reads_rows(layer, cache))
    throw std::logic_error(name_ + ": layer " + std::to_string(layer) + " has no compact-key kernel table");
  const LayerKv& L = cache.layer(layer);
  const int64_t Hkv = cache.n_head_kv();
  const at::Tensor bases =
      graph ? row_bases_.at(static_cast<size_t>(layer)) : ops::upload_int64(row_bases(L), q.device());
  return ops::compact_decode_attention(q, L, *table(layer), bases.narrow(0, 0, Hkv), bases.narrow(0, Hkv, Hkv),
                                       sel.count, std::max<int64_t>(max_rows, 1), q.size(0) / Hkv, 0.0, &sel);
}

at::Tensor ChannelPruningBase::recover_into_workspace(int64_t layer, const KvCache& cache) {
  const LayerKv& L = cache.layer(layer);
  const int64_t rows = L.v.size(0);
  if (!workspace_.defined() || workspace_.size(0) < rows || workspace_.scalar_type() != L.v.scalar_type() ||
      workspace_.device() != L.v.device())
    workspace_ = at::empty({rows, cache.head_dim()}, L.v.options());
  const at::Tensor ws = workspace_.narrow(0, 0, rows);
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
    const int64_t c = L.compact_entries(h), cap = L.capacity[h];
    if (c > 0) ws.narrow(0, L.offset[h], c).copy_(L.compact[h].recover());
    // Every row a decode step may append to (static shapes for a graph; rows past the length are
    // never read).
    if (cap > c) ws.narrow(0, L.offset[h] + c, cap - c).copy_(L.k.narrow(0, L.key_row(h, c), cap - c));
  }
  return ws;
}

int64_t ChannelPruningBase::layer_bytes(int64_t layer, const KvCache& cache) const {
  const LayerKv& L = cache.layer(layer);
  const int64_t D = cache.head_dim(), item = L.v.element_size();
  int64_t bytes = 0;
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
    const int64_t len = L.length[h], c = L.compact_entries(h), cv = L.compact_value_entries(h);
    const HeadStore* st = find(layer, h);
    bytes += (c > 0 ? L.compact[h].bytes() : 0) + (len - c) * D * item + (cv > 0 ? L.compact_v[h].bytes() : 0) +
             (len - cv) * D * item;
    if (st && st->bias.defined()) bytes += st->bias.numel() * 4;
  }
  return bytes;
}

bool ChannelPruningBase::prepare_graph(const KvCache& cache, int64_t) {
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    const LayerKv& L = cache.layer(l);
    if (L.window > 0) continue;  // sliding layers attend densely
    if (!kernels_fit(l, cache)) return false;
    if (static_cast<int64_t>(row_bases_.size()) <= l) row_bases_.resize(static_cast<size_t>(l) + 1);
    // The rows stay put while the graph runs (DecodeGraph reserves every step's room first).
    row_bases_[static_cast<size_t>(l)] = ops::upload_int64(row_bases(L), L.v.device());
  }
  return true;
}

at::Tensor ChannelPruningBase::attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache,
                                             const at::Tensor& offset_dev, const at::Tensor& length_dev) {
  const LayerKv& L = cache.layer(layer);
  int64_t max_len = 0, total = 0;
  for (int64_t c : L.capacity) {
    max_len = std::max(max_len, c);
    total += c;
  }
  const at::Tensor& bases = row_bases_.at(static_cast<size_t>(layer));
  const int64_t Hkv = cache.n_head_kv();
  return attend_kernels(layer, q, cache, bases.narrow(0, 0, Hkv), bases.narrow(0, Hkv, Hkv), length_dev, max_len,
                        total);
}

int64_t ChannelPruningBase::after_graph_step(const KvCache& cache) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < cache.n_layer(); ++l) bytes += layer_bytes(l, cache);
  return bytes;
}

at::Tensor ChannelPruningBase::attend(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  const int64_t H = q.size(0), D = q.size(1), Hkv = cache.n_head_kv();
  if (Hkv == 0 || H % Hkv != 0 || D != cache.head_dim())
    throw InputError(name_ + ": query [" + std::to_string(H) + ", " + std::to_string(D) + "] does not fit the cache");
  const int64_t G = H / Hkv;
  bytes_read_last_ = layer_bytes(layer, cache);
  if (q.is_cuda() && kernels_fit(layer, cache)) {  // value and key rows' bases and lengths up in one copy
    const LayerKv& L = cache.layer(layer);
    std::vector<int64_t> meta = row_bases(L);
    meta.insert(meta.end(), L.length.begin(), L.length.end());
    const at::Tensor dev = ops::upload_int64(meta, q.device());
    int64_t max_len = 1, total = 0;
    for (int64_t n : L.length) {
      max_len = std::max(max_len, n);
      total += n;
    }
    return attend_kernels(layer, q, cache, dev.narrow(0, 0, Hkv), dev.narrow(0, Hkv, Hkv), dev.narrow(0, 2 * Hkv, Hkv),
                          max_len, total);
  }
  std::vector<at::Tensor> outs;
  outs.reserve(static_cast<size_t>(Hkv));
  for (int64_t h = 0; h < Hkv; ++h) {
    const at::Tensor s = head_logits(layer, h, q.narrow(0, h * G, G), cache);  // fp32 [G, len]
    const at::Tensor v = cache.head_values(layer, h);                          // [len, D]
    const at::Tensor p = at::softmax(s, -1).to(v.scalar_type());
    outs.push_back(at::matmul(p, v));  // [G, D]
  }
  return at::cat(outs, 0).to(q.scalar_type());
}

int64_t ChannelPruningBase::side_store_bytes() const {
  int64_t b = 0;
  for (const auto& heads : stores_)
    for (const auto& s : heads)
      if (s.bias.defined()) b += s.bias.numel() * 4;
  return b;
}

int64_t ChannelPruningBase::dense_key_bytes() const {
  int64_t b = 0;
  for (const auto& heads : stores_)
    for (const auto& s : heads) b += s.dense_bytes;
  return b;
}

// ---- SPARK ---------------------------------------------------------------------------------------

namespace {

constexpr const char* kRef = "SPARK (Liao et al. 2025) §4.2-4.3";

class Spark : public ChannelPruningBase {
 public:
  int64_t prefill_queries() const override { return window_; }
  explicit Spark(const ParamValues& v)
      : ChannelPruningBase("spark", v),
        ratio_(param_float(v, "ratio")),
        window_(param_int(v, "window")),
        gqa_(parse_gqa(v.at("gqa"))),
        degenerate_(v.at("recovery") == "degenerate"),
        top_p_(v.at("mode") == "p"),
        grouped_(v.at("mode") == "g"),
        groups_(std::stoi(v.at("groups"))),
        threshold_(param_float(v, "threshold")),
        value_ratio_(param_float(v, "value_ratio")),
        rms_(v.at("query") == "rms"),
        key_sign_(v.at("sign") == "key") {}

  void on_prefill(int64_t layer, const LayerPrefill& in, KvCache& cache) override {
    check_layer_prefill("spark", in, /*needs_queries=*/true);
    const int64_t T = in.queries.size(0), H = in.queries.size(1), D = in.queries.size(2);
    const int64_t Hkv = cache.n_head_kv();
    if (Hkv == 0 || H % Hkv != 0 || D != cache.head_dim())
      throw InputError("spark: queries [" + std::to_string(T) + ", " + std::to_string(H) + ", " + std::to_string(D) +
                       "] do not fit the cache");
    if (!prunable(cache, layer)) return;
    const int64_t G = H / Hkv, w = std::min(window_, T);
    at::Tensor a;  // [Hkv, D]: group-aggregated |q̄| (query=mean) or window RMS of q (query=rms)
    if (w > 0) {
      const at::Tensor qw = in.queries.narrow(0, T - w, w).to(at::kFloat);         // [w, H, D]
      const at::Tensor qbar = rms_ ? qw.pow(2).mean(0).sqrt() : qw.mean(0).abs();  // [H, D]
      a = reduce_groups(qbar.view({Hkv, G, D}), gqa_);
    } else {
      a = at::zeros({Hkv, D}, in.queries.options().dtype(at::kFloat));
    }
    const int64_t item = cache.layer(layer).v.element_size();
    std::vector<CompactKeys> keys, values;
    std::vector<HeadStore> stores;
    for (int64_t h = 0; h < Hkv; ++h) {
      const at::Tensor k = cache.head_keys(layer, h);  // [n, D] retained entries
      const int64_t n = k.size(0);
      const at::Tensor ah = a[h].to(k.device());
      if (value_ratio_ > 0) {  // App. D: per entry the top value channels by |v|, the others dropped (read as 0)
        const at::Tensor v = cache.head_values(layer, h);
        values.push_back(CompactKeys::pack(v, top_t_mask(v.to(at::kFloat).abs(), kept_channels(value_ratio_, D))));
      }
      at::Tensor mask, pruned_sum;
      if (use_kernel(k)) {
        // One fused kernel: saliency, top-T mask and pruned sum with the arithmetic below
        // (kernels/key_scores.h).
        ops::SparkPruned p = ops::spark_prune_fixed(k, ah, kept_channels(ratio_, D), false);
        mask = std::move(p.mask);
        pruned_sum = std::move(p.pruned_sum);
      } else {
        const at::Tensor sal = k.to(at::kFloat).abs().mul_(ah);  // w [n, D]
        mask = top_p_     ? top_p_mask(sal, threshold_)
               : grouped_ ? group_mask(sal, groups_)
                          : top_t_mask(sal, kept_channels(ratio_, D));
        pruned_sum = sal.masked_fill(mask, 0.0f).sum(-1);  // [n] = (D - T_t)·μ[t]
      }
      HeadStore s;
      s.n = n;
      s.dense_bytes = n * D * item;
      if (degenerate_ && key_sign_) {
        // k̃_tj = sign(k_tj) · μ[t] / a_j on pruned channels (0 where a_j = 0: w is 0 there anyway).
        const at::Tensor n_pruned = (~mask).sum(-1).to(at::kFloat);                       // [n]
        const at::Tensor mu = pruned_sum / n_pruned.clamp_min(1.0f);                      // [n]
        const at::Tensor inv_a = at::where(ah > 0, ah.reciprocal(), at::zeros_like(ah));  // [D]
        keys.push_back(CompactKeys::pack(k, mask, mu, inv_a));
      } else {
        keys.push_back(CompactKeys::pack(k, mask));
        if (degenerate_) s.bias = pruned_sum;  // sign=positive: every pruned channel adds +μ[t]
      }
      stores.push_back(std::move(s));
    }
    set_layer(layer, std::move(keys), std::move(stores), cache, std::move(values));
  }

  /// The fused CUDA path (ops::spark_prune_fixed) applies: mode=fixed, keys on CUDA in fp32 / bf16 /
  /// fp16 with D <= 256, and a build with the kernels. Same mask (ties at the threshold may pick
  /// other channels of exactly equal saliency), same k̂ arithmetic; pruned_sum summed in another order.
  bool use_kernel(const at::Tensor& k) const {
    const at::ScalarType t = k.scalar_type();
    return !top_p_ && !grouped_ && k.is_cuda() && ops::cuda_kernels_available() && k.size(1) >= 1 && k.size(1) <= 256 &&
           (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
  }

  /// bool [n, D]: the t largest entries of each row (t in [0, D]).
  static at::Tensor top_t_mask(const at::Tensor& sal, int64_t t) {
    const int64_t D = sal.size(1);
    at::Tensor mask = at::zeros(sal.sizes(), sal.options().dtype(at::kBool));
    if (t >= D) return mask.fill_(true);
    if (t <= 0 || sal.size(0) == 0) return mask;
    return mask.scatter_(1, std::get<1>(sal.topk(t, -1)), true);
  }

  /// The pruning ratio of each saliency segment of SPARK-g, most salient first (§5.5).
  static std::vector<double> group_ratios(int64_t groups) {
    return groups == 5 ? std::vector<double>{0.1, 0.3, 0.5, 0.7, 0.9} : std::vector<double>{0.25, 0.5, 0.75, 1.0};
  }

  /// bool [n, D]: SPARK-g. Per row the channels sorted by saliency (descending) form `groups`
  /// segments of D / groups (the first D % groups one larger); segment i keeps its
  /// size - floor(r_i · size) most salient channels. Every row keeps the same count.
  static at::Tensor group_mask(const at::Tensor& sal, int64_t groups) {
    const int64_t D = sal.size(1);
    at::Tensor mask = at::zeros(sal.sizes(), sal.options().dtype(at::kBool));
    if (sal.size(0) == 0) return mask;
    const std::vector<double> ratios = group_ratios(groups);
    std::vector<uint8_t> keep_rank(static_cast<size_t>(D), 0);  // by rank in the sorted order
    for (int64_t i = 0, start = 0; i < groups; ++i) {
      const int64_t size = D / groups + (i < D % groups ? 1 : 0);
      const int64_t pruned = std::min<int64_t>(size, static_cast<int64_t>(std::floor(ratios[i] * size + 1e-9)));
      for (int64_t r = start; r < start + size - pruned; ++r) keep_rank[static_cast<size_t>(r)] = 1;
      start += size;
    }
    const at::Tensor by_rank = at::tensor(std::vector<int64_t>(keep_rank.begin(), keep_rank.end()), at::kLong)
                                   .to(sal.device(), at::kBool)
                                   .unsqueeze(0)
                                   .expand(sal.sizes());
    const at::Tensor order = std::get<1>(sal.sort(-1, /*descending=*/true));
    return mask.scatter_(1, order, by_rank);
  }

  /// bool [n, D]: per row, the fewest largest entries whose sum reaches p of the row total (SPARK-p).
  static at::Tensor top_p_mask(const at::Tensor& sal, double p) {
    const int64_t D = sal.size(1);
    at::Tensor mask = at::zeros(sal.sizes(), sal.options().dtype(at::kBool));
    if (sal.size(0) == 0) return mask;
    auto [vals, idx] = sal.sort(-1, /*descending=*/true);
    const at::Tensor cums = vals.cumsum(-1);
    const at::Tensor total = cums.narrow(1, D - 1, 1);                                // [n, 1]
    const at::Tensor count = (cums < total * p).sum(-1, true).add_(1).clamp_max_(D);  // [n, 1]
    const at::Tensor ranks = at::arange(D, sal.options().dtype(at::kLong)).unsqueeze(0);
    return mask.scatter_(1, idx, ranks < count);
  }

 private:
  double ratio_;
  int64_t window_;
  GqaReduce gqa_;
  bool degenerate_;
  bool top_p_;
  bool grouped_;
  int64_t groups_;
  double threshold_;
  double value_ratio_;
  bool rms_;
  bool key_sign_;
};

}  // namespace

PolicyRegistry::Entry spark_entry() {
  return {
      "spark",
      Stage::kChannel,
      {
          float_param("ratio", 0, 1, "0.5",
                      "key-channel pruning ratio λ: each prompt entry keeps its top T = floor((1-λ)·D) channels "
                      "(mode=fixed)",
                      kRef),
          int_param("window", 1, 1 << 20, "32", "the saliency query q̄ is the mean of the last `window` prompt queries",
                    kRef),
          choice_param("gqa", {"mean", "sum", "max"}, "mean",
                       "how |q̄| of the G query heads of a KV group is combined into one saliency (unstated in "
                       "the paper; sum also scales the recovery by G)",
                       "SPARK (Liao et al. 2025) does not say how GQA groups share a mask; mean is kvscope's "
                       "choice (docs/methods.md §4.9)"),
          choice_param("recovery", {"degenerate", "zero"}, "degenerate",
                       "degenerate: each pruned channel adds +μ_pruned[t] to the logit (always-positive sign); "
                       "zero: pruned channels contribute nothing",
                       "SPARK (Liao et al. 2025) §4.3 eq. 8, App. A.2 eq. 11"),
          choice_param("mode", {"fixed", "p", "g"}, "fixed",
                       "fixed: T channels per entry; p: SPARK-p, the fewest channels holding `threshold` of the "
                       "entry's saliency; g: SPARK-g, `groups` saliency segments pruned at rising ratios",
                       "SPARK (Liao et al. 2025) §5.5"),
          choice_param("groups", {"4", "5"}, "4",
                       "SPARK-g (mode=g): 4 segments pruned at (0.25, 0.5, 0.75, 1.0) or 5 at (0.1, 0.3, 0.5, "
                       "0.7, 0.9), most salient first",
                       "SPARK (Liao et al. 2025) §5.5; equal segments of the saliency ranking are kvscope's "
                       "reading (docs/methods.md §4.9)"),
          float_param("value_ratio", 0, 1, "0",
                      "value-channel pruning ratio λ_v: each prompt entry keeps its floor((1-λ_v)·D) value channels "
                      "of largest |v|, the others read as 0 (0: values whole)",
                      "SPARK (Liao et al. 2025) App. D, Table 5"),
          float_param("threshold", 0, 1, "0.99", "saliency mass kept per entry with mode=p",
                      "SPARK (Liao et al. 2025) §5.5"),
          choice_param("query", {"mean", "rms"}, "mean",
                       "saliency query per channel: mean = |mean of the window queries| (paper); rms = root mean "
                       "square of the window queries (authors' code ranks by the window L2 norm)",
                       "SPARK (Liao et al. 2025) §4.3 (mean); the authors' code, github.com/Xnhyacinth/SparK "
                       "(rms)"),
          choice_param("sign", {"positive", "key"}, "key",
                       "sign of a recovered product: positive = every pruned channel adds +μ (query-independent); "
                       "key = refill k̃ = sign(k)·μ/a_j, so q_j·k̃ follows the query and the key's sign (+1 bit "
                       "per pruned channel)",
                       "SPARK (Liao et al. 2025) §4.3: its k̃ = w̃/|q_j| and its q_j·k̃ ≈ +w̃ disagree on the sign "
                       "(docs/methods.md §4.9); key follows the authors' code, github.com/Xnhyacinth/SparK"),
      },
      "per-entry top-T key channels by |q̄|·|k|, pruned channels recovered as +μ (SPARK, Liao et al. 2025 §4)",
      [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Spark>(v); }};
}

}  // namespace kvscope::policies
