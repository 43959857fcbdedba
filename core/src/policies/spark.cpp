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
//               (≈ sign(q̄_j k_tj)·μ[t] when q ≈ q̄); costs one sign bit per pruned channel. The
//               refilled keys are folded into the compute copy k̂ (bias 0).
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
// top-T mask, pruned sum and the refilled k̂ in one pass over the keys, one warp per entry.
//
// Memory accounting (the cache itself keeps dense K; the compute path uses k̂): per pruned entry
// T_t kept key values (cache itemsize) + T_t channel indices (uint8; int16 when D > 256) + μ (fp32,
// only with recovery=degenerate) + a per-entry channel count (int16, mode=p only) + ceil((D-T_t)/8)
// sign bytes (sign=key with recovery=degenerate only). The K bytes saved
// are dense_key_bytes() - side_store_bytes() (docs/methods.md §4.9: the paper's "% saved" ignores indices).
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
  steps_.assign(static_cast<size_t>(config.n_layer), 0);
  folded_.assign(static_cast<size_t>(config.n_layer), 0);
  bytes_read_last_ = 0;
}

void ChannelPruningBase::set_head(int64_t layer, int64_t kv_head, HeadStore s, const KvCache& cache) {
  s.pos = cache.head_positions(layer, kv_head).narrow(0, 0, s.n).clone();
  if (static_cast<int64_t>(stores_.size()) <= layer) stores_.resize(static_cast<size_t>(layer) + 1);
  if (static_cast<int64_t>(steps_.size()) <= layer) steps_.resize(static_cast<size_t>(layer) + 1, 0);
  steps_[static_cast<size_t>(layer)] = 0;
  if (static_cast<int64_t>(folded_.size()) <= layer) folded_.resize(static_cast<size_t>(layer) + 1, 0);
  folded_[static_cast<size_t>(layer)] = 0;
  auto& heads = stores_[static_cast<size_t>(layer)];
  if (static_cast<int64_t>(heads.size()) <= kv_head) heads.resize(static_cast<size_t>(kv_head) + 1);
  heads[static_cast<size_t>(kv_head)] = std::move(s);
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

at::Tensor ChannelPruningBase::channel_mask(int64_t layer, int64_t kv_head) const {
  const HeadStore* s = find(layer, kv_head);
  if (!s || !s->mask.defined()) throw std::logic_error(name_ + ": no channel mask for this (layer, kv head) yet");
  return s->mask;
}

at::Tensor ChannelPruningBase::recovery_bias(int64_t layer, int64_t kv_head) const {
  const HeadStore* s = find(layer, kv_head);
  if (!s || !s->bias.defined())
    throw std::logic_error(name_ + ": no recovery statistics for this (layer, kv head) yet");
  return s->bias;
}

at::Tensor ChannelPruningBase::head_logits(int64_t layer, int64_t kv_head, const at::Tensor& q_group,
                                           const KvCache& cache) const {
  const at::Tensor k = cache.head_keys(layer, kv_head);  // [len, D]
  const int64_t len = k.size(0), D = k.size(1);
  const HeadStore* st = find(layer, kv_head);
  const int64_t n = st ? st->n : 0;
  if (n > len)
    throw std::logic_error(name_ + ": layer " + std::to_string(layer) + " kv head " + std::to_string(kv_head) +
                           " holds fewer entries than were pruned at prefill");
  const at::Tensor qg = q_group.to(k.scalar_type());  // [G, D]
  std::vector<at::Tensor> parts;
  // Scores in the cache dtype, then fp32 (as gqa_attention does); the recovery bias is fp32.
  if (n > 0) {
    at::Tensor sp = at::matmul(qg, st->masked_k.t()).to(at::kFloat).add_(st->bias);  // [G, n]
    // A ring-buffer head (retention "window") overwrites old rows in place: those now hold
    // decode-time entries, which attend densely. Every attend() follows one append per head, so a
    // head that grew by exactly that many rows overwrote none (no position check, no device sync).
    const int64_t steps = layer < static_cast<int64_t>(steps_.size()) ? steps_[static_cast<size_t>(layer)] : 0;
    if (len != n + steps) {
      const at::Tensor same = cache.head_positions(layer, kv_head).narrow(0, 0, n).eq(st->pos);
      if (!same.all().item<bool>()) sp = at::where(same, sp, at::matmul(qg, k.narrow(0, 0, n).t()).to(at::kFloat));
    }
    parts.push_back(sp);
  }
  if (len > n) parts.push_back(at::matmul(qg, k.narrow(0, n, len - n).t()).to(at::kFloat));
  at::Tensor s = parts.empty()       ? at::zeros({qg.size(0), 0}, qg.options().dtype(at::kFloat))
                 : parts.size() == 1 ? parts[0]
                                     : at::cat(parts, 1);
  return s.mul_(1.0 / std::sqrt(static_cast<double>(D)));
}

bool ChannelPruningBase::fold_into_cache(int64_t layer, const KvCache& cache) {
  if (layer < 0 || layer >= static_cast<int64_t>(folded_.size())) return false;
  if (folded_[static_cast<size_t>(layer)]) return true;
  const LayerKv& L = cache.layer(layer);
  if (!L.k.is_cuda() || !ops::cuda_kernels_available() || (cache.head_dim() != 64 && cache.head_dim() != 128))
    return false;
  for (int64_t w : L.ring_window)
    if (w > 0) return false;
  std::vector<const HeadStore*> heads;
  std::vector<at::Tensor> biases;
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
    const HeadStore* st = find(layer, h);
    if (!st || st->n == 0) continue;
    if (st->n > L.length[h]) return false;
    heads.push_back(st);
    if (st->bias.defined()) biases.push_back(st->bias.abs().max().reshape({1}));
  }
  if (!biases.empty() && at::cat(biases).max().item<float>() != 0.f) return false;  // a query-independent bias
  for (int64_t h = 0; h < cache.n_head_kv(); ++h)
    if (const HeadStore* st = find(layer, h); st && st->n > 0) L.k.narrow(0, L.offset[h], st->n).copy_(st->masked_k);
  folded_[static_cast<size_t>(layer)] = 1;
  return true;
}

