// The figure library shared by `kvscope-cli export` and the GUI (app/figures): every export name
// builds from a synthetic session through the view builders with the run's per-layer data decoded,
// missing captures and bad requests throw naming the problem, decoded parts are write-once; a run
// with a heads:pattern=FILE pipeline shows its pattern in the budgets figure and exports it as
// "head-pattern", and a pattern file that went away is named in a panel title.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <variant>

#include "export_figures.h"
#include "figures.h"
#include "gui_test_support.h"
#include "kvscope/viz/cairo_export.h"

namespace kvscope::figures {
namespace {

using gui::testing::make_temp_dir;
using gui::testing::remove_tree;

class FiguresExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("figures_export");
    gui::SyntheticSpec spec;
    spec.n_layer = 3;
    spec.n_head = 4;
    spec.n_head_kv = 4;
    spec.head_dim = 16;
    spec.n_tok = 300;
    spec.n_steps = 8;
    full_ = gui::testing::write_test_session(dir_ / "full.db", spec);
    spec.full_capture = false;
    summary_ = gui::testing::write_test_session(dir_ / "summary.db", spec);
  }
  static void TearDownTestSuite() { remove_tree(dir_); }
  static inline std::filesystem::path dir_;
  static inline gui::SyntheticRuns full_, summary_;
};

TEST_F(FiguresExport, EveryNameBuildsTheViewFigureWithItsData) {
  const auto store = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
  for (const auto& name : figure_names()) {
    SCOPED_TRACE(name);
    if (name == "head-pattern") continue;  // needs a run with a heads stage (HeadPatternFigures below)
    const viz::Figure f = build_figure(store, full_.snapkv, {name, 1, 2, "tokens95_frac", {}});
    EXPECT_NO_THROW(viz::validate(f));
    EXPECT_NO_THROW(viz::export_figure(f, dir_ / (name + ".csv")));
  }
  // The per-head figures carry the decoded data of layer 1, head 2.
  const auto run = load_run_data(store, full_.snapkv, {});
  load_part(store, *run, Part::kKept, 1);
  const auto& kept = *run->kept_set(1, 2);
  const auto tokens =
      build_figure(store, full_.snapkv, {"tokens", 1, 2, "", [](std::int32_t id) { return "t" + std::to_string(id); }});
  const auto& strip = std::get<viz::TokenStrip>(tokens.panels.at(0));
  ASSERT_EQ(strip.category.size(), 300u);
  EXPECT_EQ(std::count(strip.category.begin(), strip.category.end(), 1), static_cast<long>(kept.size()));
  EXPECT_EQ(strip.tokens.at(0), "t" + std::to_string(run->record.info.prompt.tokens.at(0)));
  const auto keys = build_figure(store, full_.snapkv, {"keys", 1, 2, "", {}});
  ASSERT_EQ(keys.panels.size(), 3u);  // histogram, cosine vs attention, PCA
  const auto& hist = std::get<viz::BarChart>(keys.panels[0]);
  double kept_in_hist = 0;
  for (double v : hist.series.at(0).values) kept_in_hist += v;
  EXPECT_EQ(kept_in_hist, static_cast<double>(kept.size()));
  const auto heads = build_figure(store, full_.snapkv, {"heads", 0, 0, "kept", {}});
  const auto& hm = std::get<viz::Heatmap>(heads.panels.at(0));
  EXPECT_EQ(hm.values.at(1 * 4 + 2), static_cast<float>(kept.size()));
}

TEST_F(FiguresExport, MissingCapturesAndBadRequestsThrow) {
  const auto store = sessions::SessionStore::open((dir_ / "summary.db").string(), sessions::OpenMode::kReadOnly);
  for (const char* name : {"keys", "mass", "channels"}) {
    SCOPED_TRACE(name);
    try {
      build_figure(store, summary_.snapkv, {name, 1, 2, "tokens95_frac", {}});
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--capture full"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(build_figure(store, summary_.snapkv, {"tokens", 1, 2, "", {}}));
  EXPECT_THROW(build_figure(store, summary_.snapkv, {"tokens", 7, 0, "", {}}), std::out_of_range);
  EXPECT_THROW(build_figure(store, summary_.snapkv, {"heads", 0, 0, "nope", {}}), std::invalid_argument);
  try {
    build_figure(store, summary_.snapkv, {"nope", 0, 0, "", {}});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown figure 'nope'"), std::string::npos);
  }
}

TEST_F(FiguresExport, PartsAreDecodedOnceAndOnlyWhenStored) {
  const auto store = sessions::SessionStore::open((dir_ / "summary.db").string(), sessions::OpenMode::kReadOnly);
  const auto run = load_run_data(store, summary_.snapkv, {});
  EXPECT_FALSE(run->stored(Part::kAttention, 0));
  EXPECT_TRUE(run->ready(Part::kAttention, 0));  // nothing to decode
  EXPECT_TRUE(run->stored(Part::kKept, 0));
  EXPECT_FALSE(run->ready(Part::kKept, 0));
  load_part(store, *run, Part::kKept, 0);
  const LayerPart* first = run->part(Part::kKept, 0);
  ASSERT_NE(first, nullptr);
  load_part(store, *run, Part::kKept, 0);
  EXPECT_EQ(run->part(Part::kKept, 0), first);
  LayerPart other;
  other.kept = {{1, 2, 3}};
  EXPECT_EQ(run->parts->put(Part::kKept, 0, std::move(other)), first);  // write-once
  EXPECT_THROW(load_part(store, *run, Part::kKept, 3), std::out_of_range);
  EXPECT_THROW(run->parts->put(Part::kCos, -1, {}), std::out_of_range);
}

class HeadPatternFigures : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("head_pattern_figures");
    gui::SyntheticSpec spec;
    spec.n_layer = 3;
    spec.n_head = 4;
    spec.n_head_kv = 4;
    spec.head_dim = 16;
    spec.n_tok = 300;
    spec.n_steps = 4;
    spec.full_capture = false;
    db_ = dir_ / "runs.db";
    runs_ = gui::testing::write_test_session(db_, spec);
    pattern_ = dir_ / "pattern.json";
    save_head_pattern(pattern_, gui::testing::test_head_pattern(3, 4));
    heads_ = gui::testing::write_heads_run(db_, runs_.snapkv, pattern_.string(), gui::testing::test_head_pattern(3, 4));
  }
  void TearDown() override { remove_tree(dir_); }
  std::filesystem::path dir_, db_, pattern_;
  gui::SyntheticRuns runs_;
  std::int64_t heads_ = -1;
};

