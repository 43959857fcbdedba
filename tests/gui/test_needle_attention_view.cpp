// The full cache's attention to the needle beside a run's needle kept (Eval view, docs/eval.md):
// the "needle_attention" blob of the full-cache runs read back, the full-cache run of a sample found
// from any of its runs, the two maps side by side on one colour scale, and the view drawn headless
// with both maps, or with the note to add the full cache when the evaluation has none.
#include <gtest/gtest.h>

#include <algorithm>
#include <variant>

#include "app_state.h"
#include "eval_figures.h"
#include "eval_test_support.h"
#include "eval_view_harness.h"
#include "gui_test_support.h"
#include "headless.h"

namespace kvscope::gui {
namespace {

using figures::EvalPoint;
using testing::make_temp_dir;
using testing::remove_tree;

// The runs of write_runs: samples outer, conditions inner (with the full cache: first, 4 each).
constexpr std::size_t kConditions = 4;
const std::vector<float> kS0Attention = {0.25f, 0.0f, 1.0f, 0.125f};  // [2 layers x 2 KV heads]

/// The evaluation of eval_test_support.h (its samples and conditions, the runs as
/// write_eval_runs records them), with `full`: also the full cache's runs, s0's with the blob
/// "needle_attention" kS0Attention (s1's and s2's without, as runs older than the blob); without:
/// pipelines alone. Returns the run ids, samples outer, conditions inner.
std::vector<std::int64_t> write_runs(const std::string& db, const sessions::RunInfo& info, bool full) {
  auto store = sessions::SessionStore::open(db);
  std::vector<std::int64_t> ids;
  for (const auto& s : testing::eval_test_samples())
    for (const auto& c : testing::eval_test_conditions()) {
      if (c.pipeline.empty() && !full) continue;
      sessions::RunInfo r = info;
      r.name = "eval " + s.id;
      r.sweep_key = "eval1|/models/m|data=/x|y.jsonl#1|question-agnostic|fp32|" + s.id + "|" +
                    (c.pipeline.empty() ? std::string("full") : c.pipeline) + "|" +
                    (c.ratio < 0 ? std::string("none") : "compression_ratio=" + std::to_string(c.ratio).substr(0, 3));
      r.pipeline = {c.pipeline.empty() ? "full" : c.pipeline, {}};
      r.budget = c.ratio < 0 ? sessions::BudgetInfo{sessions::BudgetUnit::kFraction, 1.0}
                             : sessions::BudgetInfo{sessions::BudgetUnit::kCompressionRatio, c.ratio};
      const std::int64_t run = store.begin_run(r);
      store.set_summary(run, "eval_score", 1.0);
      const std::string js = "{\"id\":\"" + s.id + "\",\"task\":\"" + s.task +
                             "\",\"answers\":[\"42\"],\"mode\":\"question-agnostic\",\"question_start\":" +
                             std::to_string(s.question_start) + "}";
      store.add_blob(run, sessions::Blob::of<std::uint8_t>("eval_sample", -1, -1, {std::int64_t(js.size())},
                                                           std::vector<std::uint8_t>(js.begin(), js.end())));
      store.add_blob(run, sessions::Blob::of<std::int64_t>("needle_tokens", -1, -1,
                                                           {std::int64_t(s.needles.size() / 2), 2}, s.needles));
      if (!s.needle_kept.empty())
        store.add_blob(run, sessions::Blob::of<float>("needle_kept", -1, -1, {2, 2}, s.needle_kept));
      if (c.pipeline.empty() && s.id == "s0")
        store.add_blob(run, sessions::Blob::of<float>("needle_attention", -1, -1, {2, 2}, kS0Attention));
      store.finish_run(run, {{42}, " 42."});
      ids.push_back(run);
    }
  return ids;
}

class NeedleAttentionView : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("needle_attention_view");
    SyntheticSpec spec;
    spec.n_layer = 2;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.head_dim = 16;
    spec.n_tok = 120;
    spec.n_steps = 4;
    for (const bool full : {true, false}) {
      const std::string db = (dir_ / (full ? "with_full.db" : "no_full.db")).string();
      const SyntheticRuns runs = testing::write_test_session(db, spec);
      sessions::RunInfo info;
      {
        const auto store = sessions::SessionStore::open(db, sessions::OpenMode::kReadOnly);
        info = store.load_run(runs.snapkv).info;
      }
      (full ? with_full_ids_ : no_full_ids_) = write_runs(db, info, full);
      (full ? with_full_db_ : no_full_db_) = db;
    }
  }
  static void TearDownTestSuite() { remove_tree(dir_); }

