// The two extension tables round-trip: every view of view_table.cpp parses back from its
// `--view NAME` to its entry, with the names, titles and tab order of before; every figure of
// figure_table.cpp builds for a full-capture run (all of them through their builder, the CLI's
// through build_figure) and, for a summary run, builds or throws the documented "needs --capture
// full" error; an unknown figure name throws std::invalid_argument listing the known names.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "app_state.h"
#include "eval_test_support.h"
#include "export_figures.h"
#include "figure_table.h"
#include "figures.h"
#include "gui_test_support.h"
#include "kvscope/viz/cairo_export.h"

namespace kvscope::gui {
namespace {

using testing::make_temp_dir;
using testing::remove_tree;

// ---- views ------------------------------------------------------------------------------------------

TEST(ViewTable, NamesTitlesAndTabOrderAreThoseOfTheCommandLine) {
  const std::vector<std::pair<std::string, std::string>> expected = {{"sessions", "Sessions"},
                                                                     {"run", "Run"},
                                                                     {"heads", "Heads"},
                                                                     {"tokens", "Tokens"},
                                                                     {"attention", "Attention"},
                                                                     {"keys", "Key geometry"},
                                                                     {"channels", "Channels"},
                                                                     {"budgets", "Budgets"},
                                                                     {"fidelity", "Fidelity"},
                                                                     {"timeline", "Timeline"},
                                                                     {"selection", "Selection"},
                                                                     {"compare", "Compare"},
                                                                     {"eval", "Eval"}};
  ASSERT_EQ(view_table().size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(view_table()[i].name, expected[i].first);
    EXPECT_STREQ(view_table()[i].title, expected[i].second.c_str());
  }
  std::vector<View> all(kAllViews.begin(), kAllViews.end());
  ASSERT_EQ(all.size(), view_table().size());
  EXPECT_EQ(kAllViews.size(), view_table().size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], view_table()[i].view());
  EXPECT_EQ(view_names(),
            "sessions, run, heads, tokens, attention, keys, channels, budgets, fidelity, timeline, selection, compare, "
            "eval");
}

TEST(ViewTable, EveryEntryRoundTripsThroughItsName) {
  AppState s;
  std::set<std::string_view> names;
  std::set<const FigureView*> figures;
  for (const ViewEntry& e : view_table()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name";
    // The name parses back to the entry, through parse_view and --view.
    const std::string name(e.name);  // parse_view must not keep the caller's string
    const std::optional<View> v = parse_view(name);
    ASSERT_TRUE(v);
    EXPECT_EQ(*v, e.view());
    EXPECT_EQ(view_entry(*v), &e);
    EXPECT_EQ(view_name(*v), e.name);
    EXPECT_STREQ(view_title(*v), e.title);
    EXPECT_EQ(parse_gui_options({"--view", name}).view, e.view());
    // A draw function; the figure (if any) is the view's own, in AppState.
    EXPECT_NE(e.draw, nullptr);
    EXPECT_EQ(view_has_figure(*v), e.figure != nullptr);
    EXPECT_EQ(figure_of(s, *v), e.figure ? e.figure(s) : nullptr);
    if (e.figure) EXPECT_TRUE(figures.insert(e.figure(s)).second) << "two views share a figure";
  }
  EXPECT_FALSE(view_has_figure(View::kSessions));
  EXPECT_FALSE(view_has_figure(View::kRun));
  EXPECT_EQ(figure_of(s, View::kTokens), &s.tokens.overview);
  // The constants code names are views of the table; unknown names are not.
  for (View c : {View::kSessions, View::kRun, View::kHeads, View::kTokens, View::kAttention, View::kKeys,
                 View::kChannels, View::kBudgets, View::kFidelity, View::kCompare})
    EXPECT_NE(view_entry(c), nullptr) << view_name(c);
  EXPECT_EQ(View(), View::kSessions);
  EXPECT_FALSE(parse_view("nope"));
  EXPECT_EQ(view_entry(View("nope")), nullptr);
  EXPECT_STREQ(view_title(View("nope")), "");
  try {
    parse_gui_options({"--view", "nope"});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown view 'nope' (" + view_names() + ")"), std::string::npos) << e.what();
  }
  for (View v : kAllViews) EXPECT_NE(gui_usage().find(std::string(view_name(v))), std::string::npos) << view_name(v);
}

}  // namespace
}  // namespace kvscope::gui

