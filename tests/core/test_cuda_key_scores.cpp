// The fused prefill-side key scorers (ops/key_score_ops.h: KeyDiff Eq. 8 scores, SPARK fixed-mode
// channel pruning) against their fp32 LibTorch references, and the references against the
// policies' own CPU paths (keydiff.cpp, spark.cpp). The GPU tests are skipped without a CUDA device
// or without the kernels in the build; the KeyScoreRefs tests run anywhere.
//
// Pass rule (as test_cuda_kernels.cpp), per output: max|kernel - ref32| <= 2 * max|baseline - ref32|
// + floor, baseline = the same op by plain LibTorch in the dtype, floor = one ulp of the dtype (1e-5
// for fp32) times max|ref32|. SPARK masks must equal the reference's except in rows whose T-th and
// (T+1)-th largest saliencies are exactly equal (a tie at the threshold), and must always keep
// exactly T channels of maximal saliency.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/cuda_ops.h"
#include "../../core/src/ops/key_score_ops.h"
#include "kvscope/core/kv_cache.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "policies/channel_pruning.h"
#include "policy_registry.h"
#include "small_config.h"

namespace kvscope {
namespace {

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

std::string name(at::ScalarType t) { return t == at::kFloat ? "fp32" : t == at::kBFloat16 ? "bf16" : "fp16"; }

double ulp(at::ScalarType t) { return t == at::kFloat ? 1e-5 : t == at::kBFloat16 ? 1.0 / 256 : 1.0 / 2048; }

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

void expect_close(const at::Tensor& got, const at::Tensor& ref, const at::Tensor& baseline, at::ScalarType dtype,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), ref.sizes()) << what;
  if (got.numel() == 0) return;
  ASSERT_TRUE(at::isfinite(got.to(at::kFloat)).all().item<bool>()) << what << ": non-finite output (unwritten?)";
  // A 16-bit baseline can be NaN where an eps underflows (fp16: cosine_similarity's 1e-8 is 0, so a
  // zero key gives 0/0); such entries are left out of the baseline's error.
  const at::Tensor b32 = baseline.to(at::kFloat);
  const double err = max_abs_diff(got, ref);
  const double base =
      (b32 - ref.to(at::kFloat)).abs().masked_fill(at::isfinite(b32).logical_not(), 0.0f).max().item<double>();
  const double floor = ulp(dtype) * std::max(ref.abs().max().item<double>(), 1e-6);
  EXPECT_LE(err, 2 * base + floor) << what << ": kernel error " << err << ", LibTorch " << name(dtype) << " error "
                                   << base << ", floor " << floor;
}

const PolicyRegistry& registry() { return test::builtin_registry(); }

