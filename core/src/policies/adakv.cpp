// "adakv" budget: Ada-KV head-wise adaptive budgets (Feng et al. 2024, arXiv 2407.11550; Thm 3.3:
// a global top-B over all heads of a layer minimises the L1 eviction-loss bound, Alg. 1), with the
// safeguard in the form of the OFFICIAL CODE and of kvpress AdaKVPress, not Alg. 2's formula
// (docs/methods.md §3.2: the paper writes B_i = α·f_i + (1-α)·B'/H_kv; the code guarantees every head
// α·B/H_kv first, which matches the paper's description of α):
//
//   n_safe   = int(n_kept · alpha)
//   s'[h,j]  = kKeepScore for the top n_safe entries of each head h, scores[h,j] otherwise
//   kept     = the top n_head_kv·n_kept entries of s' over ALL heads of the layer (flattened)
//   kept[h]  = sorted positions of those that fall in head h        (ragged per-head lengths)
//
// kvpress prunes the bottom n_head_kv·(n_tok - n_kept) instead of keeping the top n_head_kv·n_kept:
// the same set up to ties. Sum of kept = n_head_kv·min(n_kept, n_tok); every head keeps >= n_safe.
// Window / sink entries scored kKeepScore by the scorer are kept like the safeguarded ones.
// scores: fp32 [n_head_kv, n_tok]; returns n_head_kv sorted int64 tensors on the scores' device.
#include <algorithm>

#include <ATen/ATen.h>

#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "Ada-KV (Feng et al. 2024) §3.3, Alg. 1; safeguard as official code / kvpress";

class AdaKv : public BudgetBase {
 public:
  explicit AdaKv(const ParamValues& v) : BudgetBase("adakv", v), alpha_(param_float(v, "alpha")) {}

  std::vector<at::Tensor> select(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const override {
    const int64_t Hkv = scores.size(0), n = scores.size(1);
    n_kept = std::clamp<int64_t>(n_kept, 0, n);
    if (n_kept == n || n_kept == 0) return topk_sorted_per_row(scores, n_kept);
    at::Tensor s = scores.to(at::kFloat).clone();
    const int64_t n_safe = static_cast<int64_t>(static_cast<double>(n_kept) * alpha_);
    if (n_safe > 0) s.scatter_(1, std::get<1>(s.topk(n_safe, 1)), kKeepScore);
    // Global top over the layer's heads; sorting the flat indices groups them by head with positions
    // ascending, so one count per head (a single host read) splits them.
    const at::Tensor flat = std::get<0>(at::sort(std::get<1>(s.reshape({-1}).topk(Hkv * n_kept))));
    const at::Tensor head = flat.div(n, "floor"), pos = flat.remainder(n);
    const at::Tensor counts = at::zeros({Hkv}, head.options()).scatter_add_(0, head, at::ones_like(head)).to(at::kCPU);
    std::vector<at::Tensor> out;
    out.reserve(Hkv);
    int64_t first = 0;
    for (int64_t h = 0; h < Hkv; ++h) {
      const int64_t c = counts[h].item<int64_t>();
      out.push_back(pos.narrow(0, first, c));
      first += c;
    }
    return out;
  }

 private:
  double alpha_;
};

}  // namespace

PolicyRegistry::Entry adakv_entry() {
  return {"adakv",
          Stage::kBudget,
          {float_param("alpha", 0, 1, "0.2",
                       "safeguard: share of n_kept every head keeps by its own ranking before the layer-wide top-k",
                       "Ada-KV (Feng et al. 2024) §3.3 Alg. 2 (α = 0.2); code form")},
          "head-wise budgets: per-head safeguard + layer-wide top-k (Ada-KV, Feng et al. 2024 §3.3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<AdaKv>(v); }};
}

}  // namespace kvscope::policies
