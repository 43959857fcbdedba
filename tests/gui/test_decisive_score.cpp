// The decisive score as the views show it (issue: "the score shown is not the score that decided"):
// runs of the embedded pycode-16m under each scoring policy and budget stage, recorded at capture
// full, then read back as the views read them. Every head's ranking must agree with its kept set
// (no evicted entry above the cutoff), the Attention figure's cutoff line must be the lowest kept
// score, its shaded regions exactly the always-kept positions; and rank_head on hand-made cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include "figures.h"
#include "gui_test_support.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "score_rank.h"
#include "session_record.h"

namespace kvscope::gui::testing {
namespace {

constexpr float kKeep = std::numeric_limits<float>::max();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const float* t_all() {
  static const float t[] = {kKeep, kKeep, 2, 2, 1, kKeep};
  return t;
}

TEST(ScoreRank, KeptEntriesTakeTheFirstRanksInScoreOrder) {
  //                 0     1     2    3     4     5      6
  const float s[] = {0.5f, 0.9f, kNaN, 0.1f, 0.9f, kKeep, 0.3f};
  const std::vector<std::int64_t> kept = {1, 3, 5};  // 3 is kept below the evicted 0, 4, 6 (a later block's)
  const figures::HeadRanking r = figures::rank_head(s, 7, &kept);
  EXPECT_EQ(r.n_kept, 3);
  EXPECT_EQ(r.n_always, 1);
  // Kept: 5 (always) > 1 (0.9) > 3 (0.1); evicted: 4 (0.9) > 0 (0.5) > 6 (0.3) > 2 (NaN).
  EXPECT_EQ(r.rank, (std::vector<std::int32_t>{5, 2, 7, 3, 4, 1, 6}));
  // One position at a time, without the sort, and the summary without ranks agree.
  for (std::int64_t p = 0; p < 7; ++p) {
    const figures::PositionRank pr = figures::rank_position(s, 7, &kept, p);
    EXPECT_EQ(pr.rank, r.rank[static_cast<std::size_t>(p)]) << p;
    EXPECT_EQ(pr.kept, r.kept[static_cast<std::size_t>(p)] != 0) << p;
    EXPECT_EQ(pr.n_kept, 3);
    EXPECT_EQ(pr.n_always, 1);
    EXPECT_FLOAT_EQ(pr.cutoff_kept, 0.1f);
    EXPECT_EQ(pr.run_first, p == 5 ? 5 : -1);
  }
  for (std::int64_t p = 0; p < 6; ++p)
    EXPECT_EQ(figures::rank_position(t_all(), 6, nullptr, p).rank, (std::vector<std::int32_t>{1, 2, 4, 5, 6, 3})[p]);
  const auto quick = figures::rank_head(s, 7, &kept, false);
  EXPECT_TRUE(quick.rank.empty());
  EXPECT_EQ(quick.kept, r.kept);
  EXPECT_EQ(quick.n_kept, 3);
  EXPECT_FLOAT_EQ(quick.cutoff_kept, 0.1f);
  EXPECT_FLOAT_EQ(r.cutoff_kept, 0.1f);
  EXPECT_FLOAT_EQ(r.best_evicted, 0.9f);
  ASSERT_EQ(r.always_kept.size(), 1u);
  EXPECT_EQ(r.always_kept[0], (std::pair<std::int64_t, std::int64_t>{5, 5}));
  // Without kept sets (a full-cache run) everything is kept and ties go to the lower position.
  const float t[] = {kKeep, kKeep, 2, 2, 1, kKeep};
  const auto all = figures::rank_head(t, 6, nullptr);
  EXPECT_EQ(all.rank, (std::vector<std::int32_t>{1, 2, 4, 5, 6, 3}));
  EXPECT_TRUE(std::isnan(all.best_evicted));
  EXPECT_EQ(all.always_kept, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}, {5, 5}}));
  EXPECT_EQ(figures::always_kept_name("snapkv", 0, 1, 6), "sink tokens");
  EXPECT_EQ(figures::always_kept_name("snapkv", 5, 5, 6), "observation window");
  EXPECT_EQ(figures::always_kept_name("h2o", 4, 5, 6), "recent tokens");
}

class DecisiveScore : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
    dir_ = make_temp_dir("decisive");
  }
  void TearDown() override { remove_tree(dir_); }
  std::filesystem::path dir_;
};