/// k̂ of (layer, kv_head) as the decode logits see it: head_logits with the identity as the query
/// group gives k̂ᵀ / sqrt(D) + bias, exact for D = 64 (a power-of-two scale) and a zero bias.
at::Tensor masked_keys(const policies::ChannelPruningBase& p, int64_t layer, int64_t kv_head, const KvCache& cache) {
  const int64_t D = cache.head_dim();
  const at::Tensor eye = at::eye(D, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor s = p.head_logits(layer, kv_head, eye, cache);  // [D, n]
  return s.sub(p.recovery_bias(layer, kv_head).unsqueeze(0).mul(1.0 / std::sqrt(double(D))))
      .mul(std::sqrt(double(D)))
      .t();
}

/// Keys as KvCache::keys(layer) hands them to a scoring policy: [Hkv, n, D] inside a buffer of
/// `cap` >= n rows per head (and rows of D + pad elements), so head and row strides are not n*D / D.
at::Tensor strided_keys(int64_t hkv, int64_t n, int64_t D, int64_t cap, int64_t pad, const at::TensorOptions& o) {
  const at::Tensor buf = at::randn({hkv, cap, D + pad}, o);
  // A shared direction, so the anchor is not ~0 and the scores spread over [-1, 1].
  buf.add_(at::randn({D + pad}, o).mul_(0.7));
  return buf.narrow(1, 0, n).narrow(2, 0, D);
}

// ---- the references are the policies' LibTorch paths (no GPU needed) ---------------------------------

TEST(KeyScoreRefs, KeyDiffReferenceIsThePolicyScoreOnCpu) {
  const ModelConfig cfg = test::small_config(1, 3, 2, 64);
  at::manual_seed(11);
  for (const std::string anchor : {"normalized", "raw"})
    for (int64_t n : {1, 37, 300}) {
      SCOPED_TRACE("anchor=" + anchor + " n=" + std::to_string(n));
      const at::Tensor keys = strided_keys(3, n, 64, n + 5, 0, at::TensorOptions().dtype(at::kFloat));
      keys[1][0].zero_();  // an all-zero key: the eps clamps
      const auto pol = registry().make("keydiff", {{"anchor", anchor}});
      const auto* scorer = dynamic_cast<const ScoringPolicy*>(pol.get());
      ASSERT_NE(scorer, nullptr);
      const LayerPrefill in{cfg, 0, at::Tensor(), keys, keys};
      const at::Tensor got = scorer->score(in);
      const at::Tensor ref = ops::ref::keydiff_scores(keys, anchor == "normalized");
      ASSERT_EQ(got.sizes(), ref.sizes());
      EXPECT_TRUE(at::equal(got, ref));
      EXPECT_TRUE(at::isfinite(ref).all().item<bool>());
      // -cos lies in [-1, 1], and the formula of key_scores.h holds (norms clamped one by one).
      EXPECT_LE(ref.abs().max().item<double>(), 1.0 + 1e-6);
      const at::Tensor a = anchor == "normalized" ? keys / keys.norm(2, {-1}, true).clamp_min(1e-12) : keys;
      const at::Tensor mu = a.mean(1, true);
      const at::Tensor hand =
          -(keys * mu).sum(-1) / (keys.norm(2, {-1}).clamp_min(1e-8) * mu.norm(2, {-1}).clamp_min(1e-8));
      EXPECT_LT((hand - ref).abs().max().item<double>(), 1e-5);
    }
}

/// A one-layer cache after a ragged eviction (head 1 keeps 13 of 24 entries), the prompt queries,
/// and the SPARK policy prefilled on it; checks the references against the policy's stores.
void check_spark_reference(at::ScalarType dt, const std::string& recovery, const std::string& sign) {
  SCOPED_TRACE(name(dt) + " recovery=" + recovery + " sign=" + sign);
  const ModelConfig cfg = test::small_config(1, 2, 2, 64);
  const int64_t n_tok = 24, W = 8, D = cfg.head_dim, G = cfg.n_head / cfg.n_head_kv;
  at::manual_seed(1234);
  KvCache cache(cfg, n_tok + 4, c10::Device(c10::kCPU), dt);
  const at::Tensor k = at::randn({cfg.n_head_kv, n_tok, D}).to(dt), v = at::randn({cfg.n_head_kv, n_tok, D}).to(dt);
  cache.append(0, k, v, at::arange(n_tok, at::kLong));
  cache.advance_position(n_tok);
  const std::vector<int64_t> some = {0, 1, 3, 4, 6, 8, 9, 12, 15, 17, 20, 22, 23};
  cache.retain(0, {at::arange(4, n_tok, at::kLong), at::tensor(some, at::kLong)}, 4);
  const at::Tensor queries = at::randn({n_tok, cfg.n_head, D}).to(dt);

  const double ratio = 0.7;
  auto pol = registry().make(
      "spark",
      {{"ratio", "0.7"}, {"window", std::to_string(W)}, {"recovery", recovery}, {"sign", sign}, {"mode", "fixed"}});
  auto* p = dynamic_cast<policies::ChannelPruningBase*>(pol.get());
  ASSERT_NE(p, nullptr);
  p->configure(RunBudget{}, cfg);
  std::vector<at::Tensor> before;  // the retained keys as they were: the cache holds them compactly next
  for (int64_t h = 0; h < cfg.n_head_kv; ++h) before.push_back(cache.head_keys(0, h).clone());
  p->on_prefill(0, LayerPrefill{cfg, 0, queries, k, v}, cache);

  // a = mean over the group of |mean of the window queries| (gqa=mean, query=mean).
  const at::Tensor a = queries.narrow(0, n_tok - W, W).to(at::kFloat).mean(0).abs().view({cfg.n_head_kv, G, D}).mean(1);
  const int64_t T = policies::kept_channels(ratio, D);
  const bool refill = recovery == "degenerate" && sign == "key";
  for (int64_t h = 0; h < cfg.n_head_kv; ++h) {
    SCOPED_TRACE("kv head " + std::to_string(h));
    const at::Tensor& kh = before[h];
    const ops::SparkPruned r = ops::ref::spark_prune_fixed(kh, a[h], T, refill, dt);
    EXPECT_TRUE(at::equal(r.mask, p->channel_mask(0, h, cache)));
    const at::Tensor bias = p->recovery_bias(0, h);
    if (recovery == "degenerate" && !refill)
      EXPECT_TRUE(at::equal(r.pruned_sum, bias));
    else
      EXPECT_EQ(bias.abs().max().item<double>(), 0.0);
    const at::Tensor mk = masked_keys(*p, 0, h, cache);
    if (bias.abs().max().item<double>() == 0.0)
      EXPECT_TRUE(at::equal(r.masked_k, mk));
    else
      EXPECT_LT(max_abs_diff(r.masked_k, mk), 1e-5);
    // The fp32 reference differs from the dtype one only by the refill's rounding.
    const ops::SparkPruned r32 = ops::ref::spark_prune_fixed(kh, a[h], T, refill);
    EXPECT_TRUE(at::equal(r32.mask, r.mask));
    EXPECT_LE(max_abs_diff(r32.masked_k, r.masked_k),
              ulp(dt) * std::max(r32.masked_k.abs().max().item<double>(), 1e-6));
  }
}

TEST(KeyScoreRefs, SparkReferenceIsThePolicyPathOnCpu) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    check_spark_reference(dt, "degenerate", "key");
    check_spark_reference(dt, "degenerate", "positive");
    check_spark_reference(dt, "zero", "key");
  }
}

