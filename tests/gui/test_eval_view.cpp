// Task accuracy of evaluation runs (app/figures/eval_figures.h) and the GUI's Eval view, on a
// session database written straight through SessionStore as `kvscope-cli eval --db` records one
// (eval_test_support.h; no model): the points read back (scores, tasks, needle depth, needle kept),
// the conditions x tasks means, the accuracy figure (one line per pipeline, the full cache as a
// reference line), the per-task bars, the depth x length maps' cells, the figure table's
// "accuracy" / "eval-tasks" / "eval-depth" through kvscope-cli export's path (PNG and CSV), the
// error for a database without evaluation runs, and the view drawn headless: table, figure, sample
// list and a click that opens a sample's run with its needle map.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <variant>

#include "app_state.h"
#include "eval_figures.h"
#include "eval_test_support.h"
#include "eval_view_harness.h"
#include "export_figures.h"
#include "figure_table.h"
#include "gui_test_support.h"
#include "headless.h"
#include "kvscope/viz/cairo_export.h"

namespace kvscope::gui {
namespace {

using figures::EvalPoint;
using testing::make_temp_dir;
using testing::remove_tree;

class EvalView : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("eval_view");
    db_ = (dir_ / "eval.db").string();
    SyntheticSpec spec;
    spec.n_layer = 2;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.head_dim = 16;
    spec.n_tok = 120;
    spec.n_steps = 4;
    runs_ = testing::write_test_session(db_, spec);
    const auto store = sessions::SessionStore::open(db_, sessions::OpenMode::kReadOnly);
    eval_runs_ = testing::write_eval_runs(db_, store.load_run(runs_.snapkv).info);
    empty_db_ = (dir_ / "empty.db").string();
    testing::write_test_session(empty_db_, spec);
  }
  static void TearDownTestSuite() { remove_tree(dir_); }

  static std::vector<EvalPoint> points(bool details = false) {
    const auto store = sessions::SessionStore::open(db_, sessions::OpenMode::kReadOnly);
    return figures::eval_points(store, details);
  }
  /// The point of sample `id` under pipeline `spec` ("" = full) and ratio (< 0: none).
  static const EvalPoint& point(const std::vector<EvalPoint>& ps, const std::string& id, const std::string& spec,
                                double ratio) {
    for (const EvalPoint& p : ps)
      if (p.sample == id && p.pipeline == spec && (ratio < 0 ? !p.has_budget : p.budget.value == ratio)) return p;
    throw std::runtime_error("no point " + id + " " + spec);
  }

  static inline std::filesystem::path dir_;
  static inline std::string db_, empty_db_;
  static inline SyntheticRuns runs_;
  static inline std::vector<std::int64_t> eval_runs_;
};

TEST_F(EvalView, PointsAreTheCompleteEvaluationRunsWithTheirSampleAndNeedle) {
  const auto ps = points(true);
  // 3 samples x 4 conditions; the synthetic runs, the failed and the unfinished attempt are not points.
  ASSERT_EQ(ps.size(), 12u);
  std::vector<std::int64_t> ids;
  for (const auto& p : ps) ids.push_back(p.run);
  EXPECT_EQ(ids, eval_runs_);
  const EvalPoint& full = point(ps, "s0", "", -1);
  EXPECT_FALSE(full.has_budget);  // recorded as pipeline "full", budget fraction 1
  EXPECT_EQ(full.task, "niah_a");
  EXPECT_EQ(full.length, 1000);
  EXPECT_EQ(full.mode, "question-agnostic");
  EXPECT_DOUBLE_EQ(full.score, 1.0);
  EXPECT_DOUBLE_EQ(full.depth, 40.0);       // first needle token 40 of question_start 100
  EXPECT_DOUBLE_EQ(full.needle_kept, 0.5);  // mean of {1, .5, 0, .5}
  EXPECT_EQ(full.kept_layers, 2);
  EXPECT_EQ(full.kept_heads, 2);
  EXPECT_EQ(full.needle_kept_map, (std::vector<float>{1.0f, 0.5f, 0.0f, 0.5f}));
  EXPECT_EQ(full.output, " 42.");
  EXPECT_EQ(full.answers, std::vector<std::string>{"42"});
  const EvalPoint& s1 = point(ps, "s1", "snapkv:window=8+uniform", 0.5);
  EXPECT_TRUE(s1.has_budget);
  EXPECT_EQ(s1.budget.unit, BudgetUnit::kCompressionRatio);
  EXPECT_DOUBLE_EQ(s1.score, 0.0);
  EXPECT_DOUBLE_EQ(s1.depth, 10.0);  // the earlier of its two needles
  EXPECT_DOUBLE_EQ(s1.needle_kept, 1.0);
  EXPECT_EQ(s1.length, 2000);
  const EvalPoint& s2 = point(ps, "s2", "streamingllm:sink=4+uniform", 0.5);
  EXPECT_EQ(s2.task, "vt");
  EXPECT_TRUE(std::isnan(s2.depth));  // no needle
  EXPECT_TRUE(std::isnan(s2.needle_kept));
  EXPECT_TRUE(s2.needle_kept_map.empty());
  // Without details: no outputs or maps, the rest the same.
  const auto light = points(false);
  ASSERT_EQ(light.size(), ps.size());
  EXPECT_TRUE(light[0].output.empty());
  EXPECT_TRUE(light[0].needle_kept_map.empty());
  EXPECT_DOUBLE_EQ(light[0].needle_kept, ps[0].needle_kept);
  EXPECT_EQ(figures::eval_depth_bin(0), 0);
  EXPECT_EQ(figures::eval_depth_bin(40), 4);
  EXPECT_EQ(figures::eval_depth_bin(99.9), 9);
  EXPECT_EQ(figures::eval_depth_bin(100), 9);
  EXPECT_EQ(figures::eval_depth_bin(NAN), -1);
}

