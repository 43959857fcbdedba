// The fused SnapKV window-voting kernels (ops/snapkv_ops.h) against the fp32 LibTorch formula the
// policy uses on the CPU (policies::window_attention + pool_scores + reduce_groups), on awkward
// shapes. Skipped without a CUDA device or without the kernels in the build.
//
// Pass rule: max|kernel - ref32| <= 2 * max|baseline - ref32| + floor, where baseline is the same
// vote computed by LibTorch with the logits in the dtype (Q·Kᵀ as a bf16 / fp16 matmul, then the
// fp32 softmax), ref32 the fp32 computation on the same (rounded) inputs, and floor 1e-6 of the
// largest reference value. The kept sets of the full snapkv policy on the GPU must also equal the
// CPU fp32 policy's up to near-ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include <ATen/ATen.h>

#include "../../core/src/ops/cuda_ops.h"
#include "../../core/src/ops/snapkv_ops.h"
#include "kvscope/core/model_config.h"
#include "policies/scoring.h"
#include "small_config.h"

namespace kvscope {
namespace {

class CudaSnapKvScores : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

/// fp32 [Hkv, G, n - w]: the mean over the window rows of the causal window attention, with the
/// logits computed in `logit_dtype` (fp32: the reference; bf16 / fp16: LibTorch's same-dtype path).
at::Tensor vote_libtorch(const at::Tensor& qw, const at::Tensor& k, at::ScalarType logit_dtype) {
  const int64_t w = qw.size(0), H = qw.size(1), D = qw.size(2), Hkv = k.size(0), n = k.size(1), G = H / Hkv;
  const at::Tensor qg = qw.to(logit_dtype).permute({1, 0, 2}).reshape({Hkv, G * w, D});
  const at::Tensor s = at::bmm(qg, k.to(logit_dtype).transpose(1, 2)).to(at::kFloat).div_(std::sqrt(double(D)));
  at::Tensor s4 = s.view({Hkv, G, w, n});
  const at::Tensor qi = at::arange(n - w, n, s.options().dtype(at::kLong)).unsqueeze(1);
  const at::Tensor kj = at::arange(n, s.options().dtype(at::kLong)).unsqueeze(0);
  s4.masked_fill_(kj > qi, -std::numeric_limits<float>::infinity());
  return at::softmax(s4, -1, at::kFloat).narrow(3, 0, n - w).mean(2);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST_F(CudaSnapKvScores, WindowVoteMatchesTheFp32Formula) {
  at::manual_seed(7);
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (int64_t D : {64, 128})
      for (int64_t G : {1, 3, 4, 8})
        for (int64_t n : {37, 1000, 32768})
          for (int64_t w : {5, 32}) {
            const int64_t Hkv = 2;
            const auto o = at::TensorOptions().device(at::kCUDA);
            // Queries scaled so that the attention is peaked on some keys and flat on others.
            const at::Tensor qw = (at::randn({w, Hkv * G, D}, o) * 2.0).to(dt);
            const at::Tensor k = at::randn({Hkv, n, D}, o).to(dt);
            const std::string what = std::string(dt == at::kHalf ? "fp16" : "bf16") + " D=" + std::to_string(D) +
                                     " G=" + std::to_string(G) + " n=" + std::to_string(n) + " w=" + std::to_string(w);
            const at::Tensor got = ops::window_vote(qw, k);
            const at::Tensor ref = vote_libtorch(qw, k, at::kFloat), base = vote_libtorch(qw, k, dt);
            ASSERT_EQ(got.sizes(), ref.sizes()) << what;
            ASSERT_TRUE(at::isfinite(got).all().item<bool>()) << what;
            const double err = max_abs_diff(got, ref), base_err = max_abs_diff(base, ref);
            EXPECT_LE(err, 2 * base_err + 1e-6 * ref.abs().max().item<double>())
                << what << ": kernel error " << err << ", LibTorch same-dtype error " << base_err;
          }
}

TEST_F(CudaSnapKvScores, PoolingAndGroupReductionMatchLibTorch) {
  at::manual_seed(8);
  const auto o = at::TensorOptions().device(at::kCUDA);
  const int64_t Hkv = 3, G = 4, D = 128, n = 3000, w = 16;
  const at::Tensor qw = (at::randn({w, Hkv * G, D}, o) * 2.0).to(at::kBFloat16);
  const at::Tensor k = at::randn({Hkv, n, D}, o).to(at::kBFloat16);
  const at::Tensor vote = vote_libtorch(qw, k, at::kFloat);  // [Hkv, G, n - w]
  for (int64_t kernel : {1, 5, 7})
    for (policies::Pool pool : {policies::Pool::kAvg, policies::Pool::kMax})
      for (policies::GqaReduce gqa :
           {policies::GqaReduce::kMean, policies::GqaReduce::kSum, policies::GqaReduce::kMax}) {
        const ops::GroupReduce how = gqa == policies::GqaReduce::kMean  ? ops::GroupReduce::kMean
                                     : gqa == policies::GqaReduce::kSum ? ops::GroupReduce::kSum
                                                                        : ops::GroupReduce::kMax;
        const at::Tensor got = ops::snapkv_window_scores(qw, k, kernel, pool == policies::Pool::kMax, how);
        ASSERT_TRUE(got.defined());
        const at::Tensor want = policies::reduce_groups(
            policies::pool_scores(vote.reshape({Hkv * G, n - w}), kernel, pool).view({Hkv, G, n - w}), gqa);
        const std::string what = "kernel " + std::to_string(kernel) + (pool == policies::Pool::kMax ? " max" : " avg") +
                                 " gqa " + std::to_string(static_cast<int>(gqa));
        EXPECT_LE(max_abs_diff(got, want), 1e-5 * want.abs().max().item<double>() + 1e-7) << what;
      }
}

TEST_F(CudaSnapKvScores, PolicyOnTheGpuKeepsTheCpuKeptSet) {
  // snapkv_scores takes the fused path for bf16 CUDA inputs; its top-k must be the CPU fp32 policy's
  // on the same (bf16-rounded) inputs, up to a few near-ties at the boundary.
  at::manual_seed(9);
  const int64_t Hkv = 2, G = 4, D = 64, n = 2000, keep = 256;
  const at::Tensor q = (at::randn({n, Hkv * G, D}) * 2.0).to(at::kBFloat16);
  const at::Tensor k = at::randn({Hkv, n, D}).to(at::kBFloat16);
  const ModelConfig cfg = test::small_config(1, Hkv, G, D);
  policies::SnapKvParams p;  // paper defaults: window 32, kernel 7, max pool, group mean
  const at::Tensor cpu = policies::snapkv_scores(LayerPrefill{cfg, 0, q.to(at::kFloat), k.to(at::kFloat)}, p);
  const at::Tensor gpu = policies::snapkv_scores(LayerPrefill{cfg, 0, q.to(at::kCUDA), k.to(at::kCUDA)}, p).cpu();
  ASSERT_EQ(gpu.sizes(), cpu.sizes());
  for (int64_t h = 0; h < Hkv; ++h) {
    const at::Tensor a = std::get<1>(cpu[h].topk(keep)), b = std::get<1>(gpu[h].topk(keep));
    const int64_t common = at::isin(a, b).sum().item<int64_t>();
    EXPECT_GE(common, keep - 3) << "head " << h;
  }
}

TEST_F(CudaSnapKvScores, RefusesWhatTheKernelsCannotTake) {
  const auto o = at::TensorOptions().device(at::kCUDA);
  const at::Tensor qw = at::randn({8, 4, 64}, o).to(at::kBFloat16), k = at::randn({2, 100, 64}, o).to(at::kBFloat16);
  EXPECT_THROW(ops::window_vote(qw.to(at::kFloat), k.to(at::kFloat)), std::invalid_argument);  // fp32
  EXPECT_THROW(ops::window_vote(qw, k.narrow(1, 0, 8)), std::invalid_argument);                // w >= n
  EXPECT_THROW(ops::window_vote(qw.narrow(1, 0, 3), k), std::invalid_argument);                // 3 % 2 heads
  EXPECT_THROW(ops::window_vote(qw, k.to(at::kHalf)), std::invalid_argument);                  // mixed dtypes
  EXPECT_FALSE(ops::snapkv_window_scores(qw.cpu(), k.cpu(), 5, false, ops::GroupReduce::kMean).defined());
  EXPECT_FALSE(ops::snapkv_window_scores(qw, k, 4, false, ops::GroupReduce::kMean).defined());  // even kernel
}

}  // namespace
}  // namespace kvscope