TEST_F(HeadPatternFigures, BudgetsFigureOfAHeadsRunShowsThePattern) {
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto run = load_run_data(store, heads_, {});
  EXPECT_EQ(head_pattern_file(*run), pattern_.string());
  const viz::Figure f = budgets_figure(*run, nullptr, {});
  ASSERT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 4u) << "kept map, kept per layer, pattern map, windows";
  const auto& map = std::get<viz::Heatmap>(f.panels[2]);
  EXPECT_NE(map.title.find("head pattern pattern.json (duo)"), std::string::npos) << map.title;
  ASSERT_EQ(map.rows, 3);
  ASSERT_EQ(map.cols, 4);
  // On the run's 300-token prompt: dense heads keep 300, layer l's streaming heads 4 + 16 (l + 1).
  EXPECT_EQ(map.values[0], 300.0f);
  EXPECT_EQ(map.values[1], 20.0f);
  EXPECT_EQ(map.values[2 * 4 + 3], 52.0f);
  EXPECT_EQ(map.mask, (std::vector<std::uint8_t>{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}));
  // The measured kept sets agree with the pattern's map.
  const auto& kept = std::get<viz::Heatmap>(f.panels[0]);
  EXPECT_EQ(kept.values, map.values);
  const auto& windows = std::get<viz::BarChart>(f.panels[3]);
  EXPECT_NE(windows.title.find("window per layer"), std::string::npos);
  EXPECT_EQ(windows.series.at(0).values, (std::vector<double>{16, 32, 48}));
  EXPECT_NE(f.caption.find("head pattern " + pattern_.string()), std::string::npos) << f.caption;
  EXPECT_NO_THROW(viz::export_figure(f, dir_ / "budgets.png"));

  // The toggle off, and a run without a heads stage: the two measured panels only.
  EXPECT_EQ(budgets_figure(*run, nullptr, {Side::kA, false}).panels.size(), 2u);
  const auto snapkv = load_run_data(store, runs_.snapkv, {});
  EXPECT_EQ(head_pattern_file(*snapkv), "");
  EXPECT_EQ(budgets_figure(*snapkv, nullptr, {}).panels.size(), 2u);
  // Export by name: budgets carries the pattern panels too.
  EXPECT_EQ(build_figure(store, heads_, {"budgets", 0, 0, "", {}}).panels.size(), 4u);
}

TEST_F(HeadPatternFigures, HeadPatternExportsForAHeadsRunOnly) {
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const viz::Figure f = build_figure(store, heads_, {"head-pattern", 0, 0, "", {}});
  ASSERT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 2u);  // no loss curve in a hand-written pattern
  EXPECT_NE(f.title.find("Head pattern (duo)"), std::string::npos) << f.title;
  EXPECT_NE(f.caption.find("pattern " + pattern_.string()), std::string::npos) << f.caption;
  EXPECT_NO_THROW(viz::export_figure(f, dir_ / "head-pattern.svg"));
  try {
    build_figure(store, runs_.snapkv, {"head-pattern", 0, 0, "", {}});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has no 'heads' stage"), std::string::npos) << e.what();
  }
}

TEST_F(HeadPatternFigures, AMissingPatternFileIsNamedInAPanelTitle) {
  std::filesystem::rename(pattern_, dir_ / "moved.json");
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto run = load_run_data(store, heads_, {});
  const viz::Figure f = budgets_figure(*run, nullptr, {});
  ASSERT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 3u);
  const std::string& title = viz::panel_title(f.panels[2]);
  EXPECT_NE(title.find("head pattern " + pattern_.string() + " cannot be read: no such file"), std::string::npos)
      << title;
  // A file that is not a pattern is named the same way.
  std::ofstream(pattern_) << "{\"format\": \"something else\"}";
  const auto again = load_run_data(store, heads_, {});
  const std::string bad = viz::panel_title(budgets_figure(*again, nullptr, {}).panels.at(2));
  EXPECT_NE(bad.find("cannot be read: not a kvscope head pattern"), std::string::npos) << bad;
  // Export of the pattern itself fails naming the file.
  std::remove(pattern_.c_str());
  try {
    build_figure(store, heads_, {"head-pattern", 0, 0, "", {}});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(pattern_.string() + ": no such file"), std::string::npos) << e.what();
  }
}

TEST_F(HeadPatternFigures, ARelativePatternPathIsFoundNextToTheDatabase) {
  const std::int64_t rel =
      gui::testing::write_heads_run(db_, runs_.snapkv, "pattern.json", gui::testing::test_head_pattern(3, 4));
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto run = load_run_data(store, rel, {});
  EXPECT_EQ(resolve_head_pattern_file(*run, "pattern.json"), pattern_.string());
  EXPECT_EQ(budgets_figure(*run, nullptr, {}).panels.size(), 4u);
}

}  // namespace
}  // namespace kvscope::figures
