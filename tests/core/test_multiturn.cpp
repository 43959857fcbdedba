// Multi-turn generation on one cache, and RocketKV-MT (keep everything, reselect every turn).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "pycode_fixture.h"
#include "test_support.h"

namespace kvscope {
namespace {

class MultiTurn : public test::PycodeSuite {
 protected:
  static GenerateRequest two_turns() {
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.follow_up_turns = {model_->tokenizer->encode("\n\ndef shorten(text, width):\n")};
    r.max_new_tokens = 6;
    return r;
  }
};

TEST_F(MultiTurn, SecondTurnContinuesTheSameCache) {
  const Engine engine(*model_);
  GenerateRequest req = two_turns();
  const auto res = generate(engine, req);
  ASSERT_EQ(res.turn_output_ids.size(), 2u);
  // Equivalent single prompt: turn 1 + its outputs + turn 2, then greedy.
  GenerateRequest flat;
  flat.prompt_ids = req.prompt_ids;
  flat.prompt_ids.insert(flat.prompt_ids.end(), res.turn_output_ids[0].begin(), res.turn_output_ids[0].end());
  flat.prompt_ids.insert(flat.prompt_ids.end(), req.follow_up_turns[0].begin(), req.follow_up_turns[0].end());
  flat.max_new_tokens = 6;
  EXPECT_EQ(generate(engine, flat).output_ids, res.turn_output_ids[1]);
}

TEST_F(MultiTurn, RocketKvMtKeepsEverythingAndWithAFullBudgetIsExact) {
  const Engine engine(*model_);
  const Pipeline mt(*registry_, "rocketkv-mt");
  GenerateRequest req = two_turns();
  req.pipeline = &mt;
  req.reference_full = true;
  req.budget = {BudgetSpec::Unit::kFetched, 100000};  // t >= history: HSA attends to everything
  const auto exact = generate(engine, req);
  for (double kl : exact.fidelity.kl) EXPECT_NEAR(kl, 0.0, 1e-6);
  req.budget = {BudgetSpec::Unit::kFetched, 64};
  const auto sparse = generate(engine, req);
  EXPECT_EQ(sparse.kept[0][0].size(), req.prompt_ids.size()) << "stage 1 deletes nothing";
  ASSERT_EQ(sparse.fidelity.kl.size(), 12u);
  double mean = 0;
  for (double kl : sparse.fidelity.kl) mean += kl / 12;
  EXPECT_GT(mean, 1e-4);
  EXPECT_LT(mean, 2.0);
  ASSERT_FALSE(sparse.bytes_read.empty());
  for (int64_t b : sparse.bytes_read) {
    EXPECT_GT(b, 0) << "the policy's own count of what it read";
    EXPECT_LT(b, sparse.cache_bytes_live / 2) << "reads a fraction of the cache";
  }
}

TEST_F(MultiTurn, RaggedCachesRefuseReselection) {
  const Engine engine(*model_);
  const Pipeline ada(*registry_, "snapkv+adakv");
  GenerateRequest req = two_turns();
  req.pipeline = &ada;
  req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.5};
  EXPECT_THROW(generate(engine, req), InputError);
}

}  // namespace
}  // namespace kvscope
