// "tova" scoring: TOVA (Oren et al. 2024, "Transformers are Multi-State RNNs", arXiv 2401.06104),
// §3.3: rank every cached token by the attention the newest query gives it.
//
//   A[h,g,j]   = softmax_j(q_{n-1} · k_j / sqrt(D))                 fp32, all n keys
//   s[j]       = mean over ALL query heads of the layer of A[.,.,j]  for j < n - 1   (gqa=all)
//   score[h,j] = s[j] for every KV head h; score[h,n-1] = kKeepScore (the last token is always kept)
//
// gqa=all is kvpress's TOVAPress (attn_weights.mean(1), then repeated over KV heads) and TOVA's own
// layer-wise policy: every KV head keeps the same tokens (the pycode-16m golden kept sets are equal
// across KV heads). gqa=mean|sum|max reduce only within each KV group instead (per-head selection).
// kvpress (and this) always keep the last token; the paper does not force it.
// Shapes: in.queries [n_tok or T, n_head, D], in.keys [n_head_kv, n_tok, D]; returns fp32 [n_head_kv, n_tok].
#include <ATen/ATen.h>

#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "TOVA (Oren et al. 2024) §3.3; kvpress TOVAPress";

class Tova : public ScoringBase {
 public:
  int64_t prefill_queries() const override { return 1; }  // the last prompt token's attention
  bool per_head() const override { return !all_; }        // gqa=all: one score for the layer
  explicit Tova(const ParamValues& v) : ScoringBase("tova", v), all_(v.at("gqa") == "all") {
    if (!all_) gqa_ = parse_gqa(v.at("gqa"));
  }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("tova", in, /*needs_queries=*/true);
    const int64_t Hkv = in.keys.size(0), n = in.keys.size(1);
    at::Tensor out = at::full({Hkv, n}, kKeepScore, in.keys.options().dtype(at::kFloat));
    if (n <= 1 || in.queries.size(0) == 0) return out;
    at::Tensor a = window_attention(in, 1).select(2, 0).narrow(2, 0, n - 1);  // [Hkv, G, n-1]
    at::Tensor s = all_ ? a.mean(at::IntArrayRef{0, 1}).unsqueeze(0).expand({Hkv, n - 1}) : reduce_groups(a, gqa_);
    out.narrow(1, 0, n - 1).copy_(s);
    return out;
  }

 private:
  bool all_;
  GqaReduce gqa_ = GqaReduce::kMean;
};

}  // namespace

PolicyRegistry::Entry tova_entry() {
  return {"tova",
          Stage::kScoring,
          {choice_param("gqa", {"all", "mean", "sum", "max"}, "all",
                        "all: mean over every query head of the layer, same tokens for all KV heads (TOVA, kvpress); "
                        "mean|sum|max: within each KV group",
                        kRef)},
          "attention of the last query, head-averaged (TOVA, Oren et al. 2024 §3.3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Tova>(v); },
          "attention of the last prompt token (TOVA §3.3); the last token always kept"};
}

}  // namespace kvscope::policies
