// "h2o" scoring: H2O heavy hitters (Zhang et al. 2023, arXiv 2306.14048), §3 (accumulated attention
// identifies heavy hitters) and §4 / Alg. 1 (keep heavy hitters + recent tokens):
//
//   A[h,g,i,j] = softmax_j(q_i · k_j / sqrt(D) + causal mask)     fp32, every prompt query i
//   s[h,g,j]   = sum_i A[h,g,i,j]                                   norm=sum (the paper)
//              = sum_i A[h,g,i,j] / #{i : i >= j}                   norm=mean (kvpress ObservedAttentionPress)
//   score[h,j] = reduce_g s[h,g,j];  the last `recent` entries get kKeepScore
//
// The rows are computed in blocks of queries (at most ~16M fp32 logits at a time), never as an
// n_tok x n_tok matrix. in.queries may hold only the last T <= n_tok queries (block-wise prefill):
// then only their attention is accumulated. H2O splits its budget half heavy hitters / half recent;
// the scorer does not see the budget, so `recent` is an absolute count (set it to ~n_kept/2 for the
// paper's split). Shapes: in.queries [T, n_head, D], in.keys [n_head_kv, n_tok, D];
// returns fp32 [n_head_kv, n_tok].
#include <algorithm>

#include <ATen/ATen.h>

#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "H2O (Zhang et al. 2023) §3-4, Alg. 1";

class H2o : public ScoringBase {
 public:
  explicit H2o(const ParamValues& v)
      : ScoringBase("h2o", v),
        gqa_(parse_gqa(v.at("gqa"))),
        mean_(v.at("norm") == "mean"),
        recent_(param_int(v, "recent")) {}

  // While decoding, the running total of norm=sum (the paper) takes each step's attention; a mean
  // would need per-entry query counts, and a max over the group does not add up step by step.
  bool accumulates() const override { return !mean_ && gqa_ != GqaReduce::kMax; }
  at::Tensor attention_sum(const LayerPrefill& in) const override {
    check_layer_prefill("h2o", in, /*needs_queries=*/true);
    return reduce_groups(column_sums(in), gqa_);
  }
  int64_t keep_newest() const override { return recent_; }

  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("h2o", in, /*needs_queries=*/true);
    const int64_t n = in.keys.size(1), T = in.queries.size(0);
    at::Tensor acc = column_sums(in);
    if (mean_) {
      // queries that saw key j: those at key indices >= max(j, n - T)
      at::Tensor j = at::arange(n, acc.options());
      acc.div_((n - at::clamp_min(j, static_cast<double>(n - T))).clamp_min(1.0));
    }
    at::Tensor s = reduce_groups(acc, gqa_);
    if (recent_ > 0) s.narrow(1, n - std::min(recent_, n), std::min(recent_, n)).fill_(kKeepScore);
    return s;
  }

 private:
  /// s[h,g,j] = sum_i A[h,g,i,j], fp32 [Hkv, G, n].
  static at::Tensor column_sums(const LayerPrefill& in) {
    const int64_t Hkv = in.keys.size(0), n = in.keys.size(1);
    const int64_t T = in.queries.size(0), H = in.queries.size(1), G = H / Hkv;
    // fp32 keys once for every block (the probabilities are fp32, as kvpress computes them). A
    // block holds at most ~16M logits on the CPU and ~128M (512 MB) on a GPU.
    const at::Tensor keys = in.keys.to(at::kFloat);
    const int64_t max_logits = int64_t{in.keys.is_cuda() ? 128 : 16} << 20;
    const int64_t block = std::max<int64_t>(1, max_logits / std::max<int64_t>(1, H * n));
    if (T == 1)  // one decode step's query: its probabilities are the sums
      return causal_attention_probs(in.queries, keys, n - 1).select(2, 0);
    at::Tensor acc = at::zeros({Hkv, G, n}, keys.options());
    for (int64_t r0 = 0; r0 < T; r0 += block) {
      const int64_t tb = std::min(block, T - r0);
      const int64_t first = n - T + r0, m = first + tb;  // keys visible to the block's last query
      at::Tensor p = causal_attention_probs(in.queries.narrow(0, r0, tb), keys.narrow(1, 0, m), first);
      acc.narrow(2, 0, m).add_(p.sum(2));  // [Hkv, G, m]
    }
    return acc;
  }

  GqaReduce gqa_;
  bool mean_;
  int64_t recent_;
};

}  // namespace

PolicyRegistry::Entry h2o_entry() {
  return {"h2o",
          Stage::kScoring,
          {choice_param("norm", {"sum", "mean"}, "sum",
                        "sum: accumulated attention (paper); mean: divided by the number of queries that saw the key "
                        "(kvpress ObservedAttentionPress)",
                        kRef),
           int_param("recent", 0, 1 << 20, "0",
                     "most recent entries always kept (the paper gives half the budget to them)", kRef),
           choice_param("gqa", {"mean", "sum", "max"}, "mean", "how the G query heads of a KV group are combined",
                        "Ada-KV (Feng et al. 2024) §3.5; KeyDiff App. F.2")},
          "accumulated attention of all prompt queries (H2O heavy hitters, Zhang et al. 2023 §3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<H2o>(v); },
          "accumulated attention of every prompt query (H2O §3, Alg. 1); recent tokens always kept"};
}

}  // namespace kvscope::policies
