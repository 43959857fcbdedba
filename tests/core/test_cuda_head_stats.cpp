// Capture's GPU statistics (kernels/head_stats.h through ops/capture_ops.h, and the SnapKV window
// vote over every column) against fp64 references on the same inputs, on awkward shapes, ties,
// zeros and bf16 / fp16 / fp32 keys; and capture_layer's summary on CUDA against the LibTorch
// path on the CPU. Skipped without a CUDA device or without the kernels in the build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/capture_ops.h"
#include "../../core/src/ops/cuda_ops.h"
#include "../../core/src/ops/snapkv_ops.h"
#include "kvscope/core/capture.h"
#include "kvscope/core/model_config.h"
#include "small_config.h"

namespace kvscope {
namespace {

class CudaHeadStats : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

/// fp64 reference of one row: entropy, top-1% mass, top-5% mass, tokens95 fraction, sink share.
std::vector<double> row_stats(std::vector<double> a) {
  const int64_t n = static_cast<int64_t>(a.size());
  const double S = std::accumulate(a.begin(), a.end(), 0.0);
  if (!(S > 0)) return {0, 0, 0, 1, 0};
  double H = 0, sink = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double p = a[j] / S;
    if (p > 0) H -= p * std::log(p);
    if (j < 4) sink += p;
  }
  std::sort(a.begin(), a.end(), std::greater<>());
  auto mass = [&](double frac) {
    const int64_t k = std::min<int64_t>(n, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(frac * n))));
    return std::accumulate(a.begin(), a.begin() + k, 0.0) / S;
  };
  double cum = 0;
  int64_t m = 0;
  while (m < n && cum < 0.95 * S) cum += a[m++];
  return {H, mass(0.01), mass(0.05), double(std::max<int64_t>(m, 1)) / n, sink};
}

TEST_F(CudaHeadStats, AttentionStatsMatchTheFp64Formulas) {
  at::manual_seed(3);
  const auto cpu = at::TensorOptions().dtype(at::kFloat);
  for (int64_t n : {1, 3, 4, 99, 1000, 4097, 32768, 131071}) {
    std::vector<at::Tensor> rows;
    rows.push_back(at::rand({n}, cpu));                                                  // flat
    rows.push_back((at::randn({n}, cpu) * 4).exp());                                     // peaked
    rows.push_back(at::floor(at::rand({n}, cpu) * 5) / 5);                               // ties and zeros
    rows.push_back(at::zeros({n}, cpu).index_fill_(0, at::zeros({1}, at::kLong), 1.f));  // one token
    rows.push_back(at::zeros({n}, cpu));                                                 // nothing
    rows.push_back(at::full({n}, 1e-30f, cpu));                                          // tiny, all equal
    const at::Tensor a = at::stack(rows);
    const at::Tensor got = ops::attention_stats(a.to(at::kCUDA), 4).cpu();
    ASSERT_EQ(got.sizes(), (at::IntArrayRef{a.size(0), 5}));
    for (int64_t r = 0; r < a.size(0); ++r) {
      const at::Tensor row = a[r].to(at::kDouble).contiguous();
      const std::vector<double> ref =
          row_stats(std::vector<double>(row.data_ptr<double>(), row.data_ptr<double>() + n));
      const auto g = got[r];
      SCOPED_TRACE("n " + std::to_string(n) + " row " + std::to_string(r));
      EXPECT_NEAR(g[0].item<double>(), ref[0], 1e-4 * std::max(1.0, ref[0])) << "entropy";
      EXPECT_NEAR(g[1].item<double>(), ref[1], 2e-5) << "mass_top1pct";
      EXPECT_NEAR(g[2].item<double>(), ref[2], 2e-5) << "mass_top5pct";
      // The 95% point may move by one token when float sums straddle 0.95.
      EXPECT_NEAR(g[3].item<double>(), ref[3], 1.0 / n + 1e-7) << "tokens95_frac";
      EXPECT_NEAR(g[4].item<double>(), ref[4], 2e-5) << "sink_share";
    }
  }
}

