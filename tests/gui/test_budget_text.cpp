// Issue 30 item 3: budgets in one convention. "ratio 0.75" (share removed) and "fraction 0.25" (share
// kept) used to sit side by side in one column; every budget now reads as the kept share plus entries
// per KV head, from what the run recorded where it did, with the unit it was given in as a detail.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "budget_text.h"
#include "gui_test_support.h"
#include "run_data.h"

namespace kvscope::gui {
namespace {

using run::budget_label;
using run::given_text;
using run::kept_share;
using run::kept_sort_key;
using run::kept_text;
using sessions::BudgetInfo;
using sessions::BudgetUnit;

std::map<std::string, double> recorded(double kept_per_head, double n_prompt) {
  return {{"kept_per_head_mean", kept_per_head}, {"n_prompt", n_prompt}, {"mean_kl", 0.1}};
}

TEST(BudgetText, RatioAndFractionOfOneBudgetReadTheSameKeptShare) {
  // As the runs record them (kept_per_head_mean over the 88-token prompt) ...
  const auto ratio = kept_share("snapkv", {BudgetUnit::kCompressionRatio, 0.75}, recorded(22, 88));
  const auto frac = kept_share("snapkv", {BudgetUnit::kFraction, 0.25}, recorded(22, 88));
  EXPECT_EQ(kept_text(ratio), "kept 25% \xc2\xb7 22/head");
  EXPECT_EQ(kept_text(ratio), kept_text(frac));
  EXPECT_DOUBLE_EQ(kept_sort_key(ratio), kept_sort_key(frac));
  // ... and derived from the budget alone (a run that recorded no kept count), marked as such.
  const auto ratio_d = kept_share("snapkv", {BudgetUnit::kCompressionRatio, 0.75}, {}, 88);
  const auto frac_d = kept_share("snapkv", {BudgetUnit::kFraction, 0.25}, {}, 88);
  EXPECT_FALSE(ratio_d.measured);
  EXPECT_EQ(kept_text(ratio_d),
            "kept \xe2\x89\x88"
            "25% \xc2\xb7 \xe2\x89\x88"
            "22/head");
  EXPECT_EQ(kept_text(ratio_d), kept_text(frac_d));
  EXPECT_DOUBLE_EQ(ratio_d.per_head, 22);
  // The unit each was given in stays, as the detail.
  EXPECT_EQ(given_text(ratio), "(ratio 0.75)");
  EXPECT_EQ(given_text(frac), "(fraction 0.25)");
  EXPECT_EQ(budget_label(ratio), "kept 25% \xc2\xb7 22/head (ratio 0.75)");
  EXPECT_EQ(budget_label(frac), "kept 25% \xc2\xb7 22/head (fraction 0.25)");
}

TEST(BudgetText, TokenBudgetsShowTheirKeptShare) {
  // 128 entries per KV head of a 512-token prompt: a quarter, measured or derived.
  const auto stored = kept_share("snapkv", {BudgetUnit::kStored, 128}, recorded(128, 512));
  EXPECT_EQ(budget_label(stored), "kept 25% \xc2\xb7 128/head (128 stored/head)");
  const auto derived = kept_share("snapkv", {BudgetUnit::kStored, 128}, {}, 512);
  EXPECT_NEAR(derived.fraction, 0.25, 1e-12);
  // RocketKV's t: what the run stored (its capacity), not t, is what it kept.
  const auto fetched = kept_share("rocketkv", {BudgetUnit::kFetched, 256}, recorded(1024, 2589));
  EXPECT_EQ(budget_label(fetched), "kept 40% \xc2\xb7 1024/head (256 fetched/step)");
  // Without the prompt length, entries per head alone.
  EXPECT_EQ(kept_text(kept_share("snapkv", {BudgetUnit::kStored, 128}, {})),
            "\xe2\x89\x88"
            "128/head");
  EXPECT_EQ(kept_text(kept_share("snapkv", {BudgetUnit::kFraction, 0.25}, {})),
            "kept \xe2\x89\x88"
            "25%");
}

TEST(BudgetText, FullCacheAndShareFormats) {
  const auto full = kept_share("full", {BudgetUnit::kFraction, 1.0}, recorded(88, 88));
  EXPECT_EQ(budget_label(full), "full cache");
  EXPECT_EQ(given_text(full), "");
  EXPECT_EQ(kept_text(kept_share("", {BudgetUnit::kCompressionRatio, 0}, {})), "full cache");
  // Shares near 0 or 100% keep a decimal, so they never read as exactly 0% or 100%.
  EXPECT_EQ(kept_text(kept_share("snapkv", {BudgetUnit::kStored, 3}, recorded(3, 100))), "kept 3.0% \xc2\xb7 3/head");
  EXPECT_EQ(kept_text(kept_share("snapkv", {BudgetUnit::kStored, 996}, recorded(996, 1000))),
            "kept 99.6% \xc2\xb7 996/head");
  // Head-wise budgets (Ada-KV) keep a fractional mean.
  EXPECT_EQ(kept_text(kept_share("snapkv+adakv", {BudgetUnit::kFraction, 0.5}, recorded(43.75, 88))),
            "kept 50% \xc2\xb7 43.8/head");
}

// The Sessions table sorts its budget column by this key: by the share kept, whichever unit.
TEST(BudgetText, SortKeyOrdersByKeptShareAcrossUnits) {
  const double ratio_09 = kept_sort_key(kept_share("snapkv", {BudgetUnit::kCompressionRatio, 0.9}, recorded(51, 512)));
  const double frac_025 = kept_sort_key(kept_share("snapkv", {BudgetUnit::kFraction, 0.25}, recorded(128, 512)));
  const double stored_256 = kept_sort_key(kept_share("snapkv", {BudgetUnit::kStored, 256}, recorded(256, 512)));
  const double ratio_02 = kept_sort_key(kept_share("snapkv", {BudgetUnit::kCompressionRatio, 0.2}, recorded(409, 512)));
  const double full = kept_sort_key(kept_share("full", {BudgetUnit::kFraction, 1.0}, recorded(512, 512)));
  // The old key (the budget's value) put ratio 0.9 above ratio 0.2 and stored 256 above everything.
  EXPECT_LT(ratio_09, frac_025);
  EXPECT_LT(frac_025, stored_256);
  EXPECT_LT(stored_256, ratio_02);
  EXPECT_LT(ratio_02, full);
  EXPECT_TRUE(std::isnan(kept_sort_key(kept_share("snapkv", {BudgetUnit::kStored, 128}, {}))));
}

// Titles and captions of figures read the same convention (RunData::budget_text).
TEST(BudgetText, RunTitlesAndCaptionsShowTheKeptShare) {
  const auto dir = testing::make_temp_dir("budget_text");
  const auto db = dir / "s.db";
  SyntheticSpec spec;
  spec.n_layer = 2;
  spec.n_tok = 200;
  spec.n_steps = 4;
  const SyntheticRuns runs = testing::write_test_session(db, spec);
  {
    auto store = sessions::SessionStore::open(db.string());
    const auto data = figures::load_run_data(store, runs.snapkv, {});
    EXPECT_EQ(data->budget_text(), run::budget_label(data->kept_share()));
    EXPECT_NE(data->title().find("kept 2"), std::string::npos) << data->title();  // about 25%
    EXPECT_NE(data->title().find("(fraction 0.25)"), std::string::npos) << data->title();
    EXPECT_NE(data->caption().find("/head (fraction 0.25)"), std::string::npos) << data->caption();
    EXPECT_TRUE(data->kept_share().measured);
    EXPECT_EQ(data->budget_text().find("fraction 0.25"), data->budget_text().find('(') + 1);
  }
  testing::remove_tree(dir);
}

}  // namespace
}  // namespace kvscope::gui