TEST_F(EvalView, SummaryHasTheFullCacheFirstThenEachPipelineByBudget) {
  const auto ps = points();
  const auto sum = figures::eval_summary(ps);
  EXPECT_EQ(sum.tasks, (std::vector<std::string>{"niah_a", "vt"}));
  ASSERT_EQ(sum.conditions.size(), 4u);
  const std::vector<std::string> labels = {"full cache", "snapkv @ ratio 0.5", "snapkv @ ratio 0.8",
                                           "streamingllm @ ratio 0.5"};
  const std::vector<double> means = {1.0, 0.5, 0.0, 2.0 / 3.0};
  for (std::size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(labels[i]);
    EXPECT_EQ(sum.conditions[i].label, labels[i]);
    EXPECT_NEAR(sum.conditions[i].mean, means[i], 1e-12);
    EXPECT_EQ(sum.conditions[i].points.size(), 3u);
  }
  // snapkv@0.5: niah_a = mean(1, 0), vt = 0.5.
  EXPECT_DOUBLE_EQ(sum.conditions[1].task_mean[0], 0.5);
  EXPECT_DOUBLE_EQ(sum.conditions[1].task_mean[1], 0.5);
  EXPECT_EQ(sum.conditions[1].task_n, (std::vector<std::int64_t>{2, 1}));
  // Pipelines of the same policies are told apart by the parameters that differ.
  std::vector<EvalPoint> two(2);
  two[0].pipeline = "snapkv:kernel=5,window=32+uniform";
  two[1].pipeline = "snapkv:kernel=5,window=64+uniform";
  EXPECT_EQ(figures::eval_pipeline_label(two, two[0].pipeline), "snapkv window=32");
  EXPECT_EQ(figures::eval_pipeline_label(two, two[1].pipeline), "snapkv window=64");
  EXPECT_EQ(figures::eval_pipeline_label(two, ""), "full cache");
}

TEST_F(EvalView, AccuracyFigureHasOneLinePerPipelineAndTheFullCacheAsAReferenceLine) {
  const viz::Figure f = figures::accuracy_figure(points(), db_);
  EXPECT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 1u);  // one budget unit, one panel for every task
  const auto& p = std::get<viz::LinePlot>(f.panels[0]);
  EXPECT_NE(p.x.label.find("fraction of context evicted"), std::string::npos) << p.x.label;
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].name, "snapkv");
  EXPECT_EQ(p.series[0].x, (std::vector<double>{0.5, 0.8}));
  EXPECT_EQ(p.series[0].y, (std::vector<double>{0.5, 0.0}));
  EXPECT_NE(p.series[0].marker, viz::Marker::None);
  EXPECT_EQ(p.series[1].name, "streamingllm");
  EXPECT_EQ(p.series[1].x, (std::vector<double>{0.5}));
  ASSERT_EQ(p.series[1].y.size(), 1u);
  EXPECT_NEAR(p.series[1].y[0], 2.0 / 3.0, 1e-12);
  ASSERT_EQ(p.rules.size(), 1u);
  EXPECT_FALSE(p.rules[0].vertical);
  EXPECT_DOUBLE_EQ(p.rules[0].value, 1.0);
  EXPECT_EQ(p.rules[0].name.rfind("full cache", 0), 0u) << p.rules[0].name;
  EXPECT_NE(f.caption.find("3 samples, 2 tasks"), std::string::npos) << f.caption;
}