TEST_F(CudaHeadStats, KeyStatsMatchTheFp64Sums) {
  at::manual_seed(5);
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf, at::kFloat})
    for (int64_t D : {64, 80, 128, 256})
      for (int64_t n : {1, 511, 513, 5000})
        for (int64_t Hkv : {1, 3}) {
          // A cache-like view: rows of D contiguous, heads `cap` rows apart.
          const int64_t cap = n + 7;
          const at::Tensor storage = (at::randn({Hkv, cap, D}) * 2 + 0.5).to(dt);
          const at::Tensor k = storage.narrow(1, 0, n);
          const at::Tensor got = ops::key_stats(k.to(at::kCUDA).contiguous()).cpu();
          const at::Tensor got_view = ops::key_stats(storage.to(at::kCUDA).narrow(1, 0, n)).cpu();
          const at::Tensor kd = k.to(at::kDouble);
          const at::Tensor norm = kd.norm(2, {-1}, true).clamp_min(1e-12);
          const at::Tensor ref = at::stack({(kd / norm).sum(1), kd.abs().sum(1), kd.square().sum(1)}, 1);
          const double scale = ref.abs().max().item<double>();
          SCOPED_TRACE("D " + std::to_string(D) + " n " + std::to_string(n));
          EXPECT_LE((got.to(at::kDouble) - ref).abs().max().item<double>(), 1e-5 * scale);
          EXPECT_LE((got_view.to(at::kDouble) - ref).abs().max().item<double>(), 1e-5 * scale);
        }
}

TEST_F(CudaHeadStats, KeyStatsOfNoKeysAreZero) {
  const at::Tensor k = at::empty({2, 0, 64}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
  EXPECT_EQ(ops::key_stats(k).abs().sum().item<double>(), 0.0);
}

TEST_F(CudaHeadStats, BadInputsAreRefused) {
  const auto o = at::TensorOptions().device(at::kCUDA);
  EXPECT_THROW(ops::attention_stats(at::zeros({2, 8}, o.dtype(at::kHalf)), 4), std::invalid_argument);
  EXPECT_THROW(ops::attention_stats(at::zeros({2, 0}, o.dtype(at::kFloat)), 4), std::invalid_argument);
  EXPECT_THROW(ops::attention_stats(at::zeros({2, 8}), 4), std::invalid_argument);  // CPU
  EXPECT_THROW(ops::key_stats(at::zeros({2, 8, 512}, o.dtype(at::kBFloat16))), std::invalid_argument);
  EXPECT_THROW(ops::key_stats(at::zeros({8, 512}, o.dtype(at::kBFloat16))), std::invalid_argument);
}

/// The window vote over every column: for each (KV head, query head), the mean over the window rows
/// of the causal softmax of all n columns, in fp32 from the same rounded inputs.
TEST_F(CudaHeadStats, WindowVoteOverAllColumnsIsTheCausalWindowAttention) {
  at::manual_seed(11);
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (int64_t n : {40, 1000, 8193})
      for (int64_t w : {5, 32, 39}) {
        if (w >= n) continue;
        const int64_t Hkv = 2, G = 4, H = Hkv * G, D = 64;
        const at::Tensor qw = at::randn({w, H, D}).to(dt), k = at::randn({Hkv, n, D}).to(dt);
        const at::Tensor got = ops::window_vote(qw.to(at::kCUDA), k.to(at::kCUDA), true).cpu();  // [Hkv, G, n]
        const at::Tensor qg = qw.to(at::kFloat).permute({1, 0, 2}).reshape({Hkv, G * w, D});
        at::Tensor s = at::bmm(qg, k.to(at::kFloat).transpose(1, 2)).div_(std::sqrt(double(D))).view({Hkv, G, w, n});
        const at::Tensor qi = at::arange(n - w, n, at::kLong).unsqueeze(1), kj = at::arange(n, at::kLong).unsqueeze(0);
        s.masked_fill_(kj > qi, -std::numeric_limits<float>::infinity());
        const at::Tensor ref = at::softmax(s, -1).mean(2);
        SCOPED_TRACE("n " + std::to_string(n) + " w " + std::to_string(w));
        ASSERT_EQ(got.sizes(), ref.sizes());
        // bf16 / fp16 tensor-core logits against fp32 ones: a few ulps of the logit dtype.
        EXPECT_LE((got - ref).abs().max().item<double>(), 0.02 * ref.abs().max().item<double>() + 1e-6);
        EXPECT_LE((got.sum(-1) - 1).abs().max().item<double>(), 1e-4);
      }
}

/// The principal axes kernel against fp64 eigh, on covariances with a clear gap after the second
/// eigenvalue (the regime subspace iteration is specified for), D from 16 to 256.
TEST_F(CudaHeadStats, PrincipalAxesMatchEigh) {
  at::manual_seed(17);
  for (int64_t D : {16, 64, 80, 128, 256}) {
    const int64_t heads = 3;
    // C = Q diag(λ) Qᵀ with λ = 10, 4, then <= 1.
    const at::Tensor Q = std::get<0>(at::linalg_qr(at::randn({heads, D, D}, at::kDouble)));
    at::Tensor lam = at::rand({heads, D}, at::kDouble);
    lam.select(1, 0).fill_(10.0);
    lam.select(1, 1).fill_(4.0);
    const at::Tensor C = at::bmm(Q * lam.unsqueeze(1), Q.transpose(1, 2));
    const at::Tensor got = ops::principal_axes(C.to(at::kFloat).to(at::kCUDA)).cpu().to(at::kDouble);  // [heads, D, 2]
    const at::Tensor vecs = std::get<1>(at::linalg_eigh(C));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t a = 0; a < 2; ++a) {
        const at::Tensor want = vecs[h].select(1, D - 1 - a);
        const double cosine = std::abs((got[h].select(1, a) * want).sum().item<double>());
        EXPECT_GT(cosine, 0.9999) << "D " << D << " head " << h << " axis " << a;
        // The sign rule: the largest-magnitude component is positive.
        const at::Tensor g = got[h].select(1, a);
        EXPECT_GT(g[g.abs().argmax()].item<double>(), 0.0);
      }
  }
}

