// The figure library shared by `kvscope-cli export` and the GUI (app/figures): every export name
// builds from a synthetic session through the view builders with the run's per-layer data decoded,
// missing captures and bad requests throw naming the problem, decoded parts are write-once.
#include <gtest/gtest.h>

#include <algorithm>
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
    const viz::Figure f = build_figure(store, full_.snapkv, {name, 1, 2, "tokens95_frac", {}});
    EXPECT_NO_THROW(viz::validate(f));
    EXPECT_NO_THROW(viz::export_figure(f, dir_ / (name + ".csv")));
  }
  // The per-head figures carry the decoded data of layer 1, head 2.
  const auto run = load_run_data(store, full_.snapkv, {});
  load_part(store, *run, Part::kKept, 1);
  const auto& kept = *run->kept_set(1, 2);
  const auto tokens = build_figure(store, full_.snapkv, {"tokens", 1, 2, "", [](std::int32_t id) { return "t" + std::to_string(id); }});
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

}  // namespace
}  // namespace kvscope::figures
