#pragma once
// Internal header of the scoring (S1) and budget-allocation (S2) policies: the always-keep score,
// attention-row helpers (causal prompt attention of H2O, window attention of SnapKV/PyramidKV/TOVA),
// GQA reduction, pooling, per-row top-k, the LayerPrefill checks, SnapKV scoring (shared by
// "snapkv", "pyramidkv" and "rocketkv-mt"), the ScoringBase / BudgetBase classes and the per-layer
// budget of "pyramid". Conventions follow NVIDIA kvpress 0.5.4 (kvpress/presses/*.py) where the
// golden references of assets/models/pycode-16m were made with it.
//
// Defined in common.cpp (pyramid_layer_budget in pyramid.cpp). Used by the scorers and budgets
// (snapkv, pyramidkv, streamingllm, h2o, tova, knorm, keydiff, random, uniform, pyramid, adakv
// .cpp), by spark.cpp and think.cpp (check_layer_prefill, GQA reduction), rocketkv_mt.cpp (SnapKV
// scores), core/src/capture.cpp (window_attention) and the tests test_cuda_snapkv_scores.cpp and
// test_policy_conformance.cpp.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/policy.h"

namespace kvscope::policies {

/// Score of entries that must always stay (observation window, sinks, recent tokens): the largest
/// finite fp32, so any top-k selection takes them first (the ScoringPolicy contract in policy.h).
/// kvpress pads with `scores.max() + 1` instead; both rank these entries above every real score.
inline constexpr float kKeepScore = std::numeric_limits<float>::max();

/// How the G query heads of one KV group are combined into one score per KV head.
enum class GqaReduce { kMean, kSum, kMax };
GqaReduce parse_gqa(const std::string& text);  ///< "mean" | "sum" | "max"

/// 1-D smoothing of scores along the token axis (SnapKV §4.2 "clustering via pooling").
enum class Pool { kAvg, kMax };
Pool parse_pool(const std::string& text);  ///< "avg" | "max"

/// Softmax attention probabilities (fp32) of some prompt queries over the keys before them.
/// q: [t, n_head, head_dim] queries whose row i sits at key index `first_pos + i`;
/// keys: [n_head_kv, m, head_dim] with m >= first_pos + t (keys past m are not looked at).
/// Logits = q·k / sqrt(head_dim) in fp32, keys after the query masked (causal), softmax in fp32.
/// Returns fp32 [n_head_kv, G, t, m], query head h = kv_head * G + g (HF repeat_kv order).
/// Vaswani et al. 2017 §3.2.1 (scaled dot-product attention); Ainslie et al. 2023 (GQA).
at::Tensor causal_attention_probs(const at::Tensor& q, const at::Tensor& keys, int64_t first_pos);

/// Attention of the last `window` queries of `in` over all n_tok keys, causal inside the window
/// (kvpress SnapKVPress.compute_window_attention). in.queries may hold only the last T <= n_tok
/// queries (block-wise prefill); they sit at key indices n_tok - T .. n_tok - 1. `window` is
/// clamped to T. Returns fp32 [n_head_kv, G, window, n_tok].
at::Tensor window_attention(const LayerPrefill& in, int64_t window);

/// x: [n_head_kv, G, n] -> [n_head_kv, n] by mean | sum | max over G.
at::Tensor reduce_groups(const at::Tensor& x, GqaReduce how);

/// x: [rows, n] -> [rows, n]: avg_pool1d / max_pool1d, kernel `kernel` (odd), stride 1, padding
/// kernel/2; avg counts the zero padding (PyTorch count_include_pad=True, as kvpress calls it).
at::Tensor pool_scores(const at::Tensor& x, int64_t kernel, Pool how);

/// Sorted int64 indices of the k largest entries of each row of scores [rows, n] (k clamped to
/// [0, n]), one tensor per row, on the scores' device.
std::vector<at::Tensor> topk_sorted_per_row(const at::Tensor& scores, int64_t k);

/// Checks the LayerPrefill shapes policies rely on; throws InputError("<policy>: ...").
void check_layer_prefill(const std::string& policy, const LayerPrefill& in, bool needs_queries);

// ---- SnapKV scoring, shared by "snapkv", "pyramidkv" and "rocketkv-mt" --------------------------

struct SnapKvParams {
  int64_t window = 32;  ///< observation window w: the last w prompt queries vote; they are always kept
  int64_t kernel = 7;   ///< pooling kernel (odd)
  Pool pool = Pool::kMax;
  GqaReduce gqa = GqaReduce::kMean;
};
/// SnapKV scores (Li et al. 2024, §4.1 voting + §4.2 pooling), in kvpress's order:
/// A = window_attention(in, w) [Hkv, G, w, n]; drop the window columns -> [Hkv, G, w, n-w];
/// mean over the w rows; pool along tokens per query head; reduce over G; append the window with
/// kKeepScore. Returns fp32 [n_head_kv, n_tok]. If n_tok <= w every entry is in the window.
at::Tensor snapkv_scores(const LayerPrefill& in, const SnapKvParams& p);
/// The ParamSpec table of a SnapKV-style scorer with the given defaults and paper reference.
std::vector<ParamSpec> snapkv_spec(const SnapKvParams& defaults, const std::string& paper_ref);
/// Parses resolved values of a snapkv_spec table; throws InputError for an even kernel.
SnapKvParams parse_snapkv(const std::string& policy, const ParamValues& v);

// ---- Base classes holding name + resolved params -----------------------------------------------

/// A policy of interface `Base` that stores its registered name and resolved parameters.
template <class Base>
class NamedPolicy : public Base {
 public:
  NamedPolicy(std::string name, ParamValues params) : name_(std::move(name)), params_(std::move(params)) {}
  std::string name() const override { return name_; }
  ParamValues params() const override { return params_; }

 private:
  std::string name_;
  ParamValues params_;
};
using ScoringBase = NamedPolicy<ScoringPolicy>;
using BudgetBase = NamedPolicy<BudgetPolicy>;
using LayerBudgetBase = NamedPolicy<LayerBudgetPolicy>;

/// Per-layer kept count of the "pyramid" budget (kvpress PyramidKVPress.get_layer_budget with
/// n_tok·(1 - ratio) replaced by n_kept); see pyramid.cpp for the formula. window < 0 is invalid.
int64_t pyramid_layer_budget(int64_t n_tok, int64_t n_kept, int64_t window, double beta, int64_t layer,
                             int64_t n_layer);

}  // namespace kvscope::policies