  static std::vector<EvalPoint> points(const std::string& db) {
    const auto store = sessions::SessionStore::open(db, sessions::OpenMode::kReadOnly);
    return figures::eval_points(store, true);
  }
  static const EvalPoint& by_run(const std::vector<EvalPoint>& ps, std::int64_t run) {
    for (const EvalPoint& p : ps)
      if (p.run == run) return p;
    throw std::runtime_error("no run " + std::to_string(run));
  }

  static inline std::filesystem::path dir_;
  static inline std::string with_full_db_, no_full_db_;
  static inline std::vector<std::int64_t> with_full_ids_, no_full_ids_;
};

TEST_F(NeedleAttentionView, FullCacheRunsReadBackTheirMapAndEverySampleFindsItsFullRun) {
  const auto ps = points(with_full_db_);
  ASSERT_EQ(ps.size(), 12u);
  const EvalPoint& full = by_run(ps, with_full_ids_[0]);
  EXPECT_TRUE(full.pipeline.empty());
  EXPECT_EQ(full.attention_layers, 2);
  EXPECT_EQ(full.attention_heads, 2);
  EXPECT_EQ(full.needle_attention_map, kS0Attention);
  EXPECT_EQ(full.sample_key, "eval1|/models/m|data=/x|y.jsonl#1|fp32|s0");
  for (std::size_t c = 0; c < kConditions; ++c) {  // s0 under every condition: its full cache
    const EvalPoint& p = by_run(ps, with_full_ids_[c]);
    EXPECT_EQ(p.sample_key, full.sample_key);
    EXPECT_EQ(figures::full_cache_point(ps, p), &full) << p.pipeline;
  }
  const EvalPoint& s1 = by_run(ps, with_full_ids_[kConditions + 1]);  // s1 under snapkv @ 0.5
  const EvalPoint* s1_full = figures::full_cache_point(ps, s1);
  ASSERT_NE(s1_full, nullptr);
  EXPECT_EQ(s1_full->run, with_full_ids_[kConditions]);
  EXPECT_TRUE(s1_full->needle_attention_map.empty());
  // Without a full-cache run in the evaluation: none.
  const auto none = points(no_full_db_);
  ASSERT_EQ(none.size(), 9u);
  for (const EvalPoint& p : none) EXPECT_EQ(figures::full_cache_point(none, p), nullptr) << p.run;
}