int64_t ChannelPruningBase::layer_bytes(int64_t layer, const KvCache& cache) const {
  const LayerKv& L = cache.layer(layer);
  const int64_t D = cache.head_dim(), item = L.k.element_size();
  int64_t bytes = 0;
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
    const HeadStore* st = find(layer, h);
    const int64_t len = L.length[h], n = st ? st->n : 0;
    bytes += (st ? st->key_bytes : 0) + (len - n) * D * item + len * D * item;
  }
  return bytes;
}

bool ChannelPruningBase::prepare_graph(const KvCache& cache, int64_t) {
  for (int64_t l = 0; l < cache.n_layer(); ++l)
    if (cache.layer(l).window == 0 && !fold_into_cache(l, cache)) return false;  // sliding layers: dense
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
  return ops::decode_attention(q, L.k, L.v, offset_dev, length_dev, max_len, total, q.size(0) / cache.n_head_kv());
}

int64_t ChannelPruningBase::after_graph_step(const KvCache& cache) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    if (l < static_cast<int64_t>(steps_.size())) ++steps_[static_cast<size_t>(l)];
    bytes += layer_bytes(l, cache);
  }
  return bytes;
}

at::Tensor ChannelPruningBase::attend(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  const int64_t H = q.size(0), D = q.size(1), Hkv = cache.n_head_kv();
  if (Hkv == 0 || H % Hkv != 0 || D != cache.head_dim())
    throw InputError(name_ + ": query [" + std::to_string(H) + ", " + std::to_string(D) + "] does not fit the cache");
  const int64_t G = H / Hkv;
  if (layer < static_cast<int64_t>(steps_.size())) ++steps_[static_cast<size_t>(layer)];
  bytes_read_last_ = layer_bytes(layer, cache);
  if (q.is_cuda() && fold_into_cache(layer, cache))  // k̂ in the cache rows: the fused dense kernel
    return ops::decode_attention(q, cache.layer(layer), G);
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
    for (const auto& s : heads) b += s.key_bytes;
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
        threshold_(param_float(v, "threshold")),
        rms_(v.at("query") == "rms"),
        key_sign_(v.at("sign") == "key") {}

  void on_prefill(int64_t layer, const LayerPrefill& in, const KvCache& cache) override {
    check_layer_prefill("spark", in, /*needs_queries=*/true);
    const int64_t T = in.queries.size(0), H = in.queries.size(1), D = in.queries.size(2);
    const int64_t Hkv = cache.n_head_kv();
    if (Hkv == 0 || H % Hkv != 0 || D != cache.head_dim())
      throw InputError("spark: queries [" + std::to_string(T) + ", " + std::to_string(H) + ", " + std::to_string(D) +
                       "] do not fit the cache");
    const int64_t G = H / Hkv, w = std::min(window_, T);
    at::Tensor a;  // [Hkv, D]: group-aggregated |q̄| (query=mean) or window RMS of q (query=rms)
    if (w > 0) {
      const at::Tensor qw = in.queries.narrow(0, T - w, w).to(at::kFloat);         // [w, H, D]
      const at::Tensor qbar = rms_ ? qw.pow(2).mean(0).sqrt() : qw.mean(0).abs();  // [H, D]
      a = reduce_groups(qbar.view({Hkv, G, D}), gqa_);
    } else {
      a = at::zeros({Hkv, D}, in.queries.options().dtype(at::kFloat));
    }
    const int64_t item = cache.layer(layer).k.element_size();
    // The heads' stores and the data-dependent part of their key bytes (kept channels, sign bits)
    // as device scalars, read back together once the layer is done: one host sync per layer.
    std::vector<HeadStore> stores;
    std::vector<at::Tensor> kept_bytes;
    for (int64_t h = 0; h < Hkv; ++h) {
      const at::Tensor k = cache.head_keys(layer, h);  // [n, D] retained entries
      const int64_t n = k.size(0);
      HeadStore s;
      s.n = n;
      at::Tensor mask, pruned_sum;
      const bool fused = use_kernel(k);
      if (fused) {
        // One fused kernel: saliency, top-T mask, pruned sum and k̂ (refilled when sign=key), with
        // spark.cpp's arithmetic below (kernels/key_scores.h).
        ops::SparkPruned p =
            ops::spark_prune_fixed(k, a[h].to(k.device()), kept_channels(ratio_, D), degenerate_ && key_sign_);
        mask = std::move(p.mask);
        pruned_sum = std::move(p.pruned_sum);
        s.masked_k = std::move(p.masked_k);
      } else {
        const at::Tensor sal = k.to(at::kFloat).abs().mul_(a[h].to(k.device()));  // w [n, D]
        mask = top_p_ ? top_p_mask(sal, threshold_) : top_t_mask(sal, kept_channels(ratio_, D));
        pruned_sum = sal.masked_fill(mask, 0.0f).sum(-1);  // [n] = (D - T_t)·μ[t]
        s.masked_k = k.mul(mask.to(k.scalar_type()));
      }
      s.mask = mask;
      at::Tensor var_bytes = mask.sum() * (item + index_bytes(D));  // int64 scalar on the keys' device
      s.key_bytes = (degenerate_ ? n * 4 : 0) + (top_p_ ? n * 2 : 0);
      if (degenerate_ && key_sign_) {
        // k̃_tj = sign(k_tj) · μ[t] / a_j on pruned channels (0 where a_j = 0: w is 0 there anyway);
        // one sign bit per pruned channel is stored. (The fused kernel has refilled k̂ already.)
        if (!fused) {
          const at::Tensor n_pruned = (~mask).sum(-1, true).to(at::kFloat);          // [n, 1]
          const at::Tensor mu = pruned_sum.unsqueeze(1) / n_pruned.clamp_min(1.0f);  // [n, 1]
          const at::Tensor ah = a[h].to(k.device());
          const at::Tensor inv_a = at::where(ah > 0, ah.reciprocal(), at::zeros_like(ah));  // [D]
          const at::Tensor refill = k.to(at::kFloat).sign().mul_(mu).mul_(inv_a).masked_fill_(mask, 0.0f);
          s.masked_k = s.masked_k.add(refill.to(k.scalar_type()));
        }
        s.bias = at::zeros_like(pruned_sum);
        const at::Tensor bits = ((~mask).sum(-1) + 7).div(8, "floor");  // [n]
        var_bytes = var_bytes + bits.sum();
      } else {
        s.bias = degenerate_ ? pruned_sum : at::zeros_like(pruned_sum);
      }
      s.dense_bytes = n * D * item;
      stores.push_back(std::move(s));
      kept_bytes.push_back(std::move(var_bytes));
    }
    const at::Tensor var = at::stack(kept_bytes).to(at::kCPU);  // Hkv >= 1 (checked above)
    for (int64_t h = 0; h < Hkv; ++h) {
      stores[static_cast<size_t>(h)].key_bytes += var[h].item<int64_t>();
      set_head(layer, h, std::move(stores[static_cast<size_t>(h)]), cache);
    }
  }

  /// The fused CUDA path (ops::spark_prune_fixed) applies: mode=fixed, keys on CUDA in fp32 / bf16 /
  /// fp16 with D <= 256, and a build with the kernels. Same mask (ties at the threshold may pick
  /// other channels of exactly equal saliency), same k̂ arithmetic; pruned_sum summed in another order.
  bool use_kernel(const at::Tensor& k) const {
    const at::ScalarType t = k.scalar_type();
    return !top_p_ && k.is_cuda() && ops::cuda_kernels_available() && k.size(1) >= 1 && k.size(1) <= 256 &&
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
  double threshold_;
  bool rms_;
  bool key_sign_;
};

}  // namespace