TEST_F(EvalView, TasksFigureHasABarPerConditionAndTask) {
  const viz::Figure f = figures::eval_tasks_figure(points(), db_);
  EXPECT_NO_THROW(viz::validate(f));
  const auto& b = std::get<viz::BarChart>(f.panels.at(0));
  EXPECT_EQ(b.categories, (std::vector<std::string>{"niah_a", "vt", "all tasks"}));
  ASSERT_EQ(b.series.size(), 4u);
  EXPECT_EQ(b.series[0].name, "full cache");
  EXPECT_EQ(b.series[0].values, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(b.series[1].name, "snapkv @ ratio 0.5");
  EXPECT_EQ(b.series[1].values, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(b.series[3].values[1], 0.0);  // streamingllm on vt
}

TEST_F(EvalView, DepthFigureAveragesScoresPerDepthBinAndLength) {
  const viz::Figure f = figures::eval_depth_figure(points(), db_);
  EXPECT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 4u);                       // one map per condition; s2 (no needle) is left out
  const auto& h = std::get<viz::Heatmap>(f.panels[1]);  // snapkv @ ratio 0.5
  EXPECT_EQ(h.title, "snapkv @ ratio 0.5 (n=2)");
  EXPECT_EQ(h.rows, 10);
  EXPECT_EQ(h.cols, 2);
  EXPECT_EQ(h.col_labels, (std::vector<std::string>{"1000", "2000"}));
  EXPECT_EQ(h.row_labels.front(), "0-10%");
  auto cell = [&](const viz::Heatmap& m, int row, int col) {
    return m.values[static_cast<std::size_t>(row * m.cols + col)];
  };
  EXPECT_FLOAT_EQ(cell(h, 4, 0), 1.0f);  // s0: depth 40%, length 1000, score 1
  EXPECT_FLOAT_EQ(cell(h, 1, 1), 0.0f);  // s1: depth 10%, length 2000, score 0
  int finite = 0;
  for (float v : h.values) finite += !std::isnan(v);
  EXPECT_EQ(finite, 2);
  const auto& full = std::get<viz::Heatmap>(f.panels[0]);
  EXPECT_FLOAT_EQ(cell(full, 4, 0), 1.0f);
  // No sample with a needle: a note instead of maps.
  std::vector<EvalPoint> no_needle(1);
  no_needle[0].task = "vt";
  const viz::Figure g = figures::eval_depth_figure(no_needle, db_);
  EXPECT_NO_THROW(viz::validate(g));
  EXPECT_NE(viz::panel_title(g.panels.at(0)).find("no evaluation sample has a needle"), std::string::npos);
}

TEST_F(EvalView, TheFigureTableExportsThemForAnyRunOfTheDatabase) {
  const auto store = sessions::SessionStore::open(db_, sessions::OpenMode::kReadOnly);
  for (const char* name : {"accuracy", "eval-tasks", "eval-depth"}) {
    SCOPED_TRACE(name);
    const figures::FigureEntry* e = figures::find_figure(name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->scope, figures::FigureScope::kDatabase);
    EXPECT_NE(std::find(figures::figure_names().begin(), figures::figure_names().end(), name),
              figures::figure_names().end());
    viz::Figure f;
    ASSERT_NO_THROW(f = figures::build_figure(store, runs_.snapkv, {name, -1, -1, "tokens95_frac", {}}));
    EXPECT_NO_THROW(viz::export_figure(f, dir_ / (std::string(name) + ".png")));
    EXPECT_GT(std::filesystem::file_size(dir_ / (std::string(name) + ".png")), 1000u);
    viz::export_csv(f, dir_ / (std::string(name) + ".csv"));
    const std::string csv = testing::read_text(dir_ / (std::string(name) + ".csv"));
    if (std::string(name) == "accuracy") {
      EXPECT_NE(csv.find("hline"), std::string::npos) << csv;
      EXPECT_NE(csv.find("snapkv"), std::string::npos) << csv;
    }
  }
}

TEST_F(EvalView, ADatabaseWithoutEvaluationRunsIsAnError) {
  const auto store = sessions::SessionStore::open(empty_db_, sessions::OpenMode::kReadOnly);
  EXPECT_TRUE(figures::eval_points(store).empty());
  for (const char* name : {"accuracy", "eval-tasks", "eval-depth"}) {
    SCOPED_TRACE(name);
    try {
      figures::build_figure(store, 1, {name, -1, -1, "tokens95_frac", {}});
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "no evaluation runs in " + empty_db_ + " (record them with kvscope-cli eval --db)");
    }
  }
}