namespace kvscope::figures {
namespace {

using gui::testing::make_temp_dir;
using gui::testing::remove_tree;

// ---- figures ----------------------------------------------------------------------------------------

class FigureTable : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("figure_table");
    gui::SyntheticSpec spec;
    spec.n_layer = 3;
    spec.n_head = 4;
    spec.n_head_kv = 4;
    spec.head_dim = 16;
    spec.n_tok = 200;
    spec.n_steps = 6;
    full_ = gui::testing::write_test_session(dir_ / "full.db", spec);
    const auto pattern = dir_ / "pattern.json";
    save_head_pattern(pattern, gui::testing::test_head_pattern(3, 4));
    heads_run_ = gui::testing::write_heads_run(dir_ / "full.db", full_.snapkv, pattern.string(),
                                               gui::testing::test_head_pattern(3, 4));
    spec.full_capture = false;
    summary_ = gui::testing::write_test_session(dir_ / "summary.db", spec);
    // Evaluation runs for the database figures (accuracy, eval-tasks, eval-depth).
    for (const auto& [db, like] : {std::pair{"full.db", full_.snapkv}, std::pair{"summary.db", summary_.snapkv}}) {
      const auto info = sessions::SessionStore::open((dir_ / db).string()).load_run(like).info;
      gui::testing::write_eval_runs((dir_ / db).string(), info, false);
    }
  }
  static void TearDownTestSuite() { remove_tree(dir_); }

  /// The run of full.db an entry is drawn for: the heads-stage run for head-pattern, else SnapKV.
  static std::int64_t full_run(const FigureEntry& e) {
    return e.recording == Recording::kHeadsStage ? heads_run_ : full_.snapkv;
  }

  static inline std::filesystem::path dir_;
  static inline gui::SyntheticRuns full_, summary_;
  static inline std::int64_t heads_run_ = -1;
};

TEST_F(FigureTable, NamesAreUniqueAndTheCliOffersTheNamesOfBefore) {
  std::set<std::string_view> names;
  std::vector<std::string> cli;
  for (const FigureEntry& e : figure_table()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name";
    EXPECT_NE(e.build, nullptr);
    EXPECT_FALSE(e.about.empty());
    EXPECT_EQ(find_figure(e.name), &e);
    EXPECT_TRUE(e.cli || e.all) << "offered nowhere";
    if (e.cli) cli.emplace_back(e.name);
    if (e.cli) EXPECT_EQ(&cli_figure(e.name), &e);
    if (e.cli) EXPECT_NE(figure_help().find("  " + std::string(e.name) + " "), std::string::npos) << figure_help();
    if (e.cli && e.recording == Recording::kFullCapture)
      EXPECT_NE(figure_help().find(" (needs --capture full)\n", figure_help().find(std::string(e.about))),
                std::string::npos)
          << figure_help();
    if (e.cli && e.scope == FigureScope::kHead)
      EXPECT_NE(figure_help().find(std::string(e.about) + " [--layer, --head]"), std::string::npos) << figure_help();
    if (e.cli && e.metric) EXPECT_NE(metric_help().find(std::string(e.name) + ": " + e.metric), std::string::npos);
  }
  EXPECT_EQ(figure_names(), cli);
  for (const char* before : {"heads", "tokens", "mass", "topk-cdf", "keys", "channels", "fidelity", "budgets", "grid",
                             "head-pattern", "accuracy", "eval-tasks", "eval-depth"})
    EXPECT_NE(std::find(cli.begin(), cli.end(), before), cli.end()) << before;
}

