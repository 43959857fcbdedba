#include "kvscope/core/capture.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/kv_cache.h"
#include "ops/capture_ops.h"
#include "ops/snapkv_ops.h"
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

namespace {

/// Attention statistics (the first five summary columns) of window-mean attention a [Hkv, n]
/// (fp32, rows summing to 1), by sort and cumulative sum: the LibTorch path and the kernels' reference.
at::Tensor attention_stats_torch(const at::Tensor& a) {
  const int64_t n = a.size(1);
  at::Tensor sorted = std::get<0>(a.sort(-1, /*descending=*/true));
  at::Tensor cum = sorted.cumsum(-1);
  auto mass_at = [&](double frac) {
    const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(frac * n)));
    return cum.select(-1, std::min(k, n) - 1);
  };
  at::Tensor tokens95 = ((cum < 0.95).sum(-1).to(at::kFloat) + 1).clamp_max(n) / n;
  at::Tensor entropy = -(a * (a.clamp_min(1e-30)).log()).sum(-1);
  at::Tensor sink = a.narrow(-1, 0, std::min<int64_t>(4, n)).sum(-1);
  return at::stack({entropy, mass_at(0.01), mass_at(0.05), tokens95, sink}, 1);
}

}  // namespace

LayerCapture capture_layer(const LayerPrefill& in, int64_t window, CaptureLevel level) {
  LayerCapture out;
  if (level == CaptureLevel::kOff) return out;
  const int64_t Hkv = in.keys.size(0), n = in.keys.size(1);
  const int64_t T = in.queries.size(0), H = in.queries.size(1), D = in.keys.size(2), w = std::min(window, T);
  const at::Tensor& keys = in.keys;
  // On CUDA the statistics come from kernels beside the fused SnapKV scorers (kernels/head_stats.h):
  // the window-voting kernels over every column give a, then one radix-select pass per head and
  // one pass over the keys; nothing waits on the host. Elsewhere: LibTorch, the same formulas.
  const at::Tensor window_queries = in.queries.narrow(0, T - w, w);
  const bool kernels = ops::capture_stats_supported(keys) && ops::window_vote_supported(window_queries, keys);
  // Window-mean attention per KV head (group mean), fp32 [Hkv, n], rows summing to 1.
  at::Tensor a = kernels ? ops::window_vote(window_queries, keys, /*all_columns=*/true).mean(1)
                         : policies::window_attention(in, window).mean(2).mean(1);
  if (!kernels) a = a / a.sum(-1, true).clamp_min(1e-30);
  const at::Tensor attention = kernels ? ops::attention_stats(a, 4) : attention_stats_torch(a);
  // Key geometry and channel saliency in one pass over the keys, no [Hkv, n, D] fp32 copy:
  //   cos_mean   = mean_t cos(k_t, m̂) with m̂ the mean normalised key = ‖mean_t k_t/‖k_t‖‖ (KeyDiff Eq. 8)
  //   channel_cv = mean_j std_t(w_tj) / mean_t(w_tj), w_tj = |q̄_j|·|k_tj| (SPARK §4.2): |q̄_j| cancels,
  //                CV_j = sqrt(E[k_j²] - E[|k_j|]²) / E[|k_j|] (0 where q̄_j = 0)
  at::Tensor mean_kn, abs_mean, sq_mean, inv_norm;  // [Hkv, D] fp32
  if (kernels) {
    const at::Tensor sums = ops::key_stats(keys) / double(std::max<int64_t>(n, 1));  // [Hkv, 3, D]
    mean_kn = sums.select(1, 0);
    abs_mean = sums.select(1, 1);
    sq_mean = sums.select(1, 2);
  } else {
    inv_norm = at::linalg_vector_norm(keys, 2, {-1}, false, at::kFloat).clamp_min(1e-12).reciprocal();
    mean_kn = at::bmm(inv_norm.to(keys.scalar_type()).unsqueeze(1), keys).squeeze(1).to(at::kFloat) / double(n);
    abs_mean = at::linalg_vector_norm(keys, 1, {1}, false, at::kFloat) / double(n);
    sq_mean = at::linalg_vector_norm(keys, 2, {1}, false, at::kFloat).square() / double(n);
  }
  const at::Tensor cos_mean = at::linalg_vector_norm(mean_kn, 2, {-1}, false, at::kFloat);
  at::Tensor qbar = window_queries.to(at::kFloat).mean(0).abs().view({Hkv, H / Hkv, D}).mean(1);  // [Hkv, D]
  const at::Tensor ch_mean = qbar * abs_mean;
  const at::Tensor ch_cv =
      at::where(ch_mean > 1e-12, (sq_mean - abs_mean.square()).clamp_min(0).sqrt() / abs_mean.clamp_min(1e-30),
                at::zeros_like(ch_mean));
  // Stays on the device: generate() brings every layer's capture to the host once, after the prefill.
  out.summary = at::cat({attention, cos_mean.unsqueeze(1), ch_cv.mean(-1, true)}, 1);
  if (level == CaptureLevel::kFull) {
    const at::Tensor k = keys.to(at::kFloat);
    if (!inv_norm.defined())
      inv_norm = at::linalg_vector_norm(k, 2, {-1}, false, at::kFloat).clamp_min(1e-12).reciprocal();
    const at::Tensor kn = k * inv_norm.unsqueeze(-1);
    out.attention = kernels ? a / a.sum(-1, true).clamp_min(1e-30) : a;
    out.cos_to_mean = (kn * (mean_kn / mean_kn.norm(2, {-1}, true).clamp_min(1e-12)).unsqueeze(1)).sum(-1);
    out.channel_mean = ch_mean;
    out.channel_cv = ch_cv;
    // 2-D PCA per KV head: top-2 eigenvectors of the key covariance (on CUDA by the principal_axes
    // kernel, no host round trip; elsewhere by eigh in fp64).
    at::Tensor centred = k - k.mean(1, true);                                                  // [Hkv, n, D]
    at::Tensor cov = at::bmm(centred.transpose(1, 2), centred) / std::max<int64_t>(n - 1, 1);  // [Hkv, D, D]
    const at::Tensor axes = kernels ? ops::principal_axes(cov)
                                    : std::get<1>(at::linalg_eigh(cov.to(at::kDouble)))  // ascending eigenvalues
                                          .to(at::kFloat)
                                          .narrow(2, D - 2, 2)
                                          .flip({2});
    out.keys_pca = at::bmm(centred, axes);  // [Hkv, n, 2]
  }
  return out;
}

