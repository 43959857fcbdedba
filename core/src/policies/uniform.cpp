// "uniform" budget: every KV head keeps the same number of entries, its own top-n_kept by score
// (kvpress ScorerPress.compress: n_kept = int(n_tok * (1 - compression_ratio)), scores.topk(n_kept)).
// This is the allocation of SnapKV, TOVA, KeyDiff, StreamingLLM, ... (docs/methods.md §6.1 S2 "uniform").
//
//   kept[h] = sort(topk_j(scores[h, j], min(n_kept, n_tok)))
//
// scores: fp32 [n_head_kv, n_tok]; returns n_head_kv sorted int64 tensors of min(n_kept, n_tok)
// indices on the scores' device. Ties are broken by at::topk (deterministic for a given input).
#include <ATen/ATen.h>

#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

class Uniform : public BudgetBase {
 public:
  explicit Uniform(const ParamValues& v) : BudgetBase("uniform", v) {}
  std::vector<at::Tensor> select(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const override {
    return topk_sorted_per_row(scores, n_kept);
  }
};

}  // namespace

PolicyRegistry::Entry uniform_entry() {
  return {"uniform",
          Stage::kBudget,
          {},
          "same budget for every KV head: per-head top-n_kept (SnapKV/kvpress ScorerPress; docs/methods.md §6.1)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Uniform>(v); }};
}

}  // namespace kvscope::policies
