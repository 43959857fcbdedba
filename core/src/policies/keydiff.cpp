// "keydiff" scoring: KeyDiff (Park et al. 2025, arXiv 2504.15364), Eq. 8 (the efficient anchor form
// used in all its experiments; docs/methods.md §2.2): evict the keys closest in direction to the mean key.
//
//   μ_h        = mean_j ( k_{h,j} / ||k_{h,j}|| )         anchor=normalized (kvpress keydiff_press.py)
//              = mean_j k_{h,j}                          anchor=raw (the paper's "unnormalized keys")
//   score[h,j] = -cos(k_{h,j}, μ_h)
//
// Shapes: in.keys [n_head_kv, n_tok, D] (fp32 internally); returns fp32 [n_head_kv, n_tok]. No
// queries are needed, so the score works on whatever the cache holds (block-wise prefill).
//
// The block-wise procedure of the paper (§3, docs/methods.md §2.3: feed the prompt in blocks of M tokens,
// after each block cut the cache back to N, reserving a `recent` share of N for the newest tokens)
// is driven by the pipeline through prefill_block() (M) and recent_share(); score() ignores them.
//
// On CUDA (bf16 / fp16 / fp32 keys, D <= 256, a build with the kernels) the score is the fused kernel
// of kernels/key_scores.h (ops::keydiff_scores: the same formula, fp32 accumulation, K read twice);
// elsewhere the LibTorch ops below.
#include <ATen/ATen.h>

#include "ops/cuda_ops.h"
#include "ops/key_score_ops.h"
#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "KeyDiff (Park et al. 2025) Eq. 8, §3";

class KeyDiff : public ScoringBase {
 public:
  int64_t prefill_queries() const override { return 0; }
  explicit KeyDiff(const ParamValues& v)
      : ScoringBase("keydiff", v),
        normalized_(v.at("anchor") == "normalized"),
        block_(param_int(v, "block")),
        recent_(param_float(v, "recent")) {}
  int64_t prefill_block() const override { return block_; }
  double recent_share() const override { return recent_; }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("keydiff", in, /*needs_queries=*/false);
    if (use_kernel(in.keys)) return ops::keydiff_scores(in.keys, normalized_);
    at::Tensor k = in.keys.to(at::kFloat);  // [Hkv, n, D]
    // F.normalize(k, p=2, dim=-1): k / max(||k||, 1e-12)
    at::Tensor a = normalized_ ? k / k.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-12) : k;
    at::Tensor anchor = a.mean(1, /*keepdim=*/true).expand_as(k);  // [Hkv, n, D]
    return at::cosine_similarity(k, anchor, -1, 1e-8).neg_();      // [Hkv, n]
  }

 private:
  static bool use_kernel(const at::Tensor& keys) {
    const at::ScalarType t = keys.scalar_type();
    return keys.is_cuda() && ops::cuda_kernels_available() && keys.size(2) >= 1 && keys.size(2) <= 256 &&
           keys.size(0) <= 65535 && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
  }

  bool normalized_;
  int64_t block_;
  double recent_;
};

}  // namespace

PolicyRegistry::Entry keydiff_entry() {
  return {"keydiff",
          Stage::kScoring,
          {choice_param("anchor", {"normalized", "raw"}, "normalized",
                        "anchor: mean of L2-normalised keys (kvpress) or plain mean of the keys", kRef),
           int_param("block", 0, 1 << 20, "0",
                     "block-wise prefill block size M with a hard cache cap (0 = whole prompt, as kvpress; the "
                     "paper's runs: 128, preset keydiff-paper)",
                     "KeyDiff (Park et al. 2025) §3 / Eq. 6; the copy of the paper kvscope worked from does not "
                     "show the M of the main runs, and 128 is the value recalled from the original, unverified "
                     "(docs/methods.md §2.1)"),
           float_param("recent", 0, 0.9, "0",
                       "share of the cache budget N reserved for the most recent tokens (paper: 0, 0.1 or 0.2; read "
                       "by the pipeline)",
                       "KeyDiff (Park et al. 2025) sliding-window variant, docs/methods.md §2.2")},
          "keep keys least aligned with the mean key: -cos(k, mean k̂) (KeyDiff, Park et al. 2025 Eq. 8)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<KeyDiff>(v); },
          "negative cosine of the key to the mean key (KeyDiff Eq. 8): distinct keys rank high"};
}

}  // namespace kvscope::policies