void record_policy_scores(LayerCapture& capture, const at::Tensor& scores, const at::Tensor& positions,
                          int64_t n_prompt) {
  if (!capture.policy_score.defined())
    capture.policy_score = at::full({scores.size(0), n_prompt}, std::numeric_limits<float>::quiet_NaN(),
                                    scores.options().dtype(at::kFloat));
  const at::Tensor pos = positions.to(scores.device(), at::kLong);
  const at::Tensor in_prompt = pos < n_prompt;
  // Entries past the prompt (a later block's appended tokens cannot be, but be safe) land in a
  // scratch column n_prompt that is dropped.
  at::Tensor padded = at::cat({capture.policy_score, capture.policy_score.narrow(1, 0, 1)}, 1);
  padded.scatter_(1, at::where(in_prompt, pos, at::full_like(pos, n_prompt)), scores.to(at::kFloat));
  capture.policy_score = padded.narrow(1, 0, n_prompt).contiguous();
}

void captures_to_host(std::vector<LayerCapture>& captures) {
  std::vector<at::Tensor> summaries;
  for (const LayerCapture& c : captures)
    if (c.summary.defined()) summaries.push_back(c.summary);
  if (summaries.empty()) return;
  // One device-to-host copy for every layer's summary; the full level's arrays one by one.
  const at::Tensor host = at::stack(summaries).to(at::kCPU);
  int64_t i = 0;
  auto cpu = [](at::Tensor& t) {
    if (t.defined()) t = t.to(at::kCPU);
  };
  for (LayerCapture& c : captures) {
    if (c.summary.defined()) c.summary = host[i++];
    cpu(c.attention);
    cpu(c.cos_to_mean);
    cpu(c.channel_mean);
    cpu(c.channel_cv);
    cpu(c.keys_pca);
    cpu(c.policy_score);
  }
}

}  // namespace kvscope

namespace kvscope {

TopkUnion::TopkUnion(int64_t n_layer, int64_t n_head, int64_t k, int64_t max_positions, c10::Device device) : k_(k) {
  for (int64_t l = 0; l < n_layer; ++l)
    seen_.push_back(
        at::zeros({n_head, std::max<int64_t>(max_positions, 1)}, at::TensorOptions(device).dtype(at::kBool)));
}

void TopkUnion::add(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  const LayerKv& L = cache.layer(layer);
  const int64_t H = q.size(0), Hkv = cache.n_head_kv(), G = H / Hkv, D = q.size(1);
  at::Tensor& seen = seen_.at(layer);
  if (L.uniform()) {  // every KV head at once, in the cache's dtype
    const at::Tensor keys = cache.keys(layer), pos = cache.positions(layer);  // [Hkv, n, D], [Hkv, n]
    const int64_t n = keys.size(1), k = std::min(k_, n);
    if (k == 0) return;
    const at::Tensor logits = at::bmm(q.view({Hkv, G, D}).to(keys.scalar_type()), keys.transpose(1, 2));  // [Hkv, G, n]
    const at::Tensor idx = std::get<1>(logits.topk(k, -1)).reshape({Hkv, G * k});
    const at::Tensor picked = pos.gather(1, idx).reshape({H, k}).to(seen.device());
    seen.scatter_(1, picked.clamp_max(seen.size(1) - 1), true);
    return;
  }
  for (int64_t h = 0; h < Hkv; ++h) {
    const at::Tensor keys = cache.head_keys(layer, h), pos = cache.head_positions(layer, h);
    const int64_t n = keys.size(0), k = std::min(k_, n);
    if (k == 0) continue;
    at::Tensor logits = at::matmul(q.narrow(0, h * G, G).to(at::kFloat), keys.to(at::kFloat).t());  // [G, n]
    at::Tensor picked = pos.index_select(0, std::get<1>(logits.topk(k, -1)).flatten()).view({G, k});
    seen.narrow(0, h * G, G).scatter_(1, picked.to(seen.device()).clamp_max(seen.size(1) - 1), true);
  }
}

at::Tensor TopkUnion::unique_counts() const {
  std::vector<at::Tensor> rows;
  for (const at::Tensor& s : seen_) rows.push_back(s.sum(1));
  return at::stack(rows).to(at::kCPU, at::kLong);
}

}  // namespace kvscope
