// "snapkv" scoring: SnapKV (Li et al. 2024, arXiv 2404.14469), §4.1 (observation-window voting) and
// §4.2 (clustering via pooling), in NVIDIA kvpress's form (kvpress/presses/snapkv_press.py):
//
//   A[h,g,i,j] = softmax_j(q_{n-w+i} · k_j / sqrt(D) + causal mask inside the window)   fp32
//   s[h,g,j]   = mean_i A[h,g,i,j]                          for j < n - w (window columns dropped)
//   s          = pool1d(s, kernel, stride 1, padding kernel/2)   per query head
//   score[h,j] = reduce_g s[h,g,j]                           (group mean: SnapKV issue #22, Ada-KV §3.5)
//   score[h,j] = kKeepScore                                 for j >= n - w (window always kept)
//
// Shapes: in.queries [n_tok, n_head, D] (or the last T queries), in.keys [n_head_kv, n_tok, D];
// returns fp32 [n_head_kv, n_tok]. The paper sums over the window rows; kvpress takes the mean
// (same ranking). Defaults are the paper's (window 32, max-pool 7, as Ada-KV / RocketKV run it);
// kvpress's defaults (the golden references) are window=64 kernel=5 pool=avg.
// On a GPU with bf16 / fp16 tensors the same scores come from the fused tensor-core kernels
// (kernels/snapkv_scores.h: no [G, w, n] attention tensor); elsewhere from the LibTorch ops below.
#include <ATen/ATen.h>

#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "SnapKV (Li et al. 2024) §4.1-4.2";

class SnapKv : public ScoringBase {
 public:
  explicit SnapKv(const ParamValues& v) : ScoringBase("snapkv", v), p_(parse_snapkv("snapkv", v)) {}
  int64_t prefill_queries() const override { return p_.window; }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("snapkv", in, /*needs_queries=*/true);
    return snapkv_scores(in, p_);
  }

 private:
  SnapKvParams p_;
};

}  // namespace

PolicyRegistry::Entry snapkv_entry() {
  SnapKvParams d;  // paper defaults: window 32, kernel 7, max pool, group mean
  return {"snapkv",
          Stage::kScoring,
          snapkv_spec(d, kRef),
          "window attention of the last w queries, pooled; window always kept (SnapKV, Li et al. 2024 §4)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<SnapKv>(v); },
          "pooled observation-window attention, GQA-combined (SnapKV §4.1-4.2); window always kept"};
}

}  // namespace kvscope::policies
