// Helpers shared by the built-in policies: attention rows, GQA reduction, pooling, top-k, specs.
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "ops/snapkv_ops.h"
#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {

GqaReduce parse_gqa(const std::string& text) {
  if (text == "mean") return GqaReduce::kMean;
  if (text == "sum") return GqaReduce::kSum;
  if (text == "max") return GqaReduce::kMax;
  throw InputError("gqa reduction must be mean|sum|max (got '" + text + "')");
}

Pool parse_pool(const std::string& text) {
  if (text == "avg") return Pool::kAvg;
  if (text == "max") return Pool::kMax;
  throw InputError("pooling must be avg|max (got '" + text + "')");
}

void check_layer_prefill(const std::string& policy, const LayerPrefill& in, bool needs_queries) {
  if (!in.keys.defined() || in.keys.dim() != 3)
    throw InputError(policy + ": keys must be [n_head_kv, n_tok, head_dim]");
  if (!needs_queries) return;
  if (!in.queries.defined() || in.queries.dim() != 3)
    throw InputError(policy + ": queries must be [n_tok, n_head, head_dim]");
  const int64_t H = in.queries.size(1), Hkv = in.keys.size(0);
  if (Hkv == 0 || H % Hkv != 0 || in.queries.size(2) != in.keys.size(2))
    throw InputError(policy + ": queries [" + std::to_string(in.queries.size(0)) + ", " + std::to_string(H) + ", " +
                     std::to_string(in.queries.size(2)) + "] do not fit keys [" + std::to_string(Hkv) + ", " +
                     std::to_string(in.keys.size(1)) + ", " + std::to_string(in.keys.size(2)) + "]");
  if (in.queries.size(0) > in.keys.size(1))
    throw InputError(policy + ": more queries (" + std::to_string(in.queries.size(0)) + ") than keys (" +
                     std::to_string(in.keys.size(1)) + ")");
}

at::Tensor causal_attention_probs(const at::Tensor& q, const at::Tensor& keys, int64_t first_pos) {
  const int64_t t = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t Hkv = keys.size(0), m = keys.size(1), G = H / Hkv;
  at::Tensor qg = q.to(at::kFloat).permute({1, 0, 2}).reshape({Hkv, G * t, D});  // [Hkv, G*t, D], h = kv*G + g
  at::Tensor kt = keys.to(at::kFloat).transpose(1, 2);                           // [Hkv, D, m]
  // kvpress: matmul(q, k^T) / sqrt(head_dim), in the model dtype (fp32 here).
  at::Tensor s = at::bmm(qg, kt).div_(std::sqrt(static_cast<double>(D))).view({Hkv, G, t, m});
  if (m - 1 > first_pos) {  // some key lies after some query (never for the newest query alone)
    at::Tensor qi = at::arange(first_pos, first_pos + t, s.options().dtype(at::kLong)).unsqueeze(1);  // [t, 1]
    at::Tensor kj = at::arange(m, s.options().dtype(at::kLong)).unsqueeze(0);                         // [1, m]
    s.masked_fill_(kj > qi, -std::numeric_limits<float>::infinity());
  }
  return at::softmax(s, -1, at::kFloat);
}

at::Tensor window_attention(const LayerPrefill& in, int64_t window) {
  const int64_t n = in.keys.size(1), T = in.queries.size(0);
  const int64_t w = std::clamp<int64_t>(window, 0, T);
  at::Tensor q = in.queries.narrow(0, T - w, w);  // the last w queries, at key indices n - w .. n - 1
  return causal_attention_probs(q, in.keys, n - w);
}

at::Tensor reduce_groups(const at::Tensor& x, GqaReduce how) {
  switch (how) {
    case GqaReduce::kMean:
      return x.mean(1);
    case GqaReduce::kSum:
      return x.sum(1);
    case GqaReduce::kMax:
      return std::get<0>(x.max(1));
  }
  return x.mean(1);
}

at::Tensor pool_scores(const at::Tensor& x, int64_t kernel, Pool how) {
  if (kernel <= 1 || x.size(-1) == 0) return x;
  at::Tensor x3 = x.unsqueeze(1);  // [rows, 1, n] (N, C, L)
  at::Tensor y = how == Pool::kAvg
                     ? at::avg_pool1d(x3, {kernel}, {1}, {kernel / 2}, /*ceil_mode=*/false, /*count_include_pad=*/true)
                     : at::max_pool1d(x3, {kernel}, {1}, {kernel / 2});
  return y.squeeze(1);
}

std::vector<at::Tensor> topk_sorted_per_row(const at::Tensor& scores, int64_t k) {
  const int64_t rows = scores.size(0), n = scores.size(1);
  k = std::clamp<int64_t>(k, 0, n);
  std::vector<at::Tensor> out;
  out.reserve(rows);
  if (k == n) {
    for (int64_t r = 0; r < rows; ++r) out.push_back(at::arange(n, scores.options().dtype(at::kLong)));
    return out;
  }
  at::Tensor idx = std::get<0>(at::sort(std::get<1>(scores.topk(k, -1)), -1));  // [rows, k]
  for (int64_t r = 0; r < rows; ++r) out.push_back(idx[r].contiguous());
  return out;
}

