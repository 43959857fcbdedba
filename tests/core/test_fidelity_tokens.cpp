// Fidelity's per-step tokens and probabilities (issue 30 item 10): add_fidelity against a hand
// reference, and generate()'s alignment of entry i with output token i, checked against a full
// cache teacher-forced on the compressed run's tokens in one independent prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "pycode_fixture.h"

namespace kvscope {
namespace {

/// Softmax of `x` in double, by the formula.
std::vector<double> softmax_ref(const std::vector<float>& x) {
  double m = x[0];
  for (float v : x) m = std::max(m, double(v));
  std::vector<double> p(x.size());
  double z = 0;
  for (std::size_t i = 0; i < x.size(); ++i) z += p[i] = std::exp(double(x[i]) - m);
  for (double& v : p) v /= z;
  return p;
}

TEST(AddFidelity, HandReferenceWhereTheFullTopDiffersFromTheToken) {
  const std::vector<float> full = {1.0f, 3.0f, 2.0f, 0.5f, -1.0f};  // argmax 1
  const std::vector<float> comp = {1.0f, 2.0f, 3.5f, 0.0f, -2.0f};  // argmax 2
  const auto pf = softmax_ref(full), pc = softmax_ref(comp);
  double kl = 0;
  for (std::size_t i = 0; i < full.size(); ++i) kl += pf[i] * (std::log(pf[i]) - std::log(pc[i]));

  Fidelity f;
  add_fidelity(f, at::tensor(full), at::tensor(comp), 2);  // greedy: the compressed argmax
  // [1, vocab] logits, and a sampled token that is neither argmax.
  add_fidelity(f, at::tensor(full).unsqueeze(0), at::tensor(comp).unsqueeze(0), 3);
  ASSERT_EQ(f.kl.size(), 2u);
  for (const auto* v : {&f.p_token, &f.p_full_top, &f.p_full_token}) ASSERT_EQ(v->size(), 2u);
  ASSERT_EQ(f.top1.size(), 2u);
  ASSERT_EQ(f.token.size(), 2u);
  ASSERT_EQ(f.full_top.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NEAR(f.kl[k], kl, 1e-12);
    EXPECT_EQ(f.top1[k], 0) << "argmaxes 1 and 2 differ";
    EXPECT_EQ(f.full_top[k], 1);
    EXPECT_NEAR(f.p_full_top[k], pf[1], 1e-6);
  }
  EXPECT_EQ(f.token[0], 2);
  EXPECT_NEAR(f.p_token[0], pc[2], 1e-6);
  EXPECT_NEAR(f.p_full_token[0], pf[2], 1e-6);
  EXPECT_EQ(f.token[1], 3);
  EXPECT_NEAR(f.p_token[1], pc[3], 1e-6);
  EXPECT_NEAR(f.p_full_token[1], pf[3], 1e-6);
  // The reference values are far apart, so a swapped field cannot pass.
  EXPECT_GT(std::abs(pf[1] - pf[2]), 0.1);
  EXPECT_GT(std::abs(pc[2] - pf[2]), 0.1);

  add_fidelity(f, at::tensor(full), at::tensor(full), 1);
  EXPECT_NEAR(f.kl.back(), 0.0, 1e-12);
  EXPECT_EQ(f.top1.back(), 1);
  EXPECT_EQ(f.full_top.back(), 1);
  EXPECT_NEAR(f.p_token.back(), f.p_full_top.back(), 1e-7);
  EXPECT_THROW(add_fidelity(f, at::tensor(full), at::tensor(comp), 5), c10::Error);
  EXPECT_THROW(add_fidelity(f, at::tensor(full), at::tensor(comp), -1), c10::Error);
}

class FidelityTokens : public test::PycodeSuite {
 protected:
  /// A compressed greedy run with the full reference: StreamingLLM keeping 32 entries per head of
  /// the 514-token textwrap prompt disagrees with the full cache at some steps.
  GenerateRequest request(const Pipeline& p) const {
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.max_new_tokens = 24;
    r.pipeline = &p;
    r.budget = {BudgetSpec::Unit::kStored, 32};
    r.reference_full = true;
    return r;
  }
};

TEST_F(FidelityTokens, EntryIBelongsToOutputTokenIAndMatchesATeacherForcedFullCache) {
  const Engine engine(*model_);
  const Pipeline p(*registry_, "streamingllm:sink=4");
  const GenerateRequest req = request(p);
  const GenerateResult res = generate(engine, req);
  const Fidelity& f = res.fidelity;
  const std::size_t n = res.output_ids.size();
  ASSERT_EQ(n, 24u);
  ASSERT_EQ(f.kl.size(), n) << "no stop token: one entry per emitted token";
  for (const auto* v : {&f.p_token, &f.p_full_top, &f.p_full_token}) ASSERT_EQ(v->size(), n);
  ASSERT_EQ(f.token.size(), n);
  ASSERT_EQ(f.full_top.size(), n);
  EXPECT_EQ(f.token, res.output_ids);

  // The full cache fed the prompt and the compressed run's tokens, in one prefill: the logits at
  // position n_prompt - 1 + i are the distribution entry i compares with.
  std::vector<int32_t> seq = req.prompt_ids;
  seq.insert(seq.end(), res.output_ids.begin(), res.output_ids.end() - 1);
  KvCache cache = engine.new_cache(static_cast<int64_t>(seq.size()) + 1);
  const at::Tensor all = engine.prefill(cache, seq, 0, true)
                             .to(at::kCPU, at::kFloat)
                             .reshape({-1, model_->config.vocab_size})
                             .contiguous();
  ASSERT_EQ(all.size(0), static_cast<int64_t>(seq.size()));
  const auto first = static_cast<int64_t>(req.prompt_ids.size()) - 1;
  auto probs = [&](int64_t row) {  // softmax of the full cache's logits at `row`, in double
    const at::Tensor t = all[row];
    return softmax_ref(std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()));
  };

