// run::check_kept_entries (app/run/budget_check.h): what each policy family always keeps, and the
// one-line refusal when a budget keeps fewer entries per KV head (issue 30).
#include <gtest/gtest.h>

#include "budget_check.h"

namespace kvscope::run {
namespace {

StageSpec stage(std::string policy, ParamValues params = {}) { return {std::move(policy), std::move(params)}; }

TEST(BudgetCheck, AlwaysKeptPerPolicyFamily) {
  // SnapKV family: the observation window, capped at the prompt.
  EXPECT_EQ(always_kept({stage("snapkv", {{"window", "32"}}), stage("uniform")}, 88).entries, 32);
  EXPECT_EQ(always_kept({stage("snapkv", {{"window", "32"}})}, 20).entries, 20);
  const AlwaysKept p = always_kept({stage("pyramidkv", {{"window", "64"}}), stage("pyramid", {{"window", "-1"}})}, 500);
  EXPECT_EQ(p.entries, 64);
  EXPECT_EQ(p.policy, "pyramidkv");
  EXPECT_EQ(p.param, "window=64");
  // StreamingLLM: the sink tokens; H2O: the recent window; TOVA: the last token.
  EXPECT_EQ(always_kept({stage("streamingllm", {{"sink", "4"}})}, 100).entries, 4);
  EXPECT_EQ(always_kept({stage("h2o", {{"recent", "16"}, {"norm", "sum"}})}, 100).entries, 16);
  EXPECT_EQ(always_kept({stage("h2o", {{"recent", "0"}})}, 100).entries, 0);
  const AlwaysKept t = always_kept({stage("tova")}, 100);
  EXPECT_EQ(t.entries, 1);
  EXPECT_EQ(t.param, "");
  // Shares of the budget or stages that do not evict to it keep nothing whatever the budget.
  EXPECT_EQ(always_kept({stage("keydiff", {{"recent", "0.5"}}), stage("uniform")}, 100).entries, 0);
  EXPECT_EQ(always_kept({stage("knorm"), stage("adakv", {{"alpha", "0.2"}})}, 100).entries, 0);
  EXPECT_EQ(always_kept({stage("quest", {{"page", "16"}})}, 100).entries, 0);
  EXPECT_EQ(always_kept({}, 100).entries, 0);
}

TEST(BudgetCheck, RefusesABudgetBelowTheWindowInOneLine) {
  const std::vector<StageSpec> snap = {stage("snapkv", {{"window", "32"}, {"kernel", "7"}}), stage("uniform")};
  const BudgetSpec fraction{BudgetUnit::kFraction, 0.25};
  ASSERT_EQ(fraction.kept_per_head(88), 22);
  const KeptCheck c = check_kept_entries(snap, fraction, 88, fraction.kept_per_head(88));
  EXPECT_EQ(c.kept_per_head, 22);
  EXPECT_EQ(c.always.entries, 32);
  EXPECT_EQ(c.problem,
            "budget fraction 0.25 keeps 22 entries per KV head of the 88-token prompt, fewer than the 32 that snapkv "
            "window=32 always keeps (its observation window): the scores would decide nothing; give a fraction of at "
            "least 0.364 or a smaller window");
  EXPECT_EQ(c.problem.find('\n'), std::string::npos);
  // The suggested budget is enough.
  EXPECT_GE((BudgetSpec{BudgetUnit::kFraction, 0.364}.kept_per_head(88)), 32);
  EXPECT_GE((BudgetSpec{BudgetUnit::kCompressionRatio, 0.636}.kept_per_head(88)), 32);
  const BudgetSpec ratio{BudgetUnit::kCompressionRatio, 0.75};
  EXPECT_NE(check_kept_entries(snap, ratio, 88, ratio.kept_per_head(88)).problem.find("at most 0.636"),
            std::string::npos);
  // Exactly the window, more, or the whole prompt: fine.
  EXPECT_TRUE(check_kept_entries(snap, BudgetSpec{BudgetUnit::kStored, 32}, 88, 32).problem.empty());
  EXPECT_TRUE(check_kept_entries(snap, BudgetSpec{BudgetUnit::kFraction, 0.5}, 88, 44).problem.empty());
  EXPECT_TRUE(check_kept_entries(snap, BudgetSpec{BudgetUnit::kFraction, 1.0}, 20, 20).problem.empty());
  // A prompt shorter than the window keeps it all only at the full budget.
  EXPECT_FALSE(check_kept_entries(snap, BudgetSpec{BudgetUnit::kFraction, 0.5}, 20, 10).problem.empty());
  // Not known (a decode-time stage derives it once the model is loaded): no verdict.
  EXPECT_TRUE(check_kept_entries(snap, fraction, 88, -1).problem.empty());
}

TEST(BudgetCheck, NamesEachFamilysParameter) {
  const BudgetSpec stored{BudgetUnit::kStored, 2};
  const std::string s =
      check_kept_entries({stage("streamingllm", {{"sink", "4"}}), stage("uniform")}, stored, 50, 2).problem;
  EXPECT_NE(s.find("streamingllm sink=4 always keeps (its attention-sink tokens)"), std::string::npos) << s;
  EXPECT_NE(s.find("at least 4 entries per head or a smaller sink"), std::string::npos) << s;
  const std::string h = check_kept_entries({stage("h2o", {{"recent", "8"}}), stage("uniform")}, stored, 50, 2).problem;
  EXPECT_NE(h.find("h2o recent=8 always keeps (its recent window)"), std::string::npos) << h;
  const std::string t =
      check_kept_entries({stage("tova"), stage("uniform")}, BudgetSpec{BudgetUnit::kCompressionRatio, 0.99}, 50, 0)
          .problem;
  EXPECT_NE(t.find("the 1 that tova always keeps (its last token)"), std::string::npos) << t;
  EXPECT_EQ(t.find("smaller"), std::string::npos) << t;
}

}  // namespace
}  // namespace kvscope::run