TEST(KeyScoreRefs, ReferencesRejectBadArguments) {
  EXPECT_THROW(ops::ref::keydiff_scores(at::randn({4, 8}), true), std::invalid_argument);
  EXPECT_THROW(ops::ref::spark_prune_fixed(at::randn({4, 8}), at::rand({7}), 2, false), std::invalid_argument);
  EXPECT_THROW(ops::ref::spark_prune_fixed(at::randn({4, 8}), at::rand({8}), 9, false), std::invalid_argument);
  EXPECT_THROW(ops::ref::spark_prune_fixed(at::randn({4, 8}), at::rand({8}), 2, false, at::kHalf),
               std::invalid_argument);
}

TEST(KeyScoreRefs, AdaptersThrowWithoutTheKernels) {
  if (ops::cuda_kernels_available()) GTEST_SKIP() << "built with the CUDA kernels";
  EXPECT_THROW(ops::keydiff_scores(at::randn({1, 4, 8}), true), std::runtime_error);
  EXPECT_THROW(ops::spark_prune_fixed(at::randn({4, 8}), at::rand({8}), 2, false), std::runtime_error);
}

// ---- the kernels ------------------------------------------------------------------------------------

class CudaKeyScores : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
  at::TensorOptions opts(at::ScalarType t) const { return at::TensorOptions().device(at::kCUDA).dtype(t); }
};

TEST_F(CudaKeyScores, KeyDiffMatchesReference) {
  at::manual_seed(2024);
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 128})
      for (int64_t hkv : {1, 3})
        for (int64_t n : {1, 37, 1000, 32768})
          for (bool normalized : {true, false}) {
            const std::string what = "keydiff " + name(dt) + " D=" + std::to_string(D) + " Hkv=" + std::to_string(hkv) +
                                     " n=" + std::to_string(n) + (normalized ? " normalized" : " raw");
            // n = 37: rows of D + 1 elements (scalar loads); otherwise aligned rows (vector loads).
            const at::Tensor keys = strided_keys(hkv, n, D, n + 7, n == 37 ? 1 : 0, opts(dt));
            if (n > 2) keys[hkv - 1][n / 2].zero_();  // a zero key: the eps clamps
            const at::Tensor ref = ops::ref::keydiff_scores(keys, normalized);
            const at::Tensor base = ops::ref::keydiff_scores(keys, normalized, dt);
            const at::Tensor got = ops::keydiff_scores(keys, normalized);
            EXPECT_EQ(got.scalar_type(), at::kFloat) << what;
            EXPECT_TRUE(got.is_contiguous()) << what;
            expect_close(got, ref, base, dt, what);
          }
}

TEST_F(CudaKeyScores, KeyDiffEdgeShapes) {
  // n = 0 and Hkv = 0: empty results; a head_dim that is not a multiple of 32 (partial lanes).
  EXPECT_EQ(ops::keydiff_scores(at::randn({2, 0, 64}, opts(at::kBFloat16)), true).sizes(), (at::IntArrayRef{2, 0}));
  EXPECT_EQ(ops::keydiff_scores(at::randn({0, 5, 64}, opts(at::kBFloat16)), true).sizes(), (at::IntArrayRef{0, 5}));
  for (int64_t D : {1, 40, 96, 200, 256}) {
    const at::Tensor keys = strided_keys(2, 333, D, 340, 0, opts(at::kFloat));
    const at::Tensor ref = ops::ref::keydiff_scores(keys, true);
    expect_close(ops::keydiff_scores(keys, true), ref, ref, at::kFloat, "keydiff D=" + std::to_string(D));
  }
}

