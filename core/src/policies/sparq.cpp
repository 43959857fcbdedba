// "sparq" decode-time selection: SparQ Attention (Ribar et al. 2024, "SparQ Attention:
// Bandwidth-Efficient LLM Inference", ICML'24) Algorithm 1, as RocketKV configures it (Behnam et
// al. 2025, App. A.3; docs/methods.md §1.8), made GQA-aware like RocketKV's HSA:
//
//   i1   = top-r_j Σ_g |q_{g,j}|                        channels shared by the group
//   ŝ_g  = q_g[i1] · K[:, i1]ᵀ                          [G, N] approximate logits
//   π̂_g  = softmax(ŝ_g / sqrt(D · Σ|q_g[i1]| / Σ|q_g|)) SparQ's temperature correction (Alg. 1)
//   i2   = top-k_i Σ_g π̂_{g,i}                          tokens shared by the group (ties: lower
//                                                      storage index first)
//   y_g  = softmax(q_g · K[i2]ᵀ / sqrt(D)) · V[i2]
//   mean=true: y_g = α_g y_g + (1 - α_g) v̄,  α_g = Σ_{i∈i2} π̂_{g,i},  v̄ = mean of V over all N rows
//
// Budget: t split evenly between approximation and attention (RocketKV App. A.3): k = t/2, and
// the approximation (N rows of r key channels, i.e. N·r/(2D) KV-pair equivalents) gets the other
// half: r = clamp(floor(2·D·(t - k) / N), 1, D) per step and head (= D·t/N for k = t/2), unless
// r is given. RocketKV does not say whether its SparQ baseline used the mean-value correction;
// kvscope leaves it off by default (mean=true turns it on). v̄ is a side store (running fp32 sum
// of V per layer and KV head, updated on appends). Shapes: q [n_head, D]; K, V [len_h, D] per KV
// head; scores fp32. A head with N <= k attends densely (then α = 1 and the correction vanishes).
//
// With a head pattern, a streaming head (a ring buffer of sinks + recent window, LayerKv::ring)
// attends densely over its every row, with no selection and no v̄; only retrieval heads run SparQ.
// The rule of the page-summary policies (PagedSelectionBase in decode_selection.h says why): SparQ
// cuts the reads of a cache that grows with the sequence, a streaming head's window is constant and
// was learned as full attention over it (DuoAttention §3.1-3.2). A full ring also overwrites a row
// at every append while its length stays put, so a sum of V kept by length would go stale. The
// side store holds v̄ for non-ring heads only (bytes counted for those); a ring head's rows count
// in bytes_read_last as dense reads.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policies/rocketkv_budget.h"
#include "policies/decode_selection.h"
#include "policies/param_builders.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "SparQ Attention (Ribar et al. 2024) Alg. 1; RocketKV (Behnam et al. 2025) App. A.3";

/// Running fp32 sum of the value rows of every (layer, KV head), for SparQ's mean-value term. Kept
/// by length (a head only appends between syncs; a shorter head means an eviction: the layer is
/// summed again), so never for a ring head (LayerKv::ring), whose full ring overwrites rows in place
/// at a constant length: such a head has no sum (zero row, covered 0, no bytes), also one that
/// became a ring after the last sync.
class ValueMean {
 public:
  void reset(int64_t n_layer) { layers_.assign(static_cast<size_t>(n_layer), Layer{}); }
  void sync(int64_t l, const KvCache& cache) {
    Layer& L = layers_.at(l);
    const LayerKv& kv = cache.layer(l);
    const int64_t Hkv = cache.n_head_kv();
    bool rebuild = !L.sum.defined() || static_cast<int64_t>(L.covered.size()) != Hkv;
    for (int64_t h = 0; !rebuild && h < Hkv; ++h) rebuild = !kv.ring(h) && kv.length[h] < L.covered[h];
    if (rebuild) {
      L.sum = at::zeros({Hkv, cache.head_dim()}, kv.v.options().dtype(at::kFloat));
      L.covered.assign(static_cast<size_t>(Hkv), 0);
      L.kept.assign(static_cast<size_t>(Hkv), false);
    }
    for (int64_t h = 0; h < Hkv; ++h) {
      if (kv.ring(h)) {
        if (L.kept[h]) L.sum[h].zero_();
        L.covered[h] = 0;
        L.kept[h] = false;
        continue;
      }
      const int64_t n = kv.length[h];
      if (n > L.covered[h])
        L.sum[h].add_(cache.head_values(l, h).narrow(0, L.covered[h], n - L.covered[h]).to(at::kFloat).sum(0));
      L.covered[h] = n;
      L.kept[h] = true;
    }
  }
  /// fp32 [B, D] mean value rows of heads h0 .. h0+B-1 (none of them a ring head).
  at::Tensor mean(int64_t l, int64_t h0, int64_t B) const {
    const Layer& L = layers_.at(l);
    at::Tensor n = at::tensor(std::vector<int64_t>(L.covered.begin() + h0, L.covered.begin() + h0 + B)).to(at::kFloat);
    return L.sum.narrow(0, h0, B) / n.clamp_min(1).to(L.sum.device()).unsqueeze(1);
  }
  /// Bytes of the sums kept: D fp32 values per non-ring (layer, KV head).
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& L : layers_)
      if (L.sum.defined())
        b +=
            static_cast<int64_t>(std::count(L.kept.begin(), L.kept.end(), true)) * L.sum.size(1) * L.sum.element_size();
    return b;
  }

 private:
  struct Layer {
    at::Tensor sum;  // fp32 [Hkv, D]
    std::vector<int64_t> covered;
    std::vector<bool> kept;  // per KV head: a sum is kept (not a ring head)
  };
  std::vector<Layer> layers_;
};