TEST_F(NeedleAttentionView, FigureHasBothMapsOnOneScaleOrANoteForAnOlderFullRun) {
  const auto ps = points(with_full_db_);
  const EvalPoint& p = by_run(ps, with_full_ids_[1]);  // s0 under snapkv @ 0.5
  const viz::Figure f = figures::needle_kept_figure(p, "snapkv @ ratio 0.5", figures::full_cache_point(ps, p));
  EXPECT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 2u);
  const auto& kept = std::get<viz::Heatmap>(f.panels[0]);
  const auto& attention = std::get<viz::Heatmap>(f.panels[1]);
  EXPECT_EQ(kept.title, "needle kept (this run)");
  EXPECT_EQ(attention.title, "full cache: attention to needle (question + answer)");
  EXPECT_EQ(kept.values, (std::vector<float>{1.0f, 0.5f, 0.0f, 0.5f}));
  EXPECT_EQ(attention.values, kS0Attention);
  EXPECT_EQ(attention.rows, 2);
  EXPECT_EQ(attention.cols, 2);
  for (const viz::Heatmap* h : {&kept, &attention}) {
    ASSERT_TRUE(h->value_range);
    EXPECT_EQ(h->value_range->lo, 0.0);
    EXPECT_EQ(h->value_range->hi, 1.0);
    EXPECT_EQ(h->colormap, kept.colormap);
  }
  EXPECT_NE(f.caption.find("full cache (run #" + std::to_string(with_full_ids_[0]) + ")"), std::string::npos)
      << f.caption;
  // s1's full-cache run has no map: a note in its place.
  const EvalPoint& s1 = by_run(ps, with_full_ids_[kConditions + 1]);
  const viz::Figure g = figures::needle_kept_figure(s1, "snapkv @ ratio 0.5", figures::full_cache_point(ps, s1));
  EXPECT_NO_THROW(viz::validate(g));
  ASSERT_EQ(g.panels.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<viz::Heatmap>(g.panels[0]));
  EXPECT_NE(viz::panel_title(g.panels[1]).find("recorded no needle_attention"), std::string::npos);
  // Without a full run: the needle-kept map alone.
  const viz::Figure alone = figures::needle_kept_figure(p, "snapkv @ ratio 0.5");
  EXPECT_EQ(alone.panels.size(), 1u);
}

// ---- the view, headless -------------------------------------------------------------------------

using Headless = testing::EvalViewHarness;

TEST_F(NeedleAttentionView, ViewShowsTheFullCachesMapBesideTheRunsNeedleKept) {
  Headless h(with_full_db_, with_full_ids_[1]);  // run A: s0 under snapkv @ 0.5
  ASSERT_TRUE(h.ok) << h.s.status;
  for (int i = 0; i < 4; ++i) h.frame();
  const EvalState& st = h.s.eval;
  ASSERT_TRUE(st.needle.valid()) << st.needle.error();
  EXPECT_EQ(st.needle_full_run, with_full_ids_[0]);
  EXPECT_TRUE(st.needle_note.empty()) << st.needle_note;
  const auto& panels = st.needle.figure().panels;
  ASSERT_EQ(panels.size(), 2u);
  EXPECT_EQ(viz::panel_title(panels[0]), "needle kept (this run)");
  EXPECT_EQ(viz::panel_title(panels[1]), "full cache: attention to needle (question + answer)");
  // The full cache's cells are where the mouse finds them (what the tooltip names).
  const auto rect = st.needle.cell_rect(1, 1, 0);
  ASSERT_TRUE(rect);
  const auto hit =
      st.needle.hit({static_cast<float>(rect->x + rect->w / 2), static_cast<float>(rect->y + rect->h / 2)});
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->panel, 1);
  EXPECT_EQ(hit->row, 1);
  EXPECT_EQ(hit->col, 0);
  h.frame({static_cast<float>(rect->x + rect->w / 2), static_cast<float>(rect->y + rect->h / 2)});  // the tooltip draws
  EXPECT_TRUE(st.needle.valid());
}

TEST_F(NeedleAttentionView, ViewSaysToAddTheFullCacheWhenTheEvaluationHasNone) {
  Headless h(no_full_db_, no_full_ids_[0]);  // run A: s0 under snapkv @ 0.5
  ASSERT_TRUE(h.ok) << h.s.status;
  for (int i = 0; i < 4; ++i) h.frame();
  const EvalState& st = h.s.eval;
  ASSERT_TRUE(st.needle.valid()) << st.needle.error();
  EXPECT_EQ(st.needle_full_run, -1);
  EXPECT_EQ(st.needle_note, figures::no_full_cache_note());
  EXPECT_NE(st.needle_note.find("full cache"), std::string::npos);
  EXPECT_NE(st.needle_note.find("without --pipeline"), std::string::npos);
  ASSERT_EQ(st.needle.figure().panels.size(), 1u);
  EXPECT_EQ(viz::panel_title(st.needle.figure().panels[0]), "needle kept (this run)");
}

}  // namespace
}  // namespace kvscope::gui