PolicyRegistry::Entry spark_entry() {
  return {"spark",
          Stage::kChannel,
          {
              float_param("ratio", 0, 1, "0.5",
                          "key-channel pruning ratio λ: each prompt entry keeps its top T = floor((1-λ)·D) channels "
                          "(mode=fixed)",
                          kRef),
              int_param("window", 1, 1 << 20, "32",
                        "the saliency query q̄ is the mean of the last `window` prompt queries", kRef),
              choice_param("gqa", {"mean", "sum", "max"}, "mean",
                           "how |q̄| of the G query heads of a KV group is combined into one saliency (unstated in "
                           "the paper; sum also scales the recovery by G)",
                           "SPARK (Liao et al. 2025) does not say how GQA groups share a mask; mean is kvscope's "
                           "choice (docs/methods.md §4.9)"),
              choice_param("recovery", {"degenerate", "zero"}, "degenerate",
                           "degenerate: each pruned channel adds +μ_pruned[t] to the logit (always-positive sign); "
                           "zero: pruned channels contribute nothing",
                           "SPARK (Liao et al. 2025) §4.3 eq. 8, App. A.2 eq. 11"),
              choice_param("mode", {"fixed", "p"}, "fixed",
                           "fixed: T channels per entry; p: SPARK-p, the fewest channels holding `threshold` of the "
                           "entry's saliency",
                           "SPARK (Liao et al. 2025) §5.5"),
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
