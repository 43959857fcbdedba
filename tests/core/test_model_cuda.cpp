// The golden checks on the GPU (skipped where LibTorch has no CUDA device): fp32 exactly as on CPU,
// and bf16 argmax agreement >= 97%.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "test_support.h"

namespace kvscope {
namespace {

/// Fraction of positions whose argmax equals the golden argmax.
double argmax_agreement(const at::Tensor& logits, const std::vector<int64_t>& golden) {
  at::Tensor am = logits.argmax(-1).to(at::kCPU);
  at::Tensor ref = at::tensor(golden, at::kLong);
  return am.eq(ref).to(at::kDouble).mean().item<double>();
}

class CudaGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaGolden, Fp32MatchesTransformers) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), at::kFloat, {}});
  const Engine engine(model);
  for (const auto& path : test::pycode_goldens()) {
    SCOPED_TRACE(path.filename().string());
    const auto g = test::read_json(path);
    const auto ids = g["input_ids"].get<std::vector<int32_t>>();
    KvCache cache = engine.new_cache(ids.size());
    at::Tensor logits = engine.prefill(cache, ids, 0, true).to(at::kCPU);
    const auto last = g["last_logits"].get<std::vector<float>>();
    EXPECT_LE((logits[-1] - at::tensor(last)).abs().max().item<double>(), 1e-3);
    EXPECT_GE(argmax_agreement(logits, g["argmax"].get<std::vector<int64_t>>()), 0.995);
    GenerateRequest req;
    req.prompt_ids = ids;
    req.max_new_tokens = 32;
    const auto golden = g["greedy_full"].get<std::vector<int32_t>>();
    EXPECT_EQ(generate(engine, req).output_ids, std::vector<int32_t>(golden.begin(), golden.begin() + 32));
  }
}

TEST_F(CudaGolden, Bf16ArgmaxAgreement) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), at::kBFloat16, {}});
  const Engine engine(model);
  for (const auto& path : test::pycode_goldens()) {
    SCOPED_TRACE(path.filename().string());
    const auto g = test::read_json(path);
    const auto ids = g["input_ids"].get<std::vector<int32_t>>();
    KvCache cache = engine.new_cache(ids.size());
    const double agree = argmax_agreement(engine.prefill(cache, ids, 0, true), g["argmax"].get<std::vector<int64_t>>());
    std::cout << path.filename().string() << ": bf16 argmax agreement " << agree << "\n";
    EXPECT_GE(agree, 0.97);
  }
}

}  // namespace
}  // namespace kvscope
