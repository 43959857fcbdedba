// "hsa" decode-time selection: RocketKV Hybrid Sparse Attention (Behnam et al. 2025, ICML'25,
// §3.4 Algorithm 1 and §3.6; docs/methods.md §1.4, with the [C] details of the authors' code).
// Stage 2 of RocketKV: after SnapKV's permanent eviction (stage 1, a scoring stage placed before
// this one), every decode step of every layer and KV group:
//
//   q: [G, D] the group's query heads (fp32); K, V: [N, D] the head's cache rows in storage order
//   i1   = top-k1_j Σ_g |q_{g,j}|                        channels shared by the group       [P]
//   q̂    = q[:, i1]                                     [G, k1]
//   sgn  = Σ_g q̂_g >= 0                                 per-channel group sign              [P]
//   K̂[P] = sgn ? Kmax[P, i1] : Kmin[P, i1]              page bounds, pages of p entries      [P]
//   ŝ    = q̂ · K̂ᵀ                                       [G, n_pages] upper-bound logits
//   ŝ    = repeat each page p times, first N entries     [G, N] (decode: every entry visible, the
//                                                        step's own key included)
//   π̂_g  = softmax(ŝ_g / sqrt(D · Σ|q̂_g| / Σ|q_g|))     SparQ temperature correction          [C]
//   i2   = top-k2_i Σ_g π̂_{g,i}                          tokens shared by the group (ties: lower
//                                                        storage index first; the code's mean over
//                                                        the group ranks the same)          [P]/[C]
//   y_g  = softmax(q_g · K[i2]ᵀ / sqrt(D)) · V[i2]       exact attention, all G heads           [P]
//
// Budget (configure): t = decode_fetch_budget (RocketKV's unit is --budget-unit fetched: KV pairs
// per decode step per KV group); S = min(S_p + n_gen, max_position_embeddings);
// rocketkv_split(S, t, D, n_gen) gives the stage-1 prompt keep P = C - n_gen (eviction_budget)
// and p, k1, k2 = t/2. stage1=false ("HSA alone", App. B.1.1): nothing is evicted and p, k1 come
// from hsa_split(S, t, D) (c2 = S/t). p, k1, k2 may be overridden. A pipeline without a scoring
// stage evicts nothing whatever stage1 says; use stage1=false there so p and k1 match the cache.
//
// Side store: page Kmin/Kmax per (layer, KV head) (PageMinMax), built in on_prefill over the
// retained cache and updated before each step (only the last page changes). Bytes read per step
// and KV head: n_pages·k1 side-store values (one of min/max per channel) + k2 K/V rows; a head with
// N <= k2 attends densely (no approximation), and so does a streaming head of a head pattern (a
// ring buffer of sinks + recent window: HSA selects on the retrieval heads only and never
// summarises a ring; PagedSelectionBase in decode_selection.h says why).
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policies/rocketkv_budget.h"
#include "policies/decode_selection.h"
#include "policies/param_builders.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "RocketKV (Behnam et al. 2025) §3.4 Alg. 1, §3.6";

class Hsa : public PagedSelectionBase {
 public:
  explicit Hsa(const ParamValues& v)
      : PagedSelectionBase("hsa", v),
        stage1_(param_bool(v, "stage1")),
        page_param_(param_int(v, "page")),
        k1_param_(param_int(v, "k1")),
        k2_param_(param_int(v, "k2")) {}

  void configure(const RunBudget& budget, const ModelConfig& config) override {
    const int64_t t = decode_fetch_budget(budget), D = config.head_dim;
    int64_t S = std::max<int64_t>(1, budget.n_prompt + budget.max_new_tokens);
    if (config.max_position_embeddings > 0) S = std::min(S, config.max_position_embeddings);
    split_ = stage1_ ? rocketkv_split(S, t, D, std::max<int64_t>(0, budget.max_new_tokens)) : hsa_split(S, t, D);
    page_ = page_param_ > 0 ? page_param_ : split_.page;
    k1_ = std::min(k1_param_ > 0 ? k1_param_ : split_.k1, D);
    k2_ = k2_param_ > 0 ? k2_param_ : split_.k2;
    n_head_ = config.n_head;
    pages_.reset(config.n_layer, page_);
    configured_ = true;
  }
  std::optional<int64_t> eviction_budget(const RunBudget& budget) const override {
    return stage1_ ? split_.prompt_keep : budget.n_prompt;
  }