/// Rows whose kept-th and (kept+1)-th largest saliencies are equal (the mask may differ there).
at::Tensor tie_rows(const at::Tensor& w, int64_t kept) {
  const int64_t D = w.size(1);
  if (kept <= 0 || kept >= D) return at::zeros({w.size(0)}, w.options().dtype(at::kBool));
  const at::Tensor s = std::get<0>(w.sort(-1, /*descending=*/true));
  return s.select(1, kept - 1).eq(s.select(1, kept));
}

void check_spark(const ops::SparkPruned& got, const at::Tensor& k, const at::Tensor& a, int64_t kept, bool refill,
                 at::ScalarType dt, const std::string& what) {
  const int64_t n = k.size(0), D = k.size(1);
  const ops::SparkPruned ref = ops::ref::spark_prune_fixed(k, a, kept, refill);
  const ops::SparkPruned base = ops::ref::spark_prune_fixed(k, a, kept, refill, dt);
  ASSERT_EQ(got.mask.sizes(), (at::IntArrayRef{n, D})) << what;
  ASSERT_EQ(got.mask.scalar_type(), at::kBool) << what;
  ASSERT_EQ(got.masked_k.scalar_type(), dt) << what;
  ASSERT_EQ(got.pruned_sum.sizes(), (at::IntArrayRef{n})) << what;
  if (n == 0) return;
  // Exactly `kept` channels per entry, each at least as salient as every pruned one.
  const at::Tensor w = k.to(at::kFloat).abs().mul(a);
  EXPECT_TRUE(got.mask.sum(-1).eq(kept).all().item<bool>()) << what;
  if (kept > 0 && kept < D) {
    const at::Tensor min_kept = std::get<0>(w.masked_fill(got.mask.logical_not(), INFINITY).min(-1));
    const at::Tensor max_pruned = std::get<0>(w.masked_fill(got.mask, -1.0f).max(-1));
    EXPECT_TRUE(min_kept.ge(max_pruned).all().item<bool>()) << what;
  }
  // The same mask as at::topk wherever the threshold is not tied.
  const at::Tensor same = got.mask.eq(ref.mask).all(-1);
  const at::Tensor ties = tie_rows(w, kept);
  EXPECT_EQ(same.logical_not().logical_and(ties.logical_not()).sum().item<int64_t>(), 0) << what;
  EXPECT_LE(same.logical_not().sum().item<int64_t>(), std::max<int64_t>(n / 50, 1)) << what << ": many tie rows";
  // pruned_sum: fp32 sums of the same values in another order (tied rows sum equal values).
  expect_close(got.pruned_sum, ref.pruned_sum, base.pruned_sum, at::kFloat, what + " pruned_sum");
  const at::Tensor rows = same.nonzero().squeeze(1);
  const at::Tensor gk = got.masked_k.index_select(0, rows);
  expect_close(gk, ref.masked_k.index_select(0, rows), base.masked_k.index_select(0, rows), dt, what + " masked_k");
  if (!refill) EXPECT_TRUE(at::equal(gk.to(at::kFloat), base.masked_k.index_select(0, rows))) << what;
}

TEST_F(CudaKeyScores, SparkFixedMatchesReference) {
  at::manual_seed(77);
  for (at::ScalarType dt : kDtypes)
    for (int64_t D : {64, 128})
      for (int64_t n : {1, 37, 1000, 32768}) {
        // k as KvCache::head_keys returns it: rows of a larger buffer (n = 37: rows of D + 1 elements,
        // scalar loads).
        const int64_t pad = n == 37 ? 1 : 0;
        const at::Tensor k = at::randn({n + 3, D + pad}, opts(dt)).narrow(0, 2, n).narrow(1, 0, D);
        at::Tensor a = at::rand({D}, opts(at::kFloat)).add_(0.01f);
        a[3] = 0.0f;  // a channel with no query weight: w = 0 there, no refill (inv_a = 0)
        for (int64_t kept : {int64_t{0}, int64_t{1}, D / 5, D / 2, D - 1, D})
          for (bool refill : {false, true}) {
            const std::string what = "spark " + name(dt) + " D=" + std::to_string(D) + " n=" + std::to_string(n) +
                                     " kept=" + std::to_string(kept) + (refill ? " refill" : "");
            check_spark(ops::spark_prune_fixed(k, a, kept, refill), k, a, kept, refill, dt, what);
          }
      }
}

