#include "kvscope/core/capture.h"

#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/policies/builtin.h"

namespace kvscope {

CaptureLevel parse_capture_level(const std::string& text) {
  if (text == "off") return CaptureLevel::kOff;
  if (text == "summary") return CaptureLevel::kSummary;
  if (text == "full") return CaptureLevel::kFull;
  throw InputError("unknown --capture level '" + text + "' (expected off, summary or full)");
}

const std::vector<std::string>& summary_metric_names() {
  static const std::vector<std::string> names = {"entropy",    "mass_top1pct", "mass_top5pct", "tokens95_frac",
                                                 "sink_share", "cos_mean",     "channel_cv"};
  return names;
}

LayerCapture capture_layer(const LayerPrefill& in, int64_t window, CaptureLevel level) {
  LayerCapture out;
  if (level == CaptureLevel::kOff) return out;
  const int64_t Hkv = in.keys.size(0), n = in.keys.size(1);
  // Window-mean attention per KV head (group mean), fp32 [Hkv, n].
  at::Tensor a = policies::window_attention(in, window).mean(2).mean(1);
  a = a / a.sum(-1, true).clamp_min(1e-30);
  at::Tensor sorted = std::get<0>(a.sort(-1, /*descending=*/true));
  at::Tensor cum = sorted.cumsum(-1);
  auto mass_at = [&](double frac) {
    const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(frac * n)));
    return cum.select(-1, std::min(k, n) - 1);
  };
  at::Tensor tokens95 = ((cum < 0.95).sum(-1).to(at::kFloat) + 1).clamp_max(n) / n;
  at::Tensor entropy = -(a * (a.clamp_min(1e-30)).log()).sum(-1);
  at::Tensor sink = a.narrow(-1, 0, std::min<int64_t>(4, n)).sum(-1);
  // Key geometry: cosine to the mean of the normalised keys (KeyDiff's anchor).
  at::Tensor k = in.keys.to(at::kFloat);
  at::Tensor kn = k / k.norm(2, {-1}, true).clamp_min(1e-12);
  at::Tensor cos = (kn * (kn.mean(1, true) / kn.mean(1, true).norm(2, {-1}, true).clamp_min(1e-12))).sum(-1);  // [Hkv, n]
  // Channel saliency w_tj = |q̄_j|·|k_tj| with q̄ the window-mean query, group mean of |q̄| (SPARK §4.2).
  const int64_t T = in.queries.size(0), H = in.queries.size(1), D = k.size(2), w = std::min(window, T);
  at::Tensor qbar = in.queries.narrow(0, T - w, w).to(at::kFloat).mean(0).abs().view({Hkv, H / Hkv, D}).mean(1);  // [Hkv, D]
  at::Tensor sal = qbar.unsqueeze(1) * k.abs();                                                                     // [Hkv, n, D]
  at::Tensor ch_mean = sal.mean(1), ch_cv = sal.std(1, /*unbiased=*/false) / ch_mean.clamp_min(1e-12);
  out.summary = at::stack({entropy, mass_at(0.01), mass_at(0.05), tokens95, sink, cos.mean(-1), ch_cv.mean(-1)}, 1)
                    .to(at::kCPU);
  if (level == CaptureLevel::kFull) {
    out.attention = a.to(at::kCPU);
    out.cos_to_mean = cos.to(at::kCPU);
    out.channel_mean = ch_mean.to(at::kCPU);
    out.channel_cv = ch_cv.to(at::kCPU);
  }
  (void)Hkv;
  return out;
}

}  // namespace kvscope