/// capture_layer on CUDA (kernels) and on the CPU (LibTorch, fp32 from the same rounded inputs).
TEST_F(CudaHeadStats, CaptureSummaryOnCudaMatchesTheCpuPath) {
  at::manual_seed(13);
  for (int64_t n : {300, 4100}) {
    const ModelConfig cfg = test::small_config(1, 2, 4, 64);
    const int64_t H = cfg.n_head, Hkv = cfg.n_head_kv, D = cfg.head_dim;
    const at::Tensor q = (at::randn({n, H, D}) * 2).to(at::kBFloat16);
    // Keys with two dominant channels, so the 2-D key map has well-separated axes.
    at::Tensor scale = at::ones({D});
    scale[0] = 6;
    scale[1] = 3;
    const at::Tensor k = (at::randn({Hkv, n, D}) * 2 * scale).to(at::kBFloat16);
    const at::Tensor v = at::randn({Hkv, n, D}).to(at::kBFloat16);
    const LayerPrefill gpu{cfg, 0, q.to(at::kCUDA), k.to(at::kCUDA), v.to(at::kCUDA)};
    const LayerPrefill cpu{cfg, 0, q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat)};
    std::vector<LayerCapture> g{capture_layer(gpu, 64, CaptureLevel::kFull)};
    std::vector<LayerCapture> c{capture_layer(cpu, 64, CaptureLevel::kFull)};
    EXPECT_TRUE(g[0].summary.is_cuda());
    captures_to_host(g);
    captures_to_host(c);
    ASSERT_EQ(g[0].summary.sizes(), c[0].summary.sizes());
    SCOPED_TRACE("n " + std::to_string(n));
    const at::Tensor d = (g[0].summary - c[0].summary).abs();
    // entropy (nats), masses, tokens fraction, sink, cos_mean, channel_cv: bf16 logits vs fp32.
    const std::vector<double> tol = {0.02, 0.01, 0.01, 0.01 + 1.0 / n, 0.01, 1e-3, 1e-3};
    for (int64_t m = 0; m < d.size(1); ++m)
      EXPECT_LE(d.select(1, m).max().item<double>(),
                tol[m] * std::max(1.0, c[0].summary.select(1, m).abs().max().item<double>()))
          << summary_metric_names()[m];
    // Full level: the per-token attention and the 2-D key map (up to each axis's sign).
    EXPECT_LE((g[0].attention - c[0].attention).abs().max().item<double>(), 0.02 * c[0].attention.max().item<double>());
    for (int64_t a = 0; a < 2; ++a) {
      const at::Tensor x = g[0].keys_pca.select(2, a), y = c[0].keys_pca.select(2, a);
      const double cosine = ((x * y).sum(1) / (x.norm(2, {1}) * y.norm(2, {1}))).abs().min().item<double>();
      EXPECT_GT(cosine, 0.99) << "PCA axis " << a;
    }
  }
}

}  // namespace
}  // namespace kvscope