TEST_F(EvalView, NeedleKeptFigureIsTheRunsLayerByHeadMap) {
  const auto ps = points(true);
  const viz::Figure f = figures::needle_kept_figure(point(ps, "s0", "", -1), "full cache");
  EXPECT_NO_THROW(viz::validate(f));
  const auto& h = std::get<viz::Heatmap>(f.panels.at(0));
  EXPECT_EQ(h.rows, 2);
  EXPECT_EQ(h.cols, 2);
  EXPECT_EQ(h.values, (std::vector<float>{1.0f, 0.5f, 0.0f, 0.5f}));
  const viz::Figure none = figures::needle_kept_figure(point(ps, "s2", "", -1), "full cache");
  EXPECT_NO_THROW(viz::validate(none));
  EXPECT_TRUE(std::holds_alternative<viz::LinePlot>(none.panels.at(0)));  // a note: no needle
}

// ---- the view, headless -------------------------------------------------------------------------

using Headless = testing::EvalViewHarness;

TEST_F(EvalView, ViewShowsTheTableFigureAndSamplesAndAClickOpensASample) {
  Headless h(db_, eval_runs_[1]);  // run A: s0 under snapkv @ 0.5
  ASSERT_TRUE(h.ok) << h.s.status;
  ASSERT_TRUE(parse_view("eval"));
  for (int i = 0; i < 4; ++i) h.frame();
  const EvalState& st = h.s.eval;
  EXPECT_EQ(st.db, db_);
  ASSERT_EQ(st.points.size(), 12u);
  EXPECT_TRUE(st.error.empty()) << st.error;
  EXPECT_EQ(st.summary.conditions.size(), 4u);
  EXPECT_EQ(st.condition, "snapkv @ ratio 0.5");  // run A's condition
  ASSERT_TRUE(st.fig.valid()) << st.fig.error();
  EXPECT_EQ(st.fig.figure().title, "Task accuracy vs budget");
  ASSERT_TRUE(st.needle.valid()) << st.needle.error();  // run A's needle map
  EXPECT_TRUE(std::holds_alternative<viz::Heatmap>(st.needle.figure().panels.at(0)));
  EXPECT_EQ(figure_of(h.s, View("eval")), &h.s.eval.fig);
  // Click down the sample list (right half) until a sample opens: it becomes run A.
  bool opened = false;
  for (float y = 225; y < 600 && !opened; y += 9) {  // below the conditions table
    h.frame({780, y}, true);                         // inside the sample column, away from column borders (resizing)
    h.frame({780, y}, false);
    opened = st.sample_run >= 0;
  }
  ASSERT_TRUE(opened) << "no sample row was clicked";
  ASSERT_TRUE(h.s.a);
  EXPECT_EQ(h.s.a->ref.run, st.sample_run);
  const auto& conds = st.summary.conditions;
  const auto c = std::find_if(conds.begin(), conds.end(), [&](const auto& x) { return x.label == st.condition; });
  ASSERT_NE(c, conds.end());
  const auto& cond = *c;
  EXPECT_EQ(st.condition, "snapkv @ ratio 0.5");
  EXPECT_NE(std::find_if(cond.points.begin(), cond.points.end(),
                         [&](std::size_t i) { return st.points[i].run == st.sample_run; }),
            cond.points.end())
      << "the sample opened is not one of the selected condition's";
  // The other figures draw too.
  for (int fig = 0; fig < 3; ++fig) {
    h.s.eval.figure = fig;
    h.frame();
    EXPECT_TRUE(st.fig.valid()) << fig << ": " << st.fig.error();
  }
}

TEST_F(EvalView, ViewOpensOnADatabaseWithoutEvaluationRunsAndSaysSo) {
  Headless h(empty_db_);
  ASSERT_TRUE(h.ok) << h.s.status;
  for (int i = 0; i < 3; ++i) h.frame({700, 400}, i == 1);
  const EvalState& st = h.s.eval;
  EXPECT_EQ(st.db, empty_db_);
  EXPECT_TRUE(st.points.empty());
  EXPECT_TRUE(st.error.empty()) << st.error;
  ASSERT_TRUE(st.fig.valid()) << st.fig.error();
  EXPECT_NE(viz::panel_title(st.fig.figure().panels.at(0)).find("no evaluation runs in"), std::string::npos);
}

}  // namespace
}  // namespace kvscope::gui
