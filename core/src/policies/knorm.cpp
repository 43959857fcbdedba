// "knorm" scoring: Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression" (arXiv 2406.11430), §3: keys with a low L2 norm draw high attention, so keep them.
//
//   score[h,j] = -||k_{h,j}||_2          (kvpress knorm_press.py)
//
// Shapes: in.keys [n_head_kv, n_tok, D] (any float dtype; the norm is taken in fp32);
// returns fp32 [n_head_kv, n_tok]. No queries needed.
#include <ATen/ATen.h>

#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

class Knorm : public ScoringBase {
 public:
  explicit Knorm(const ParamValues& v) : ScoringBase("knorm", v) {}
  int64_t prefill_queries() const override { return 0; }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("knorm", in, /*needs_queries=*/false);
    return in.keys.to(at::kFloat).norm(2, {-1}).neg_();
  }
};

}  // namespace

PolicyRegistry::Entry knorm_entry() {
  return {"knorm",
          Stage::kScoring,
          {},
          "keep low-norm keys: -||k|| (Devoto et al. 2024 §3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Knorm>(v); },
          "negative L2 norm of the key (Devoto et al. 2024 §3): low-norm keys rank high"};
}

}  // namespace kvscope::policies