class SparQ : public DecodeSelectionBase {
 public:
  explicit SparQ(const ParamValues& v)
      : DecodeSelectionBase("sparq", v),
        r_param_(param_int(v, "r")),
        k_param_(param_int(v, "k")),
        mean_(param_bool(v, "mean")) {}

  void configure(const RunBudget& budget, const ModelConfig& config) override {
    t_ = decode_fetch_budget(budget);
    k_ = k_param_ > 0 ? k_param_ : std::max<int64_t>(1, t_ / 2);
    values_.reset(config.n_layer);
    configured_ = true;
  }
  void on_prefill(int64_t layer, const LayerPrefill&, KvCache& cache) override {
    if (mean_) values_.sync(layer, cache);
  }
  int64_t side_store_bytes() const override { return values_.bytes(); }

 protected:
  /// Syncs v̄ of `layer` (mean=true) and notes which of its KV heads are rings.
  void before_attend(int64_t layer, const KvCache& cache) override {
    if (mean_) values_.sync(layer, cache);
    const LayerKv& kv = cache.layer(layer);
    ring_.assign(static_cast<size_t>(cache.n_head_kv()), false);
    for (int64_t h = 0; h < cache.n_head_kv(); ++h) ring_[h] = kv.ring(h);
  }

  at::Tensor attend_heads(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v) override {
    const int64_t B = q.size(0), G = q.size(1), D = q.size(2), N = k.size(1);
    // A streaming head: its sinks + window, every row (see the header). A layer holding one is
    // ragged, so attend() hands it over alone (B = 1).
    if (h0 < static_cast<int64_t>(ring_.size()) && ring_[h0]) {
      if (B != 1) throw std::logic_error("sparq: a ring head in a batch of KV heads");
      return attend_selected(h0, q, k, v, {});
    }
    if (k_ >= N) return attend_selected(h0, q, k, v, {});
    const int64_t r =
        r_param_ > 0 ? std::min(r_param_, D) : std::clamp<int64_t>(2 * D * std::max<int64_t>(0, t_ - k_) / N, 1, D);
    at::Tensor absq = q.abs();                                                        // [B, G, D]
    at::Tensor i1 = std::get<1>(absq.sum(1).topk(r, -1));                             // [B, r]
    at::Tensor qhat = q.gather(2, i1.unsqueeze(1).expand({B, G, r}));                 // [B, G, r]
    at::Tensor khat = k.gather(2, i1.unsqueeze(1).expand({B, N, r})).to(at::kFloat);  // [B, N, r]
    bytes_last_ += B * N * r * k.element_size();
    at::Tensor s = at::bmm(qhat, khat.transpose(1, 2));  // [B, G, N]
    at::Tensor num = qhat.abs().sum(-1, true), den = absq.sum(-1, true);
    at::Tensor ratio = at::where(den.gt(0), num / den, at::ones_like(den));
    at::Tensor pi = at::softmax(s / (ratio * static_cast<double>(D)).sqrt(), -1);  // [B, G, N]
    at::Tensor i2 = topk_stable(pi.sum(1), k_).unsqueeze(1);                       // [B, 1, k]
    at::Tensor y = attend_selected(h0, q, k, v, i2);                               // [B, G, D]
    if (!mean_) return y;
    at::Tensor alpha = pi.gather(2, i2.expand({B, G, k_})).sum(-1, true);  // [B, G, 1]
    bytes_last_ += B * D * 4;                                              // v̄ (fp32)
    return alpha * y + (1 - alpha) * values_.mean(layer, h0, B).unsqueeze(1);
  }

 private:
  int64_t r_param_, k_param_;
  bool mean_;
  int64_t t_ = 1, k_ = 1;
  ValueMean values_;
  std::vector<bool> ring_;  // per KV head of the layer before_attend last saw: a ring buffer
};

}  // namespace

PolicyRegistry::Entry sparq_entry() {
  return {"sparq",
          Stage::kDecodeSelection,
          {int_param("r", 0, 4096, "0",
                     "key channels of the approximation, by group-summed |q| (0 = the other half of the token budget: "
                     "floor(2·D·(t - k)/N), clamped to [1, D], per step)",
                     kRef),
           int_param("k", 0, 1 << 20, "0",
                     "tokens attended exactly per decode step per KV group (0 = t/2, RocketKV's even split)", kRef),
           bool_param("mean", "false",
                      "SparQ's mean-value correction y = a·y + (1 - a)·mean(V) (RocketKV does not say whether its "
                      "SparQ baseline used it; off by default)",
                      "SparQ Attention (Ribar et al. 2024) Alg. 1")},
          "approximate logits from the r largest-|q| channels, exact attention over the top-k (SparQ, Ribar et al. "
          "2024)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<SparQ>(v); }};
}

}  // namespace kvscope::policies