TEST_F(CudaKeyScores, SparkFixedTiesTakeLowerChannelsFirst) {
  // Every saliency equal: the first `kept` channels are kept, as at::topk on CUDA does.
  const int64_t D = 128, kept = 50;
  const at::Tensor k = at::ones({9, D}, opts(at::kBFloat16));
  const at::Tensor a = at::ones({D}, opts(at::kFloat));
  const ops::SparkPruned got = ops::spark_prune_fixed(k, a, kept, true);
  const at::Tensor expect = at::arange(D, opts(at::kLong)).lt(kept).unsqueeze(0).expand({9, D});
  EXPECT_TRUE(at::equal(got.mask, expect));
  EXPECT_TRUE(got.pruned_sum.eq(float(D - kept)).all().item<bool>());
  EXPECT_TRUE(got.masked_k.eq(1.0).all().item<bool>());  // refill sign(1) * μ (= 1) / a (= 1)
  // D not a multiple of 32 (partial lanes) and empty inputs.
  for (int64_t d : {1, 40, 96, 200, 256}) {
    const at::Tensor kd = at::randn({300, d}, opts(at::kFloat));
    const at::Tensor ad = at::rand({d}, opts(at::kFloat));
    check_spark(ops::spark_prune_fixed(kd, ad, d / 3, true), kd, ad, d / 3, true, at::kFloat,
                "spark D=" + std::to_string(d));
  }
  const ops::SparkPruned empty =
      ops::spark_prune_fixed(at::randn({0, 64}, opts(at::kHalf)), at::rand({64}, opts(at::kFloat)), 10, true);
  EXPECT_EQ(empty.mask.sizes(), (at::IntArrayRef{0, 64}));
}

TEST_F(CudaKeyScores, PoliciesUseTheKernelsOnCuda) {
  // KeyDiff's score() on CUDA keys (the kernel) against the same policy on the CPU copy.
  const ModelConfig cfg = test::small_config(1, 2, 4, 128);
  at::manual_seed(5);
  const at::Tensor keys = strided_keys(2, 900, 128, 1000, 0, opts(at::kFloat));
  const auto pol = registry().make("keydiff", {});
  const auto* scorer = dynamic_cast<const ScoringPolicy*>(pol.get());
  ASSERT_NE(scorer, nullptr);
  const at::Tensor gpu = scorer->score(LayerPrefill{cfg, 0, at::Tensor(), keys, keys});
  const at::Tensor cpu = scorer->score(LayerPrefill{cfg, 0, at::Tensor(), keys.cpu(), keys.cpu()});
  EXPECT_TRUE(gpu.is_cuda());
  EXPECT_LT((gpu.cpu() - cpu).abs().max().item<double>(), 1e-5);
}

TEST_F(CudaKeyScores, RejectsBadArguments) {
  const at::Tensor k = at::randn({3, 10, 64}, opts(at::kBFloat16));
  EXPECT_THROW(ops::keydiff_scores(k.select(0, 0), true), std::invalid_argument);                             // 2-D
  EXPECT_THROW(ops::keydiff_scores(at::randn({1, 10, 300}, opts(at::kFloat)), true), std::invalid_argument);  // D > 256
  EXPECT_THROW(ops::keydiff_scores(k.to(at::kDouble), true), std::invalid_argument);                          // dtype
  EXPECT_THROW(ops::keydiff_scores(k.cpu(), true), std::invalid_argument);                                    // device
  const at::Tensor k2 = at::randn({10, 64}, opts(at::kHalf));
  const at::Tensor a = at::rand({64}, opts(at::kFloat));
  EXPECT_THROW(ops::spark_prune_fixed(k2, a.narrow(0, 0, 63), 8, false), std::invalid_argument);  // a size
  EXPECT_THROW(ops::spark_prune_fixed(k2, a.cpu(), 8, false), std::invalid_argument);             // a device
  EXPECT_THROW(ops::spark_prune_fixed(k2, a.to(at::kHalf), 8, false), std::invalid_argument);     // a dtype
  EXPECT_THROW(ops::spark_prune_fixed(k2, a, 65, false), std::invalid_argument);                  // kept > D
  EXPECT_THROW(ops::spark_prune_fixed(k2, a, -1, false), std::invalid_argument);
  EXPECT_THROW(ops::spark_prune_fixed(k2.unsqueeze(0), a, 8, false), std::invalid_argument);     // 3-D
  EXPECT_THROW(ops::spark_prune_fixed(k2.to(at::kDouble), a, 8, false), std::invalid_argument);  // dtype
}

}  // namespace
}  // namespace kvscope