TEST_F(DecisiveScore, RanksAgreeWithKeptSetsAndTheFigureShowsCutoffAndRegions) {
  const Model model = load_model(pycode_dir(), LoadOptions{});
  const Engine engine(model);
  PolicyRegistry registry;
  register_builtin_policies(registry);
  const std::string text = read_text(pycode_dir() / "golden/prompts/argparse_head.py").substr(0, 1500);
  auto store = sessions::SessionStore::open((dir_ / "s.db").string());
  const std::vector<std::string> specs = {"snapkv:window=16",
                                          "snapkv:window=16+adakv",
                                          "pyramidkv:window=16+pyramid",
                                          "keydiff",
                                          "h2o:recent=8",
                                          "tova",
                                          "knorm",
                                          "streamingllm:sink=4"};
  for (const std::string& spec : specs) {
    SCOPED_TRACE(spec);
    const Pipeline p(registry, spec);
    GenerateRequest req;
    req.prompt_ids = model.tokenizer->encode(text);
    req.max_new_tokens = 1;
    req.pipeline = &p;
    req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.6};
    req.capture = CaptureLevel::kFull;
    std::int64_t id = -1;
    run::generate_into_store(store, engine, &p, registry, req, text, spec, std::nullopt, id);
    const auto r = figures::load_run_data(store, id, {});
    ASSERT_TRUE(r->has_score);
    for (std::int64_t l = 0; l < r->n_layer; ++l) {
      figures::load_part(store, *r, figures::Part::kScore, l);
      figures::load_part(store, *r, figures::Part::kKept, l);
      for (std::int64_t h = 0; h < r->n_head_kv; ++h) {
        const float* s = r->score_row(l, h);
        ASSERT_NE(s, nullptr);
        const auto rk = figures::rank_head(s, r->n_tok, r->kept_set(l, h));
        ASSERT_EQ(rk.n_kept, r->kept_count(l, h));
        ASSERT_LT(rk.n_kept, r->n_tok);
        // The kept set is a top-k of the decisive score: no evicted entry above the cutoff.
        EXPECT_GE(rk.cutoff_kept, rk.best_evicted) << "layer " << l << " head " << h;
        for (std::int64_t p : *r->kept_set(l, h)) EXPECT_LE(rk.rank[static_cast<std::size_t>(p)], rk.n_kept);
        // The tooltip's one-position answer is the sorted ranking's.
        for (std::int64_t p = 0; p < r->n_tok; p += 97)
          ASSERT_EQ(figures::rank_position(s, r->n_tok, r->kept_set(l, h), p).rank,
                    rk.rank[static_cast<std::size_t>(p)])
              << "layer " << l << " head " << h << " position " << p;
      }
    }
    // The Attention figure of layer 1, head 1: the cutoff line is the lowest kept score and the
    // shaded regions are the always-kept positions.
    const figures::Selection sel{1, 1, -1};
    const viz::Figure f = figures::attention_figure(*r, {}, sel, 800);
    ASSERT_EQ(f.panels.size(), 3u);
    ASSERT_TRUE(f.share_x);
    const auto& lp = std::get<viz::LinePlot>(f.panels[1]);
    const auto rk = figures::rank_head(r->score_row(1, 1), r->n_tok, r->kept_set(1, 1));
    bool has_cutoff = false;
    for (const auto& rule : lp.rules)
      if (!rule.vertical) {
        has_cutoff = true;
        EXPECT_FLOAT_EQ(static_cast<float>(rule.value), rk.cutoff_kept);
      }
    EXPECT_EQ(has_cutoff, std::isfinite(rk.cutoff_kept) && (!lp.y.log || rk.cutoff_kept > 0));
    std::int64_t shaded = 0;
    for (const auto& sp : lp.spans) shaded += static_cast<std::int64_t>(sp.hi - sp.lo) + 1;
    EXPECT_EQ(shaded, rk.n_always);
    if (spec.rfind("snapkv", 0) == 0) {
      ASSERT_EQ(lp.spans.size(), 1u);
      EXPECT_EQ(lp.spans[0].hi, double(r->n_tok - 1));
      EXPECT_EQ(lp.spans[0].lo, double(r->n_tok - 16));
      EXPECT_NE(lp.spans[0].name.find("observation window"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace kvscope::gui::testing