// ---- SnapKV ------------------------------------------------------------------------------------

at::Tensor snapkv_scores(const LayerPrefill& in, const SnapKvParams& p) {
  const int64_t Hkv = in.keys.size(0), n = in.keys.size(1);
  const int64_t w = std::min<int64_t>(p.window, in.queries.size(0));
  at::Tensor out = at::full({Hkv, n}, kKeepScore, in.keys.options().dtype(at::kFloat));
  if (n - w <= 0) return out;  // every entry is inside the observation window
  // On the GPU (bf16 / fp16): the fused tensor-core kernels (ops/snapkv_ops.h), same formula.
  const ops::GroupReduce how = p.gqa == GqaReduce::kMean  ? ops::GroupReduce::kMean
                               : p.gqa == GqaReduce::kSum ? ops::GroupReduce::kSum
                                                          : ops::GroupReduce::kMax;
  const at::Tensor fused = ops::snapkv_window_scores(in.queries.narrow(0, in.queries.size(0) - w, w), in.keys, p.kernel,
                                                     p.pool == Pool::kMax, how);
  if (fused.defined()) {
    out.narrow(1, 0, n - w).copy_(fused);
    return out;
  }
  at::Tensor a = window_attention(in, w).narrow(3, 0, n - w);  // [Hkv, G, w, n-w]
  const int64_t G = a.size(1);
  at::Tensor s = a.mean(2).reshape({Hkv * G, n - w});  // kvpress: mean over the window rows
  s = pool_scores(s, p.kernel, p.pool).view({Hkv, G, n - w});
  out.narrow(1, 0, n - w).copy_(reduce_groups(s, p.gqa));
  return out;
}

std::vector<ParamSpec> snapkv_spec(const SnapKvParams& d, const std::string& ref) {
  return {
      int_param("window", 1, 1 << 20, std::to_string(d.window),
                "observation window: the last `window` prompt queries vote, and those entries are always kept "
                "(counted in the budget)",
                ref),
      int_param("kernel", 1, 1023, std::to_string(d.kernel),
                "pooling kernel along tokens (odd; 1 = no pooling), stride 1, padding kernel/2", ref),
      choice_param("pool", {"avg", "max"}, d.pool == Pool::kAvg ? "avg" : "max",
                   "pooling: avg (zero padding counted, as kvpress) or max", ref),
      choice_param("gqa", {"mean", "sum", "max"},
                   d.gqa == GqaReduce::kMean  ? "mean"
                   : d.gqa == GqaReduce::kSum ? "sum"
                                              : "max",
                   "how the G query heads of a KV group are combined (mean: SnapKV issue #22, Ada-KV §3.5)",
                   "Ada-KV (Feng et al. 2024) §3.5; kvpress SnapKVPress"),
  };
}

SnapKvParams parse_snapkv(const std::string& policy, const ParamValues& v) {
  SnapKvParams p;
  p.window = param_int(v, "window");
  p.kernel = param_int(v, "kernel");
  if (p.kernel % 2 == 0)
    throw InputError(policy + ": parameter 'kernel' = " + std::to_string(p.kernel) +
                     " must be odd (padding kernel/2 keeps the length)");
  p.pool = parse_pool(v.at("pool"));
  p.gqa = parse_gqa(v.at("gqa"));
  return p;
}

// ---- ParamSpec builders ------------------------------------------------------------------------

ParamSpec int_param(std::string key, double min, double max, std::string def, std::string help, std::string ref) {
  ParamSpec p;
  p.key = std::move(key);
  p.type = ParamType::kInt;
  p.min = min;
  p.max = max;
  p.default_value = std::move(def);
  p.help = std::move(help);
  p.paper_ref = std::move(ref);
  return p;
}

ParamSpec float_param(std::string key, double min, double max, std::string def, std::string help, std::string ref) {
  ParamSpec p = int_param(std::move(key), min, max, std::move(def), std::move(help), std::move(ref));
  p.type = ParamType::kFloat;
  return p;
}

ParamSpec bool_param(std::string key, std::string def, std::string help, std::string ref) {
  ParamSpec p;
  p.key = std::move(key);
  p.type = ParamType::kBool;
  p.default_value = std::move(def);
  p.help = std::move(help);
  p.paper_ref = std::move(ref);
  return p;
}

ParamSpec choice_param(std::string key, std::vector<std::string> choices, std::string def, std::string help,
                       std::string ref) {
  ParamSpec p;
  p.key = std::move(key);
  p.type = ParamType::kChoice;
  p.choices = std::move(choices);
  p.default_value = std::move(def);
  p.help = std::move(help);
  p.paper_ref = std::move(ref);
  return p;
}

}  // namespace kvscope::policies
