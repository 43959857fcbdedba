// Capture statistics against brute-force definitions (capture.h), and their wiring into generate().
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/capture.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "test_support.h"

namespace kvscope {
namespace {

TEST(Capture, SummaryMatchesBruteForce) {
  at::manual_seed(3);
  ModelConfig c;
  c.n_head = 6;
  c.n_head_kv = 2;
  c.head_dim = 8;
  const int64_t n = 50, w = 5, G = 3;
  at::Tensor q = at::randn({n, 6, 8}), k = at::randn({2, n, 8}), v = at::randn({2, n, 8});
  const LayerCapture cap = capture_layer(LayerPrefill{c, 0, q, k, v}, w, CaptureLevel::kFull);
  ASSERT_EQ(cap.summary.sizes(), (at::IntArrayRef{2, 7}));
  for (int64_t h = 0; h < 2; ++h) {
    // Window-mean attention of the group, by explicit loops over queries.
    std::vector<double> a(n, 0.0);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t i = n - w; i < n; ++i) {
        at::Tensor logits =
            (k[h].narrow(0, 0, i + 1).to(at::kDouble).matmul(q[i][h * G + g].to(at::kDouble))) / std::sqrt(8.0);
        at::Tensor p = at::softmax(logits, 0);
        for (int64_t j = 0; j <= i; ++j) a[j] += p[j].item<double>() / (w * G);
      }
    double entropy = 0, sink = 0;
    for (int64_t j = 0; j < n; ++j) entropy -= a[j] * std::log(a[j]);
    for (int64_t j = 0; j < 4; ++j) sink += a[j];
    std::vector<double> s = a;
    std::sort(s.rbegin(), s.rend());
    double cum = 0;
    int64_t need = 0;
    while (cum < 0.95) cum += s[need++];
    EXPECT_NEAR(cap.summary[h][0].item<double>(), entropy, 1e-4);
    EXPECT_NEAR(cap.summary[h][2].item<double>(), s[0] + s[1] + s[2], 1e-5);  // top 5% of 50 = 3 tokens
    EXPECT_NEAR(cap.summary[h][3].item<double>(), double(need) / n, 1e-6);
    EXPECT_NEAR(cap.summary[h][4].item<double>(), sink, 1e-5);
    EXPECT_NEAR(cap.attention[h].sum().item<double>(), 1.0, 1e-5);
  }
  // cos_mean: mean over tokens of the cosine to the mean normalised key; channel_cv: mean over
  // channels of std/mean of w = |q̄|·|k|, both from their definitions.
  {
    at::Tensor kd = k.to(at::kDouble), kn = kd / kd.norm(2, {-1}, true);
    at::Tensor m = kn.mean(1, true);
    at::Tensor cos = (kn * (m / m.norm(2, {-1}, true))).sum(-1);
    at::Tensor qb = q.narrow(0, n - w, w).to(at::kDouble).mean(0).abs().view({2, 3, 8}).mean(1);
    at::Tensor sal = qb.unsqueeze(1) * kd.abs();
    at::Tensor cv = sal.std(1, false) / sal.mean(1);
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_NEAR(cap.summary[h][5].item<double>(), cos[h].mean().item<double>(), 1e-5);
      EXPECT_NEAR(cap.summary[h][6].item<double>(), cv[h].mean().item<double>(), 1e-4);
      EXPECT_TRUE(at::allclose(cap.cos_to_mean[h].to(at::kDouble), cos[h], 1e-5, 1e-5));
    }
  }
  // Channel CV of w = |q̄|·|k| for head 0, channel 3.
  at::Tensor qbar = q.narrow(0, n - w, w).mean(0).abs().view({2, 3, 8}).mean(1);
  at::Tensor wj = qbar[0][3] * k[0].select(1, 3).abs();
  EXPECT_NEAR(cap.channel_cv[0][3].item<double>(), (wj.std(0, false) / wj.mean()).item<double>(), 1e-5);
  EXPECT_THROW(parse_capture_level("most"), InputError);
}

TEST(Capture, GenerateRecordsEveryLayerBeforeCompression) {
  const Model model = load_model(test::stories_dir() / "stories260K.bin", LoadOptions{});
  const Engine engine(model);
  PolicyRegistry registry;
  register_builtin_policies(registry);
  const Pipeline p(registry, "snapkv:window=8");
  GenerateRequest req;
  req.prompt_ids =
      prompt_ids(model, "Once upon a time, there was a little girl named Lily who loved the park.", BosMode::kAlways);
  req.max_new_tokens = 2;
  req.pipeline = &p;
  req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.5};
  req.capture = CaptureLevel::kFull;
  const auto res = generate(engine, req);
  ASSERT_EQ(res.captures.size(), 5u);
  for (const auto& c : res.captures) {
    EXPECT_EQ(c.attention.size(1), int64_t(req.prompt_ids.size())) << "captured over the whole prompt";
    EXPECT_EQ(c.channel_cv.size(1), 8);
  }
}

}  // namespace
}  // namespace kvscope
