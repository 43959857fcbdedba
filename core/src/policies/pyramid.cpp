// "pyramid" budget: PyramidKV's per-layer budgets (Cai et al. 2024, arXiv 2406.02069, §3.2: more
// cache in lower layers, an arithmetic sequence down to the top layer), in the form of kvpress
// PyramidKVPress.get_layer_budget (itself from KVCache-Factory pyramidkv_utils.py):
//
//   with n = n_tok, W = window, b = n_kept (kvpress: n·(1 - ratio); here the integer n_kept),
//   L = n_layer, l = layer:
//     min_num = b / beta
//     max_num = 2·b - min_num                       (so (max_num + min_num)/2 = b: the mean over layers is b)
//     if max_num >= n - W:  max_num = n - W;  min_num = 2·b - max_num
//     if not (n >= max_num >= min_num >= W):  budget = b          (kvpress falls back to SnapKV)
//     else:  budget_l = round_half_even(max_num - l·(max_num - min_num)/(L - 1))
//   then the head budget stage allocates budget_l per KV head within layer l: `uniform` (each head
//   its top-budget_l entries, PyramidKV and kvpress), or `adakv` (Ada-PyramidKV: a layer-wide
//   top-(n_head_kv·budget_l) with the safeguard, Ada-KV §4.1 and its code's pyram_mode). The window,
//   scored kKeepScore, is inside the budget.
//
// Budget contract: per layer this exceeds n_head_kv·n_kept in the lower layers and falls short in
// the upper ones; over all layers the mean per-head count is n_kept (+ at most 0.5 from rounding).
// Differences from kvpress: b is the integer n_kept instead of n·(1-ratio) (at most 1 token of
// difference in max/min), and window=-1 (default) takes W from the scores: the number of entries a
// head marked always-keep (kKeepScore), which is the observation window of snapkv/pyramidkv scores.
// scores: fp32 [n_head_kv, n_tok]; in.layer and in.config.n_layer select the layer's budget.
// Ada-KV's code (pyram_mode) computes this schedule over the budget without the window, with
// integer divisions (min_num = b // beta, steps = (max_num - min_num) // (L - 1)) and without the
// fallback; kvscope uses kvpress's form for PyramidKV and Ada-PyramidKV alike.
#include <algorithm>
#include <cfenv>
#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {

int64_t pyramid_layer_budget(int64_t n_tok, int64_t n_kept, int64_t window, double beta, int64_t layer,
                             int64_t n_layer) {
  const double n = static_cast<double>(n_tok), W = static_cast<double>(window);
  const double b = static_cast<double>(std::clamp<int64_t>(n_kept, 0, n_tok));
  if (n_layer <= 1) return static_cast<int64_t>(b);
  double min_num = b / beta;
  double max_num = 2 * b - min_num;
  if (max_num >= n - W) {
    max_num = n - W;
    min_num = 2 * b - max_num;
  }
  if (!(n >= max_num && max_num >= min_num && min_num >= W)) return static_cast<int64_t>(b);
  const double steps = (max_num - min_num) / static_cast<double>(n_layer - 1);
  const double x = max_num - static_cast<double>(layer) * steps;
  const int old = std::fegetround();
  std::fesetround(FE_TONEAREST);  // Python round(): half to even
  const double r = std::nearbyint(x);
  std::fesetround(old);
  return std::clamp<int64_t>(static_cast<int64_t>(r), 0, n_tok);
}

namespace {

constexpr const char* kRef = "PyramidKV (Cai et al. 2024) §3.2; kvpress PyramidKVPress.get_layer_budget";

class Pyramid : public LayerBudgetBase {
 public:
  explicit Pyramid(const ParamValues& v)
      : LayerBudgetBase("pyramid", v), window_(param_int(v, "window")), beta_(param_float(v, "beta")) {}

  int64_t layer_kept(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const override {
    const int64_t n = scores.size(1);
    int64_t w = window_;
    if (w < 0) w = n == 0 ? 0 : (scores == kKeepScore).sum(1).max().item<int64_t>();
    return pyramid_layer_budget(n, n_kept, w, beta_, in.layer, in.config.n_layer);
  }

 private:
  int64_t window_;
  double beta_;
};

}  // namespace

PolicyRegistry::Entry pyramid_entry() {
  return {"pyramid",
          Stage::kLayerBudget,
          {int_param("window", -1, 1 << 20, "-1",
                     "observation window W of the scorer, kept in every layer (-1: count the always-keep entries "
                     "of the scores)",
                     kRef),
           float_param("beta", 1, 1e6, "20", "pyramid steepness: the top layer gets about n_kept/beta", kRef)},
          "per-layer budgets decreasing linearly with depth, mean n_kept (PyramidKV, Cai et al. 2024 §3.2)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Pyramid>(v); }};
}

}  // namespace kvscope::policies