  int disagree = 0, shifted_mismatch = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t row = first + static_cast<int64_t>(i);
    const auto p_ref = probs(row);
    const auto top = static_cast<int32_t>(std::max_element(p_ref.begin(), p_ref.end()) - p_ref.begin());
    const int32_t tok = res.output_ids[i];
    EXPECT_EQ(f.full_top[i], top) << "step " << i;
    EXPECT_NEAR(f.p_full_top[i], p_ref[static_cast<std::size_t>(top)], 2e-4) << "step " << i;
    EXPECT_NEAR(f.p_full_token[i], p_ref[static_cast<std::size_t>(tok)], 2e-4) << "step " << i;
    EXPECT_LE(f.p_full_token[i], f.p_full_top[i] + 1e-7);
    EXPECT_GT(f.p_token[i], 0.0);
    EXPECT_LE(f.p_token[i], 1.0);
    // Greedy: the compressed run's token is its own argmax, so top-1 agreement is full_top == token.
    EXPECT_EQ(f.top1[i], f.full_top[i] == tok ? 1 : 0) << "step " << i;
    disagree += f.full_top[i] != tok;
    // The neighbouring row gives other values: the check above tells the alignments apart.
    if (i + 1 < n)
      shifted_mismatch += std::abs(probs(row + 1)[static_cast<std::size_t>(tok)] - f.p_full_token[i]) > 1e-3;
  }
  // Entry 0 comes from the prefill, whose output is exact (only the cache is compressed).
  EXPECT_NEAR(f.kl[0], 0.0, 1e-6);
  EXPECT_EQ(f.full_top[0], res.output_ids[0]);
  EXPECT_NEAR(f.p_token[0], f.p_full_top[0], 1e-5);
  EXPECT_GT(disagree, 0) << "the compressed run must disagree somewhere for this test to mean anything";
  EXPECT_GT(shifted_mismatch, static_cast<int>(n) / 2);
}

TEST_F(FidelityTokens, AStopTokenGetsTheLastEntry) {
  const Engine engine(*model_);
  const Pipeline p(*registry_, "streamingllm:sink=4");
  GenerateRequest req = request(p);
  const GenerateResult free_run = generate(engine, req);
  // Stop on the token first chosen at step k (> 0): the run emits k tokens and has k + 1 entries.
  std::size_t k = 1;
  while (k < free_run.output_ids.size() &&
         std::find(free_run.output_ids.begin(), free_run.output_ids.begin() + static_cast<std::ptrdiff_t>(k),
                   free_run.output_ids[k]) != free_run.output_ids.begin() + static_cast<std::ptrdiff_t>(k))
    ++k;
  ASSERT_LT(k, free_run.output_ids.size());
  req.stop_ids = {free_run.output_ids[k]};
  const GenerateResult res = generate(engine, req);
  ASSERT_EQ(res.output_ids.size(), k);
  ASSERT_EQ(res.fidelity.token.size(), k + 1);
  EXPECT_EQ(res.fidelity.token.back(), free_run.output_ids[k]) << "the stop token's entry";
  EXPECT_EQ(std::vector<int32_t>(res.fidelity.token.begin(), res.fidelity.token.end() - 1), res.output_ids);
  EXPECT_EQ(res.fidelity.full_top[k], free_run.fidelity.full_top[k]);
  EXPECT_EQ(res.fidelity.p_full_token.size(), k + 1);
}

TEST_F(FidelityTokens, LaterTurnsFollowInOrder) {
  const Engine engine(*model_);
  const Pipeline mt(*registry_, "rocketkv-mt");
  GenerateRequest req;
  req.prompt_ids = textwrap_ids();
  req.follow_up_turns = {model_->tokenizer->encode("\n\ndef shorten(text, width):\n")};
  req.max_new_tokens = 6;
  req.pipeline = &mt;
  req.budget = {BudgetSpec::Unit::kFetched, 64};
  req.reference_full = true;
  const GenerateResult res = generate(engine, req);
  ASSERT_EQ(res.turn_output_ids.size(), 2u);
  std::vector<int32_t> all = res.turn_output_ids[0];
  all.insert(all.end(), res.turn_output_ids[1].begin(), res.turn_output_ids[1].end());
  EXPECT_EQ(res.fidelity.token, all);
  EXPECT_EQ(res.fidelity.full_top.size(), all.size());
}

}  // namespace
}  // namespace kvscope