 protected:
  KernelPlan kernel_plan(int64_t head_dim) const override { return {true, std::min(k1_, head_dim), k2_, k2_}; }
  /// Per KV head that selects (k2 < its entries): n_pages·k1 side-store values.
  int64_t summary_bytes(const LayerKv& kv) const override {
    const int64_t item = kv.k.element_size(), k1 = std::min(k1_, kv.k.size(1));
    int64_t bytes = 0;
    for (const int64_t n : kv.length)
      if (k2_ < n) bytes += (n + page_ - 1) / page_ * k1 * item;
    return bytes;
  }

  at::Tensor attend_pages(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v) override {
    const int64_t B = q.size(0), G = q.size(1), D = q.size(2), N = k.size(1);
    if (k2_ >= N) return attend_selected(h0, q, k, v, {});
    const int64_t k1 = std::min(k1_, D), n_pages = pages_.n_pages(layer, h0);
    at::Tensor absq = q.abs();                                          // [B, G, D]
    at::Tensor i1 = std::get<1>(absq.sum(1).topk(k1, -1));              // [B, k1]
    at::Tensor qhat = q.gather(2, i1.unsqueeze(1).expand({B, G, k1}));  // [B, G, k1]
    at::Tensor use_max = qhat.sum(1).ge(0).unsqueeze(1);                // [B, 1, k1]
    at::Tensor ip = i1.unsqueeze(1).expand({B, n_pages, k1});
    at::Tensor khat =
        at::where(use_max, pages_.kmax(layer, h0, B).gather(2, ip), pages_.kmin(layer, h0, B).gather(2, ip))
            .to(at::kFloat);                             // [B, P, k1]
    bytes_last_ += B * n_pages * k1 * k.element_size();  // side store is in the cache dtype
    at::Tensor s = at::bmm(qhat, khat.transpose(1, 2));  // [B, G, P]
    s = s.unsqueeze(-1).expand({B, G, n_pages, page_}).reshape({B, G, n_pages * page_}).narrow(2, 0, N);
    at::Tensor num = qhat.abs().sum(-1, true), den = absq.sum(-1, true);  // [B, G, 1]
    at::Tensor ratio = at::where(den.gt(0), num / den, at::ones_like(den));
    at::Tensor pi = at::softmax(s / (ratio * static_cast<double>(D)).sqrt(), -1);  // [B, G, N]
    at::Tensor i2 = topk_stable(pi.sum(1), k2_).unsqueeze(1);                      // [B, 1, k2]
    return attend_selected(h0, q, k, v, i2);
  }

 private:
  bool stage1_;
  int64_t page_param_, k1_param_, k2_param_;
  RocketKvSplit split_;
  int64_t page_ = 1, k1_ = 1, k2_ = 1;
};

}  // namespace

PolicyRegistry::Entry hsa_entry() {
  return {"hsa",
          Stage::kDecodeSelection,
          {bool_param("stage1", "true",
                      "RocketKV: the scoring stage before hsa evicts down to P = C - n_gen prompt entries per KV head "
                      "(adaptive split c^r, §3.6); false = HSA alone (no eviction, page and k1 from c = S/t)",
                      "RocketKV (Behnam et al. 2025) §3.6, App. B.1.1"),
           int_param("page", 0, 4096, "0",
                     "page size p of the min/max key summaries (0 = ceil(sqrt(C/t)), 1 if that exceeds C/t)", kRef),
           int_param("k1", 0, 4096, "0",
                     "head-dim channels of the approximation, by group-summed |q| (0 = trunc(D·p/(C/t)), clamped "
                     "to [1, D])",
                     kRef),
           int_param("k2", 0, 1 << 20, "0",
                     "tokens attended exactly per decode step per KV group (0 = t/2: half the token budget)", kRef)},
          "RocketKV hybrid sparse attention: page min/max x top-k1 channels -> top-k2 tokens per group "
          "(Behnam et al. 2025 §3.4)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Hsa>(v); }};
}

}  // namespace kvscope::policies
