// "pyramidkv" scoring: PyramidKV (Cai et al. 2024, arXiv 2406.02069) scores tokens exactly as
// SnapKV does (§3.3: attention of the last α "instruction" tokens, pooled; those tokens always
// kept); what makes it PyramidKV is the per-layer budget schedule, which lives in the "pyramid"
// layer-budget stage (pyramid.cpp). `pyramidkv` alone runs with it (PolicyDescription::layer_budget):
// pyramidkv = pyramidkv+pyramid+uniform; pyramidkv+adakv is Ada-PyramidKV.
//
// Formula and shapes: see snapkv.cpp / snapkv_scores in scoring.h; returns fp32 [n_head_kv, n_tok].
// Defaults are those of the authors' code (KVCache-Factory PyramidKVCluster) and of kvpress
// PyramidKVPress: window 64, kernel 5, avg pool, group mean.
#include <ATen/ATen.h>

#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "PyramidKV (Cai et al. 2024) §3.3; defaults from KVCache-Factory / kvpress";

class PyramidKv : public ScoringBase {
 public:
  explicit PyramidKv(const ParamValues& v) : ScoringBase("pyramidkv", v), p_(parse_snapkv("pyramidkv", v)) {}
  int64_t prefill_queries() const override { return p_.window; }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("pyramidkv", in, /*needs_queries=*/true);
    return snapkv_scores(in, p_);
  }

 private:
  SnapKvParams p_;
};

}  // namespace

PolicyRegistry::Entry pyramidkv_entry() {
  SnapKvParams d;
  d.window = 64;
  d.kernel = 5;
  d.pool = Pool::kAvg;
  return {"pyramidkv",
          Stage::kScoring,
          snapkv_spec(d, kRef),
          "SnapKV scores for the per-layer 'pyramid' budget (PyramidKV, Cai et al. 2024 §3.3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<PyramidKv>(v); },
          "pooled observation-window attention, GQA-combined (PyramidKV §3.3 = SnapKV §4.1-4.2); window always kept",
          "pyramid"};
}

}  // namespace kvscope::policies