TEST_F(FigureTable, EveryEntryBuildsForAFullCaptureRun) {
  const auto store = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
  const auto b = load_run_data(store, full_.streaming, {});
  for (const FigureEntry& e : figure_table()) {
    SCOPED_TRACE(std::string(e.name));
    // Through its builder, as "export all" draws it: every variant, parts decoded first.
    const auto a = load_run_data(store, full_run(e), {});
    for (const auto* r : {a.get(), b.get()})
      for (Part p : e.needs.parts()) load_part(store, *r, p, 1);
    for (const auto* r : {a.get(), b.get()})
      for (Part p : e.uses.parts()) load_part(store, *r, p, 1);
    for (const std::string& v : e.all ? e.all() : std::vector<std::string>{""}) {
      SCOPED_TRACE(v);
      FigureInput in;
      in.run = e.scope == FigureScope::kDatabase ? nullptr : a.get();
      in.b = e.two_runs ? b.get() : nullptr;
      in.store = &store;
      in.sel = {1, 2, -1};
      in.variant = v;
      in.width = 800;
      viz::Figure f;
      ASSERT_NO_THROW(f = e.build(in));
      EXPECT_NO_THROW(viz::validate(f));
      EXPECT_FALSE(f.panels.empty());
    }
    // Through kvscope-cli export's path.
    if (e.cli) {
      viz::Figure f;
      ASSERT_NO_THROW(f = build_figure(store, full_run(e), {std::string(e.name), 1, 2, "tokens95_frac", {}}));
      EXPECT_NO_THROW(viz::validate(f));
      EXPECT_NO_THROW(viz::export_figure(f, dir_ / (std::string(e.name) + ".svg")));
    }
  }
}

TEST_F(FigureTable, ASummaryRunBuildsOrThrowsTheDocumentedError) {
  const auto store = sessions::SessionStore::open((dir_ / "summary.db").string(), sessions::OpenMode::kReadOnly);
  for (const FigureEntry& e : figure_table()) {
    if (!e.cli) continue;
    SCOPED_TRACE(std::string(e.name));
    const FigureRequest req{std::string(e.name), 1, 2, "tokens95_frac", {}};
    switch (e.recording) {
      case Recording::kSummary:
      case Recording::kReference:  // the synthetic runs have the reference's step metrics
        EXPECT_NO_THROW(viz::validate(build_figure(store, summary_.snapkv, req)));
        break;
      case Recording::kFullCapture:
        try {
          viz::validate(build_figure(store, summary_.snapkv, req));
          // Only a figure without parts may build: its data is not in the per-layer parts.
          EXPECT_TRUE(e.needs.empty()) << "built without its parts";
        } catch (const std::invalid_argument& x) {
          EXPECT_NE(std::string(x.what()).find("--capture full"), std::string::npos) << x.what();
        }
        break;
      case Recording::kHeadsStage:
        try {
          build_figure(store, summary_.snapkv, req);
          ADD_FAILURE() << "no error";
        } catch (const std::invalid_argument& x) {
          EXPECT_NE(std::string(x.what()).find("has no 'heads' stage"), std::string::npos) << x.what();
        }
        break;
    }
  }
}

TEST_F(FigureTable, AnUnknownNameThrowsListingTheKnownNames) {
  const auto store = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
  for (const std::string name : {"nope", "", "Channels", "compare"}) {  // "compare" is the GUI's (two runs)
    SCOPED_TRACE(name);
    try {
      build_figure(store, full_.snapkv, {name, 1, 2, "tokens95_frac", {}});
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("unknown figure '" + name + "'"), std::string::npos) << what;
      for (const auto& known : figure_names()) EXPECT_NE(what.find(known), std::string::npos) << known << ": " << what;
    }
  }
}

TEST_F(FigureTable, ExportAllWritesTheEntriesVariantsUnderTheNamesOfBefore) {
  const auto store = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
  const auto a = load_run_data(store, full_.snapkv, {}), b = load_run_data(store, full_.streaming, {});
  for (int p = 0; p < kPartCount; ++p)
    load_part(store, *a, static_cast<Part>(p), run_level(static_cast<Part>(p)) ? 0 : 1);
  std::set<std::string> expected = {"heads",    "tokens_kept", "tokens_keep_rate", "attention", "keys",
                                    "channels", "budgets",     "fidelity",         "selection", "timeline"};
  for (const char* m : heads_metric_names()) expected.insert(std::string("heads_") + m);
  const Selection sel{1, 2, -1};
  std::set<std::string> names;
  for (const auto& [name, f] : all_figures(*a, nullptr, sel, 900, 600)) {
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(f.width, 900);
    EXPECT_EQ(f.height, name.rfind("tokens", 0) == 0 ? 240 : 600) << name;
  }
  EXPECT_EQ(names, expected);
  expected.insert("compare");
  names.clear();
  for (const auto& [name, f] : all_figures(*a, b.get(), sel, 900, 600)) names.insert(name);
  EXPECT_EQ(names, expected);
}

}  // namespace
}  // namespace kvscope::figures
