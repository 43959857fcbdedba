#include "kvscope/core/capture.h"

#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/kv_cache.h"
#include "policies/scoring.h"

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
  at::Tensor cos =
      (kn * (kn.mean(1, true) / kn.mean(1, true).norm(2, {-1}, true).clamp_min(1e-12))).sum(-1);  // [Hkv, n]
  // Channel saliency w_tj = |q̄_j|·|k_tj| with q̄ the window-mean query, group mean of |q̄| (SPARK §4.2).
  const int64_t T = in.queries.size(0), H = in.queries.size(1), D = k.size(2), w = std::min(window, T);
  at::Tensor qbar =
      in.queries.narrow(0, T - w, w).to(at::kFloat).mean(0).abs().view({Hkv, H / Hkv, D}).mean(1);  // [Hkv, D]
  at::Tensor sal = qbar.unsqueeze(1) * k.abs();                                                     // [Hkv, n, D]
  at::Tensor ch_mean = sal.mean(1), ch_cv = sal.std(1, /*unbiased=*/false) / ch_mean.clamp_min(1e-12);
  out.summary =
      at::stack({entropy, mass_at(0.01), mass_at(0.05), tokens95, sink, cos.mean(-1), ch_cv.mean(-1)}, 1).to(at::kCPU);
  if (level == CaptureLevel::kFull) {
    out.attention = a.to(at::kCPU);
    out.cos_to_mean = cos.to(at::kCPU);
    out.channel_mean = ch_mean.to(at::kCPU);
    out.channel_cv = ch_cv.to(at::kCPU);
    // 2-D PCA per KV head: top-2 eigenvectors of the key covariance.
    at::Tensor centred = k - k.mean(1, true);                                                  // [Hkv, n, D]
    at::Tensor cov = at::bmm(centred.transpose(1, 2), centred) / std::max<int64_t>(n - 1, 1);  // [Hkv, D, D]
    at::Tensor vecs = std::get<1>(at::linalg_eigh(cov.to(at::kDouble))).to(at::kFloat);        // ascending eigenvalues
    out.keys_pca = at::bmm(centred, vecs.narrow(2, D - 2, 2).flip({2})).to(at::kCPU);          // [Hkv, n, 2]
  }
  (void)Hkv;
  return out;
}

}  // namespace kvscope

namespace kvscope {

void TopkUnion::add(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  const LayerKv& L = cache.layer(layer);
  const int64_t H = q.size(0), Hkv = cache.n_head_kv(), G = H / Hkv;
  for (int64_t h = 0; h < Hkv; ++h) {
    const at::Tensor keys = cache.head_keys(layer, h), pos = cache.head_positions(layer, h);
    const int64_t n = keys.size(0), k = std::min(k_, n);
    if (k == 0) continue;
    at::Tensor logits = at::matmul(q.narrow(0, h * G, G).to(at::kFloat), keys.to(at::kFloat).t());  // [G, n]
    at::Tensor picked = pos.index_select(0, std::get<1>(logits.topk(k, -1)).flatten()).view({G, k}).to(at::kCPU);
    const int64_t max_pos = picked.max().item<int64_t>() + 1;
    at::Tensor& seen = seen_[layer];
    if (!seen.defined() || seen.size(1) < max_pos) {
      at::Tensor grown =
          at::zeros({n_head_, std::max<int64_t>(max_pos, 2 * (seen.defined() ? seen.size(1) : 0))}, at::kBool);
      if (seen.defined()) grown.narrow(1, 0, seen.size(1)).copy_(seen);
      seen = grown;
    }
    seen.narrow(0, h * G, G).scatter_(1, picked, true);
  }
  (void)L;
}

at::Tensor TopkUnion::unique_counts() const {
  at::Tensor out = at::zeros({int64_t(seen_.size()), n_head_}, at::kLong);
  for (size_t l = 0; l < seen_.size(); ++l)
    if (seen_[l].defined()) out[int64_t(l)].copy_(seen_[l].sum(1));
  return out;
}

}  // namespace kvscope
