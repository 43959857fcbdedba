// Every panel drawn for many frames on a synthetic session with an ImGui context only (no window,
// no renderer): hover and clicks scripted, figures valid, selection by clicking, the token list
// clipped on 32K tokens, textures released, command line parsing, view state, export; opening
// decodes only the light part, views wait for their parts without blocking; compare A/B/A-B views.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <variant>

#include "app_state.h"
#include "figures.h"
#include "gui_test_support.h"
#include "headless.h"
#include "kvscope/core/capture.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/presets.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/viz/cairo_export.h"

namespace kvscope::gui {
namespace {

using testing::make_temp_dir;
using testing::remove_tree;

class GuiPanels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("gui_panels");
    db_ = (dir_ / "synthetic.db").string();
    SyntheticSpec spec;
    spec.n_layer = 6;
    spec.n_head = 8;
    spec.n_head_kv = 4;
    spec.head_dim = 32;
    spec.n_tok = 400;
    spec.n_steps = 24;
    runs_ = testing::write_test_session(db_, spec);
    PolicyRegistry registry;
    register_builtin_policies(registry);
    catalog_ = new PolicyCatalog(registry.catalog());
  }
  static void TearDownTestSuite() {
    delete catalog_;
    remove_tree(dir_);
  }

  void SetUp() override {
    im_ = std::make_unique<HeadlessImGui>(1400.0f, 900.0f);
    state_ = std::make_unique<AppState>();
    state_->headless = true;
    GuiOptions o;
    o.open = {db_};
    ASSERT_TRUE(apply_options(*state_, o)) << state_->status;
    ASSERT_TRUE(state_->a);
  }
  void TearDown() override {
    state_.reset();
    EXPECT_EQ(textures_.live(), 0) << "figures must release their textures";
    im_.reset();
  }

  /// Draws `frames` frames of view `v`, the mouse sweeping a grid over the window, clicking on some;
  /// after each frame waits for the parts the view asked the loader for.
  void draw_view_frames(View v, int frames, bool mouse = true) {
    Ui ui{im_->fonts(), textures_, catalog_, nullptr};
    state_->view = v;
    state_->select_view = true;
    for (int f = 0; f < frames; ++f) {
      ImVec2 m{-1e6f, -1e6f};
      if (mouse && f > 2)
        m = {40.0f + static_cast<float>((f * 131) % 1320), 90.0f + static_cast<float>((f * 67) % 780)};
      const bool click = mouse && f > 2 && f % 7 == 0;
      im_->frame([&] { draw_app(*state_, ui); }, m, click);
      if (click) im_->frame([&] { draw_app(*state_, ui); }, m, false);  // release
      state_->loader.wait_idle();
    }
  }

  static inline std::filesystem::path dir_;
  static inline std::string db_;
  static inline SyntheticRuns runs_;
  static inline PolicyCatalog* catalog_ = nullptr;
  NullTextureStore textures_;
  std::unique_ptr<HeadlessImGui> im_;
  std::unique_ptr<AppState> state_;
};

TEST_F(GuiPanels, OpeningDecodesTheLightPartAndTheLoaderTheRest) {
  const auto run = state_->a;
  const RunData& a = *run;
  EXPECT_EQ(a.ref.run, runs_.snapkv);
  EXPECT_EQ(a.n_layer, 6);
  EXPECT_EQ(a.n_head_kv, 4);
  EXPECT_EQ(a.n_tok, 400);
  EXPECT_TRUE(a.has_kept);
  EXPECT_TRUE(a.has_summary);
  EXPECT_TRUE(a.has_attention);
  EXPECT_TRUE(a.has_cos);
  EXPECT_TRUE(a.has_channels);
  EXPECT_TRUE(a.has_pca);
  EXPECT_EQ(a.topk_rows, 6);
  EXPECT_EQ(a.topk_cols, 8);
  EXPECT_EQ(a.steps.at("kl").size(), 24u);
  EXPECT_EQ(a.steps.at("selection_recall").size(), 24u);
  EXPECT_TRUE(a.other_blobs.empty());
  if (std::filesystem::exists(testing::pycode_dir())) EXPECT_TRUE(a.tokens_from_tokenizer) << a.tokenizer_note;
  // Nothing heavy is decoded by opening; kept counts come from the blob listing.
  for (int p = 0; p < figures::kPartCount; ++p)
    for (std::int64_t l = 0; l < a.n_layer; ++l) {
      EXPECT_TRUE(a.stored(static_cast<Part>(p), l));
      EXPECT_EQ(a.part(static_cast<Part>(p), l), nullptr);
      EXPECT_FALSE(a.ready(static_cast<Part>(p), l));
    }
  EXPECT_EQ(a.kept_set(0, 0), nullptr);
  EXPECT_FALSE(a.kept_at(0, 0, 0));
  EXPECT_EQ(a.attention_row(0, 0), nullptr);
  // The loader decodes what is asked for; kept sets agree with the listed sizes.
  for (std::int64_t l = 0; l < a.n_layer; ++l)
    for (Part p : {Part::kKept, Part::kAttention, Part::kCos, Part::kPca, Part::kChannelMean, Part::kChannelCv})
      state_->loader.request(run, p, l);
  state_->loader.request(run, Part::kKeepCount, 0);
  state_->loader.wait_idle();
  EXPECT_FALSE(state_->loader.busy());
  EXPECT_TRUE(state_->loader.take_errors().empty());
  std::vector<std::uint32_t> count(static_cast<std::size_t>(a.n_tok), 0);
  for (std::int64_t l = 0; l < a.n_layer; ++l)
    for (std::int64_t h = 0; h < a.n_head_kv; ++h) {
      const auto* k = a.kept_set(l, h);
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(static_cast<std::int64_t>(k->size()), a.kept_count(l, h));
      EXPECT_GT(a.kept_count(l, h), 0);
      EXPECT_TRUE(std::is_sorted(k->begin(), k->end()));
      for (auto p : *k) ++count[static_cast<std::size_t>(p)];
      double sum = 0;
      for (std::int64_t i = 0; i < a.n_tok; ++i) sum += a.attention_row(l, h)[i];
      EXPECT_NEAR(sum, 1.0, 1e-3);
      EXPECT_NE(a.cos_row(l, h), nullptr);
      EXPECT_NE(a.pca_row(l, h), nullptr);
      EXPECT_EQ(a.layer_values(Part::kChannelMean, l)->size(), static_cast<std::size_t>(a.n_head_kv * a.head_dim));
    }
  ASSERT_NE(a.keep_count(), nullptr);
  EXPECT_EQ(*a.keep_count(), count);
}

TEST_F(GuiPanels, ViewsShowLoadingUntilTheLoaderHasTheirParts) {
  Ui ui{im_->fonts(), textures_, catalog_, nullptr};
  state_->view = View::kKeys;
  state_->select_view = true;
  state_->sel = {2, 1, -1};
  // The frame that first asks for layer 2 cannot have its data: nothing is decoded on the UI thread.
  im_->frame([&] { draw_app(*state_, ui); });
  im_->frame([&] { draw_app(*state_, ui); });
  EXPECT_EQ(state_->keys.fig.builds(), 0);
  state_->loader.wait_idle();
  EXPECT_TRUE(state_->a->ready(Part::kCos, 2));
  EXPECT_EQ(state_->a->part(Part::kCos, 3), nullptr);  // only the selected layer was asked for
  im_->frame([&] { draw_app(*state_, ui); });
  ASSERT_EQ(state_->keys.fig.builds(), 1);
  ASSERT_TRUE(state_->keys.fig.valid());
  // Histogram, cosine vs attention and PCA: the figure has the data, not "not captured" notes.
  EXPECT_EQ(state_->keys.fig.figure().panels.size(), 3u);
}

TEST_F(GuiPanels, SummaryColumnsMatchCore) { EXPECT_EQ(head_summary_names(), summary_metric_names()); }

TEST_F(GuiPanels, EveryViewDrawsManyFramesWithHoverAndClicks) {
  // A compare run so the compare view and the A/B selectors are exercised too.
  ASSERT_TRUE(open_run(*state_, 0, runs_.streaming, true));
  for (View v : kAllViews) {
    SCOPED_TRACE(std::string(view_name(v)));
    draw_view_frames(v, 40);
    EXPECT_EQ(state_->view, v);
    EXPECT_GT(im_->vertices(), 500);
    if (FigureView* fv = figure_of(*state_, v)) {
      EXPECT_TRUE(fv->valid()) << fv->error();
      EXPECT_NO_THROW(viz::validate(fv->figure()));
    }
    clamp_selection(*state_);
    EXPECT_GE(state_->sel.layer, 0);
    EXPECT_LT(state_->sel.layer, state_->a->n_layer);
    EXPECT_GE(state_->sel.head, 0);
    EXPECT_LT(state_->sel.head, state_->a->n_head_kv);
  }
}

TEST_F(GuiPanels, CompareSidesAndOptionsRebuildFigures) {
  ASSERT_TRUE(open_run(*state_, 0, runs_.streaming, true));
  for (Side side : {Side::kA, Side::kB, Side::kDiff}) {
    state_->heads.opt.side = side;
    state_->budgets.opt.side = side;
    for (int m = -1; m < static_cast<int>(heads_metric_names().size()); ++m) {
      state_->heads.opt.metric = m;
      draw_view_frames(View::kHeads, 3, false);
      ASSERT_TRUE(state_->heads.fig.valid()) << state_->heads.fig.error();
    }
    draw_view_frames(View::kBudgets, 3, false);
    ASSERT_TRUE(state_->budgets.fig.valid()) << state_->budgets.fig.error();
  }
  for (auto c : {TokenColoring::kKeptSelectedHead, TokenColoring::kKeepRate, TokenColoring::kAttention}) {
    state_->tokens.opt.coloring = c;
    draw_view_frames(View::kTokens, 3, false);
    ASSERT_TRUE(state_->tokens.overview.valid()) << state_->tokens.overview.error();
  }
  state_->attention.opt.log_scale = false;
  state_->channels.opt.cv = true;
  state_->fidelity.opt.running_mean = false;
  for (View v : {View::kAttention, View::kChannels, View::kFidelity, View::kCompare}) {
    draw_view_frames(v, 3, false);
    ASSERT_TRUE(figure_of(*state_, v)->valid()) << figure_of(*state_, v)->error();
  }
}

TEST_F(GuiPanels, CompareShowsAOrBOrWhichRunKeptEachToken) {
  ASSERT_TRUE(open_run(*state_, 0, runs_.streaming, true));
  const auto a = state_->a, b = state_->b_run();
  state_->sel = {1, 2, -1};
  const Selection sel = state_->sel;
  auto set_side = [&](Side side) {
    state_->tokens.opt.side = state_->attention.opt.side = state_->keys.opt.side = state_->channels.opt.side = side;
  };
  // Expected difference at L1 H2, from the kept sets themselves.
  for (const auto& r : {a, b}) state_->loader.request(r, Part::kKept, 1);
  state_->loader.wait_idle();
  std::int64_t only_a = 0, only_b = 0, both = 0;
  for (std::int64_t i = 0; i < a->n_tok; ++i) {
    const bool ka = std::binary_search(a->kept_set(1, 2)->begin(), a->kept_set(1, 2)->end(), i);
    const bool kb = std::binary_search(b->kept_set(1, 2)->begin(), b->kept_set(1, 2)->end(), i);
    only_a += ka && !kb, only_b += kb && !ka, both += ka && kb;
  }
  ASSERT_GT(only_a, 0);
  ASSERT_GT(only_b, 0);
  ASSERT_GT(both, 0);
  auto strip_of = [](const viz::Figure& f, std::size_t panel) { return std::get<viz::TokenStrip>(f.panels.at(panel)); };
  auto count = [](const std::vector<int>& v, int c) { return std::count(v.begin(), v.end(), c); };

  set_side(Side::kB);
  draw_view_frames(View::kTokens, 3, false);
  EXPECT_EQ(count(strip_of(state_->tokens.overview.figure(), 0).category, 1), b->kept_count(1, 2));
  EXPECT_NE(a->kept_count(1, 2), b->kept_count(1, 2));

  set_side(Side::kDiff);
  draw_view_frames(View::kTokens, 3, false);
  const auto diff = strip_of(state_->tokens.overview.figure(), 0);
  EXPECT_EQ(count(diff.category, 2), only_a);
  EXPECT_EQ(count(diff.category, 1), only_b);
  EXPECT_EQ(count(diff.category, 3), both);
  draw_view_frames(View::kAttention, 3, false);
  {
    const viz::Figure& f = state_->attention.fig.figure();
    ASSERT_EQ(f.panels.size(), 3u);
    const auto& hm = std::get<viz::Heatmap>(f.panels[0]);
    ASSERT_EQ(hm.rows, a->n_head_kv);
    double plus = 0, minus = 0;
    for (std::int64_t i = 0; i < a->n_tok; ++i) {
      const float v = hm.values[static_cast<std::size_t>(2 * a->n_tok + i)];
      plus += v > 0, minus += v < 0;
    }
    EXPECT_EQ(plus, only_a);
    EXPECT_EQ(minus, only_b);
    EXPECT_EQ(count(strip_of(f, 2).category, 2), only_a);
  }
  draw_view_frames(View::kKeys, 3, false);
  {
    const viz::Figure& f = state_->keys.fig.figure();
    ASSERT_EQ(f.panels.size(), 3u);
    const auto& hist = std::get<viz::BarChart>(f.panels[0]);
    ASSERT_EQ(hist.series.size(), 3u);  // only A, only B, both
    double in_a = 0;
    for (double v : hist.series[0].values) in_a += v;
    EXPECT_EQ(in_a, only_a);
    const auto& pca = std::get<viz::ScatterPlot>(f.panels[2]);
    EXPECT_EQ(pca.groups.size(), 4u);
  }
  draw_view_frames(View::kChannels, 3, false);
  EXPECT_TRUE(state_->channels.fig.valid()) << state_->channels.fig.error();

  // Linked selection: one selection drives both sides.
  state_->sel.head = 3;
  draw_view_frames(View::kTokens, 2, false);
  EXPECT_NE(strip_of(state_->tokens.overview.figure(), 0).title.find("L1 H3"), std::string::npos);
  set_side(Side::kA);
  draw_view_frames(View::kTokens, 2, false);
  EXPECT_EQ(count(strip_of(state_->tokens.overview.figure(), 0).category, 1), a->kept_count(1, 3));
  (void)sel;
}

TEST_F(GuiPanels, ClickingAHeadsCellSelectsThatHead) {
  draw_view_frames(View::kHeads, 4, false);
  const FigureView& fig = state_->heads.fig;
  ASSERT_TRUE(fig.valid());
  const auto r = fig.cell_rect(0, 4, 3);
  ASSERT_TRUE(r);
  const ImVec2 c{static_cast<float>(r->x + r->w / 2), static_cast<float>(r->y + r->h / 2)};
  const auto hit = fig.hit(c);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->row, 4);
  EXPECT_EQ(hit->col, 3);
  Ui ui{im_->fonts(), textures_, catalog_, nullptr};
  im_->frame([&] { draw_app(*state_, ui); }, c, false);
  im_->frame([&] { draw_app(*state_, ui); }, c, true);
  im_->frame([&] { draw_app(*state_, ui); }, c, false);
  EXPECT_EQ(state_->sel.layer, 4);
  EXPECT_EQ(state_->sel.head, 3);
}

TEST_F(GuiPanels, BudgetsShowTheHeadPatternOfAHeadsRun) {
  // A run recorded with --pipeline heads:pattern=FILE, opened on its own.
  const auto db = dir_ / "heads.db";
  SyntheticSpec spec;
  spec.n_layer = 6;
  spec.n_head = 8;
  spec.n_head_kv = 4;
  spec.n_tok = 400;
  spec.n_steps = 4;
  spec.full_capture = false;
  const auto runs = testing::write_test_session(db, spec);
  const auto pattern = dir_ / "heads_pattern.json";
  const HeadPattern p = testing::test_head_pattern(6, 4);
  save_head_pattern(pattern, p);
  const std::int64_t run = testing::write_heads_run(db, runs.snapkv, pattern.string(), p);
  state_ = std::make_unique<AppState>();
  state_->headless = true;
  GuiOptions o;
  o.open = {db.string()};
  o.runs = {run};
  ASSERT_TRUE(apply_options(*state_, o)) << state_->status;
  ASSERT_EQ(state_->a->ref.run, run);
  draw_view_frames(View::kBudgets, 16);  // hover and clicks over both maps
  const FigureView& fig = state_->budgets.fig;
  ASSERT_TRUE(fig.valid()) << fig.error();
  ASSERT_EQ(fig.figure().panels.size(), 4u);
  EXPECT_NE(viz::panel_title(fig.figure().panels[2]).find("head pattern heads_pattern.json"), std::string::npos);
  // Clicking a cell of the pattern map selects that head.
  const auto r = fig.cell_rect(2, 3, 1);
  ASSERT_TRUE(r);
  const ImVec2 c{static_cast<float>(r->x + r->w / 2), static_cast<float>(r->y + r->h / 2)};
  Ui ui{im_->fonts(), textures_, catalog_, nullptr};
  im_->frame([&] { draw_app(*state_, ui); }, c, false);
  im_->frame([&] { draw_app(*state_, ui); }, c, true);
  im_->frame([&] { draw_app(*state_, ui); }, c, false);
  EXPECT_EQ(state_->sel.layer, 3);
  EXPECT_EQ(state_->sel.head, 1);
  // The toggle hides the pattern panels.
  state_->budgets.opt.head_pattern = false;
  draw_view_frames(View::kBudgets, 2, false);
  EXPECT_EQ(state_->budgets.fig.figure().panels.size(), 2u);
  // The pattern file moved away: a panel says so, the view still draws.
  std::filesystem::rename(pattern, dir_ / "heads_pattern.moved.json");
  state_->budgets.opt.head_pattern = true;
  draw_view_frames(View::kBudgets, 4);
  ASSERT_TRUE(state_->budgets.fig.valid()) << state_->budgets.fig.error();
  ASSERT_EQ(state_->budgets.fig.figure().panels.size(), 3u);
  const std::string title = viz::panel_title(state_->budgets.fig.figure().panels[2]);
  EXPECT_NE(title.find("cannot be read: no such file"), std::string::npos) << title;
}

TEST_F(GuiPanels, FiguresDoNotRebuildWhileNothingChanges) {
  draw_view_frames(View::kAttention, 3, false);
  const auto builds = state_->attention.fig.builds();
  draw_view_frames(View::kAttention, 20, false);
  EXPECT_EQ(state_->attention.fig.builds(), builds);
  state_->sel.head = (state_->sel.head + 1) % state_->a->n_head_kv;
  draw_view_frames(View::kAttention, 2, false);
  EXPECT_EQ(state_->attention.fig.builds(), builds + 1);
}

TEST_F(GuiPanels, SelectionViewShowsAStepAgainstTheExactTopKLinkedWithTheTimeline) {
  // Head (0, 0) of the synthetic run selects per token with an exact top-k; the others per page.
  const View selection{"selection"}, timeline{"timeline"};
  state_->sel = {0, 0, -1};
  draw_view_frames(selection, 4, false);
  const Timeline* t = state_->a->timeline();
  ASSERT_NE(t, nullptr);
  SelectionState& st = state_->selection;
  ASSERT_TRUE(st.steps.valid()) << st.steps.error();
  EXPECT_EQ(state_->timeline.step, t->n_steps) << "no step chosen yet: the last";
  EXPECT_EQ(st.step.step, t->n_steps);
  ASSERT_TRUE(st.step.exact && st.step.per_token);
  const auto* strip = std::get_if<viz::Heatmap>(&st.steps.figure().panels.at(0));
  ASSERT_NE(strip, nullptr);
  EXPECT_EQ(strip->categories.size(), 4u);
  EXPECT_NE(strip->title.find(" hit, "), std::string::npos) << strip->title;
  ASSERT_EQ(strip->cols, static_cast<std::int64_t>(st.step.live.size())) << "one column per entry at 1400 px";
  ASSERT_TRUE(std::holds_alternative<viz::LinePlot>(st.steps.figure().panels.at(1)));

  // Clicking an entry of the strip selects its token.
  const auto cell = st.steps.cell_rect(0, 0, 3);
  ASSERT_TRUE(cell);
  const ImVec2 c{static_cast<float>(cell->x + cell->w / 2), static_cast<float>(cell->y + cell->h / 2)};
  ASSERT_EQ(st.steps.hit(c)->col, 3);
  Ui ui{im_->fonts(), textures_, catalog_, nullptr};
  im_->frame([&] { draw_app(*state_, ui); }, c, false);
  im_->frame([&] { draw_app(*state_, ui); }, c, true);
  im_->frame([&] { draw_app(*state_, ui); }, c, false);
  EXPECT_EQ(state_->sel.token, st.step.live[3]);

  // Nothing changes: no rebuild; another step: one, and the classification follows.
  const auto builds = st.steps.builds();
  draw_view_frames(selection, 5, false);
  EXPECT_EQ(st.steps.builds(), builds);
  state_->timeline.step = 3;
  draw_view_frames(selection, 2, false);
  EXPECT_EQ(st.steps.builds(), builds + 1);
  EXPECT_EQ(st.step.step, 3);
  EXPECT_EQ(st.step.live, t->live_positions(0, 0, 3));

  // Clicking a step of the Timeline view's one-head map moves the Selection view to it.
  draw_view_frames(timeline, 3, false);
  const auto row = state_->timeline.fig.cell_rect(0, 10, 5);
  ASSERT_TRUE(row);
  const ImVec2 m{static_cast<float>(row->x + row->w / 2), static_cast<float>(row->y + row->h / 2)};
  im_->frame([&] { draw_app(*state_, ui); }, m, false);
  im_->frame([&] { draw_app(*state_, ui); }, m, true);
  im_->frame([&] { draw_app(*state_, ui); }, m, false);
  EXPECT_EQ(state_->timeline.step, 10) << "one row per step (25 steps)";
  draw_view_frames(selection, 2, false);
  EXPECT_EQ(st.step.step, 10);

  // A head recorded per page: selected pages only, and the strip's title says why.
  state_->sel = {1, 1, -1};
  draw_view_frames(selection, 8);  // with the mouse sweeping (tooltips)
  EXPECT_FALSE(st.step.exact);
  EXPECT_FALSE(st.step.per_token);
  strip = std::get_if<viz::Heatmap>(&st.steps.figure().panels.at(0));
  ASSERT_NE(strip, nullptr);
  EXPECT_EQ(strip->categories.size(), 2u);
  EXPECT_NE(strip->title.find("(per page of 16) · no exact top-k: pin the head (--pin 1:1"), std::string::npos)
      << strip->title;
}

TEST_F(GuiPanels, ExportWritesTheFigureTheViewDraws) {
  draw_view_frames(View::kHeads, 3, false);
  const viz::Figure& f = state_->heads.fig.figure();
  for (const char* ext : {".png", ".svg", ".pdf", ".csv"}) {
    const auto out = dir_ / (std::string("heads") + ext);
    viz::export_figure(f, out);
    EXPECT_GT(std::filesystem::file_size(out), 100u) << ext;
  }
  // "Export all figures of this run": every figure valid and exportable.
  const auto all = figures::all_figures(*state_->a, nullptr, state_->sel, 900, 600);
  EXPECT_GE(all.size(), 16u);
  for (const auto& [name, fig] : all) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(viz::validate(fig));
    EXPECT_NO_THROW(viz::export_figure(fig, dir_ / (name + ".svg")));
  }
}

TEST_F(GuiPanels, ViewStateRoundTripsThroughTheDatabase) {
  state_->view = View::kKeys;
  state_->sel = {3, 2, 17};
  state_->heads.opt.metric = 4;
  save_view_state(*state_);
  AppState other;
  other.headless = true;
  ASSERT_GE(open_database(other, db_), 0);
  restore_view_state(other, 0);
  ASSERT_TRUE(other.a);
  EXPECT_EQ(other.a->ref.run, state_->a->ref.run);
  EXPECT_EQ(other.view, View::kKeys);
  EXPECT_EQ(other.sel, (Selection{3, 2, 17}));
  EXPECT_EQ(other.heads.opt.metric, 4);
}

TEST_F(GuiPanels, SamePromptRunIsFoundForCompare) {
  EXPECT_EQ(same_prompt_run(*state_, 0), runs_.streaming);
  GuiOptions o;
  o.open = {db_};
  o.view = View::kCompare;
  AppState s;
  s.headless = true;
  ASSERT_TRUE(apply_options(s, o));
  ASSERT_EQ(s.others.size(), 1u);
  EXPECT_EQ(s.others[0]->ref.run, runs_.streaming);
  // Kept sets of SnapKV+AdaKV and StreamingLLM overlap partly.
  for (const auto& r : {s.a, s.others[0]}) s.loader.request(r, Part::kKept, 0);
  s.loader.wait_idle();
  const double j = figures::jaccard(*s.a->kept_set(0, 0), *s.others[0]->kept_set(0, 0));
  EXPECT_GT(j, 0.0);
  EXPECT_LT(j, 1.0);
}

// Issue 30: the Run view counts the prompt's tokens with the model's tokenizer, shows the entries
// per KV head the budget keeps, and warns (Run disabled) when that is below what the pipeline
// always keeps: the same run::check_kept_entries kvscope-cli run refuses with.
TEST_F(GuiPanels, RunViewCountsPromptTokensAndWarnsOfABudgetBelowTheWindow) {
  if (!std::filesystem::exists(testing::pycode_dir() / "tokenizer.json")) GTEST_SKIP() << "pycode-16m not present";
  RunState& st = state_->run;
  st.form.model_path = testing::pycode_dir().string();
  st.form.bos = "never";
  for (int i = 0; i < 6; ++i) st.form.prompt += "def add(a, b):\n    return a + b\n\n";
  const auto tok = load_tokenizer(testing::pycode_dir());
  const auto n = static_cast<std::int64_t>(tok->encode(st.form.prompt).size());
  ASSERT_GT(n, 40);
  ASSERT_LT(n, 300);
  st.pipeline = from_spec("snapkv:window=32", *catalog_);
  st.pipeline_initialised = true;
  st.form.budget_unit = "fraction";
  st.form.budget_value = 0.1;
  draw_view_frames(View::kRun, 2, false);
  EXPECT_EQ(st.prompt_tokens, n);
  EXPECT_EQ(st.kept_per_head, n / 10);
  EXPECT_NE(
      st.budget_problem.find("budget fraction 0.1 keeps " + std::to_string(n / 10) + " entries per KV head of the " +
                             std::to_string(n) + "-token prompt, fewer than the 32 that snapkv window=32"),
      std::string::npos)
      << st.budget_problem;
  st.form.budget_value = 1.0;
  draw_view_frames(View::kRun, 1, false);
  EXPECT_EQ(st.kept_per_head, n);
  EXPECT_TRUE(st.budget_problem.empty()) << st.budget_problem;
  // The full cache takes no budget: nothing to check.
  st.pipeline = from_spec("", *catalog_);
  st.form.budget_value = 0.1;
  draw_view_frames(View::kRun, 1, false);
  EXPECT_TRUE(st.budget_problem.empty());
}

// The Run view's "chat template" box: off and disabled (with the reason) where the model's tokenizer
// has no template; on, the prompt is counted as the template renders it (no BOS added), with the
// system message first; a template that fails on the prompt says why and disables Run.
TEST_F(GuiPanels, RunViewChatTemplateBoxFollowsTheModelsTemplate) {
  if (!std::filesystem::exists(testing::pycode_dir() / "tokenizer.json")) GTEST_SKIP() << "pycode-16m not present";
  RunState& st = state_->run;
  st.form.model_path = testing::pycode_dir().string();
  st.form.prompt = "def fib(n):";
  st.pipeline = from_spec("", *catalog_);
  st.pipeline_initialised = true;
  draw_view_frames(View::kRun, 2, false);
  EXPECT_EQ(st.chat_template, nullptr);
  EXPECT_NE(st.chat_template_why.find("tokenizer_config.json: has no chat template"), std::string::npos)
      << st.chat_template_why;

  const auto chat_dir = testing::make_chat_model(dir_ / "chat-model");
  st.form.model_path = chat_dir.string();
  st.form.chat = true;
  st.form.system = "Be brief.";
  draw_view_frames(View::kRun, 2, false);
  ASSERT_NE(st.chat_template, nullptr) << st.chat_template_why;
  EXPECT_EQ(st.chat_template->source(), (chat_dir / "chat_template.jinja").string());
  const std::string rendered =
      "<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\ndef fib(n):<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(st.chat_rendered, rendered);
  const auto tok = load_tokenizer(chat_dir);
  EXPECT_EQ(st.prompt_tokens, static_cast<std::int64_t>(tok->encode(rendered).size()));
  EXPECT_TRUE(st.chat_problem.empty()) << st.chat_problem;
  // Without the system message: the prompt alone as the user message.
  st.form.system.clear();
  draw_view_frames(View::kRun, 1, false);
  EXPECT_EQ(st.chat_rendered.rfind("<|endoftext|><|im_start|>user\ndef fib(n):", 0), 0u) << st.chat_rendered;

  // A template that refuses the conversation: its message, and no count.
  const auto raises = dir_ / "raising-model";
  std::filesystem::create_directories(raises);
  std::ofstream(raises / "chat_template.jinja") << "{{ raise_exception('Only user and assistant roles') }}";
  st.form.model_path = raises.string();
  draw_view_frames(View::kRun, 2, false);
  ASSERT_NE(st.chat_template, nullptr);
  EXPECT_NE(st.chat_problem.find("Only user and assistant roles"), std::string::npos) << st.chat_problem;
  EXPECT_EQ(st.prompt_tokens, -1);
  st.form.chat = false;
  st.form.model_path = testing::pycode_dir().string();
  draw_view_frames(View::kRun, 1, false);
  EXPECT_TRUE(st.chat_problem.empty());
  EXPECT_TRUE(st.chat_rendered.empty());
}

// Issue 30: "Load preset..." left the budget unit as it was; snapkv-kvpress is documented as
// --compression-ratio.
TEST(GuiRunForm, LoadingAPresetSetsItsBudgetUnit) {
  RunRequest form;
  form.budget_unit = "fraction";
  form.budget_value = 0.25;
  for (const Preset& p : pipeline_presets()) {
    load_preset_budget(form, p);
    EXPECT_EQ(form.budget_unit, budget_unit_name(p.unit)) << p.name;
    EXPECT_EQ(form.budget_value, p.value) << p.name;
    if (p.name == "snapkv-kvpress") EXPECT_EQ(form.budget_unit, "compression_ratio");
  }
}

TEST(GuiTokens, TokenListStaysClippedOn32KTokens) {
  const auto dir = make_temp_dir("gui_tokens");
  const auto db = (dir / "long.db").string();
  SyntheticSpec spec;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.head_dim = 16;
  spec.n_tok = 32768;
  spec.n_steps = 4;
  testing::write_test_session(db, spec);
  HeadlessImGui im(1400, 900);
  NullTextureStore tex;
  {
    AppState s;
    s.headless = true;
    GuiOptions o;
    o.open = {db};
    o.view = View::kTokens;
    ASSERT_TRUE(apply_options(s, o));
    ASSERT_EQ(s.a->n_tok, 32768);
    Ui ui{im.fonts(), tex, nullptr, nullptr};
    for (int f = 0; f < 3; ++f) im.frame([&] { draw_app(s, ui); }), s.loader.wait_idle();
    ASSERT_TRUE(s.tokens.overview.valid());
    // Steady state: only visible rows are drawn.
    const auto t0 = std::chrono::steady_clock::now();
    for (int f = 0; f < 20; ++f) im.frame([&] { draw_app(s, ui); }, {700, 500});
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20;
    EXPECT_LT(im.vertices(), 200000);
    EXPECT_LT(ms, 100.0);  // generous: CI machines are slow; bench_gui reports the real number
    // Jump to the end.
    s.tokens.scroll_to = 32000;
    for (int f = 0; f < 3; ++f) im.frame([&] { draw_app(s, ui); });
    EXPECT_LT(im.vertices(), 200000);
  }
  EXPECT_EQ(tex.live(), 0);
  remove_tree(dir);
}

TEST(GuiOptionsTest, ParsesTheCommandLine) {
  const auto o =
      parse_gui_options({"--open", "a.db", "--open", "b.db", "--run", "3,5", "--view", "heads", "--screenshot", "x.png",
                         "--frames", "7", "--size", "1280x800", "--layer", "2", "--head", "1"});
  EXPECT_EQ(o.open, (std::vector<std::string>{"a.db", "b.db"}));
  EXPECT_EQ(o.runs, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(o.view, View::kHeads);
  EXPECT_EQ(o.screenshot, "x.png");
  EXPECT_EQ(o.frames, 7);
  EXPECT_EQ(o.width, 1280);
  EXPECT_EQ(o.height, 800);
  EXPECT_EQ(o.layer, 2);
  EXPECT_EQ(o.head, 1);
  EXPECT_THROW(parse_gui_options({"--view", "nope"}), std::invalid_argument);
  EXPECT_THROW(parse_gui_options({"--size", "12"}), std::invalid_argument);
  EXPECT_THROW(parse_gui_options({"--run"}), std::invalid_argument);
  EXPECT_THROW(parse_gui_options({"--frames", "x"}), std::invalid_argument);
  EXPECT_THROW(parse_gui_options({"--bogus"}), std::invalid_argument);
  for (View v : kAllViews) EXPECT_EQ(parse_view(view_name(v)), v);
  const GuiOptions z = parse_gui_options({"--positions", "100:250", "--tokens-coloring", "score"});
  EXPECT_EQ(z.pos_lo, 100);
  EXPECT_EQ(z.pos_hi, 250);
  EXPECT_EQ(z.tokens_coloring, static_cast<int>(TokenColoring::kScore));
  EXPECT_THROW(parse_gui_options({"--positions", "250:100"}), std::invalid_argument);
  EXPECT_THROW(parse_gui_options({"--positions", "100"}), std::invalid_argument);
  EXPECT_THROW(parse_gui_options({"--tokens-coloring", "rainbow"}), std::invalid_argument);
}

TEST(PositionWindowTest, ClampsAndSaysWhenZoomed) {
  const auto whole = figures::position_window(figures::Selection{}, 1000);
  EXPECT_EQ(whole.lo, 0);
  EXPECT_EQ(whole.hi, 999);
  EXPECT_FALSE(whole.zoomed);
  figures::Selection sel;
  sel.pos_lo = 900, sel.pos_hi = 5000;  // past the end: clamped
  const auto w = figures::position_window(sel, 1000);
  EXPECT_EQ(w.lo, 900);
  EXPECT_EQ(w.hi, 999);
  EXPECT_TRUE(w.zoomed);
  EXPECT_EQ(w.size(), 100);
  EXPECT_EQ(figures::position_window(sel, 0).size(), 0);
}

TEST(GuiOptionsTest, StartRunReadsTheRunViewFieldsFromJson) {
  const auto o = parse_gui_options({"--start-run", "r.json", "--screenshot-at-step", "12"});
  EXPECT_EQ(o.start_run, "r.json");
  EXPECT_EQ(o.screenshot_at_step, 12);
  EXPECT_THROW(parse_gui_options({"--screenshot-at-step", "-1"}), std::invalid_argument);
  const auto dir = make_temp_dir("gui_start_run");
  const auto file = (dir / "r.json").string();
  std::ofstream(dir / "p.txt") << "def f():";
  std::ofstream(file) << R"({"model_path": "m", "prompt_file": ")" << (dir / "p.txt").string()
                      << R"(", "pipeline_spec": "quest", "budget_unit": "fetched", "budget_value": 128,
                          "max_new_tokens": 9, "capture": "summary", "reference_full": false, "db_path": "x.db"})";
  RunRequest r;
  read_run_request(file, r);
  EXPECT_EQ(r.model_path, "m");
  EXPECT_EQ(r.prompt, "def f():");
  EXPECT_EQ(r.pipeline_spec, "quest");
  EXPECT_EQ(r.budget_unit, "fetched");
  EXPECT_EQ(r.budget_value, 128);
  EXPECT_EQ(r.max_new_tokens, 9);
  EXPECT_FALSE(r.reference_full);
  EXPECT_EQ(r.db_path, "x.db");
  auto error_of = [&](const std::string& body) {
    std::ofstream(file) << body;
    try {
      read_run_request(file, r);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of(R"({"max_new_token": 3})").find(file + ": unknown key 'max_new_token'"), std::string::npos);
  EXPECT_NE(error_of(R"({"budget_value": "high"})").find("'budget_value' must be a number"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{oops").find("not JSON"), std::string::npos);
  EXPECT_EQ(error_of(R"({"random_init": "cfg.json", "tokenizer_path": "tok.json"})"), "accepted");
  EXPECT_EQ(r.random_init, "cfg.json");
  EXPECT_EQ(r.tokenizer_path, "tok.json");
  EXPECT_NE(error_of(R"({"random_init": 3})").find("'random_init' must be a string"), std::string::npos);
  EXPECT_EQ(error_of(R"({"chat": true, "system": "Be brief."})"), "accepted");
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.system, "Be brief.");
  EXPECT_NE(error_of(R"({"chat": "yes"})").find("'chat' must be true or false"), std::string::npos);
  // Later turns (the Run view's "Later turns", kvscope-cli run --turn): a list of texts, in order.
  EXPECT_EQ(error_of(R"({"turns": ["and then?", "\ndef main():\n"]})"), "accepted");
  EXPECT_EQ(r.turns, (std::vector<std::string>{"and then?", "\ndef main():\n"}));
  EXPECT_NE(error_of(R"({"turns": "and then?"})").find("'turns' must be a list of strings"), std::string::npos);
  EXPECT_NE(error_of(R"({"turns": ["a", 3]})").find("'turns' must be a string"), std::string::npos);
  remove_tree(dir);
}

TEST(GuiOptionsTest, MissingDatabaseIsReported) {
  AppState s;
  s.headless = true;
  GuiOptions o;
  o.open = {"/nonexistent/x.db"};
  EXPECT_FALSE(apply_options(s, o));
  EXPECT_NE(s.status.find("/nonexistent/x.db"), std::string::npos);
  // Every view still draws without a run.
  HeadlessImGui im(1200, 800);
  NullTextureStore tex;
  Ui ui{im.fonts(), tex, nullptr, nullptr};
  for (View v : kAllViews) {
    s.view = v;
    s.select_view = true;
    for (int f = 0; f < 3; ++f) im.frame([&] { draw_app(s, ui); });
  }
}

TEST(GuiOptionsTest, AnEmptyFileIsRefusedAndLeftEmpty) {
  // Opening a database to view it never writes a schema into an empty (0-byte) file.
  const auto dir = make_temp_dir("empty_db");
  const auto path = dir / "empty.db";
  std::ofstream(path).close();
  AppState s;
  s.headless = true;
  EXPECT_LT(open_database(s, path.string()), 0);
  EXPECT_NE(s.status.find(path.string() + ": is an empty file (0 bytes)"), std::string::npos) << s.status;
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  EXPECT_FALSE(std::filesystem::exists(path.string() + "-wal"));
  EXPECT_TRUE(s.dbs.empty());
  remove_tree(dir);
}

// Zoom, pan and brushing of the position axes in the Attention view, through the mouse: the
// window every position axis shows (Selection::pos_lo/pos_hi) follows, and the figure shows it.
TEST_F(GuiPanels, AttentionPositionAxesZoomPanAndBrush) {
  draw_view_frames(View::kAttention, 4, false);
  HeadlessImGui& im = *im_;
  Ui ui{im.fonts(), textures_, catalog_, nullptr};
  AppState& s = *state_;
  ASSERT_TRUE(s.a->has_score) << "the synthetic session records decisive scores";
  ASSERT_TRUE(s.attention.fig.valid()) << s.attention.fig.error();
  const std::int64_t T = s.a->n_tok;
  auto at = [&](double pos) {
    const viz::PanelLayout& L = s.attention.fig.layout().panels.at(1);
    const ImVec2 o = s.attention.fig.origin();
    return ImVec2{o.x + static_cast<float>(L.x.map.to_px(pos)), o.y + static_cast<float>(L.plot.y + L.plot.h / 2)};
  };
  // Wheel up over position 3/4 T: a smaller window around it.
  const double focus = 0.75 * static_cast<double>(T);
  im.frame([&] { draw_app(s, ui); }, at(focus), false, 1.0f);
  ASSERT_GE(s.sel.pos_hi, 0) << "zoomed";
  EXPECT_LT(s.sel.pos_hi - s.sel.pos_lo + 1, T);
  EXPECT_LE(s.sel.pos_lo, focus);
  EXPECT_GE(s.sel.pos_hi, focus);
  for (int k = 0; k < 4; ++k) im.frame([&] { draw_app(s, ui); }, at(focus), false, 1.0f);
  im.frame([&] { draw_app(s, ui); });
  const std::int64_t lo = s.sel.pos_lo, hi = s.sel.pos_hi;
  ASSERT_GT(lo, 0);
  // The figure shows the window (its heatmap starts at lo).
  const auto& hm = std::get<viz::Heatmap>(s.attention.fig.figure().panels.at(0));
  EXPECT_EQ(hm.x_origin, static_cast<double>(lo));
  EXPECT_EQ(hm.cols, hi - lo + 1);
  // Drag left by a quarter of the window: it pans right by about a quarter.
  const double mid = 0.5 * static_cast<double>(lo + hi), quarter = 0.25 * static_cast<double>(hi - lo);
  const ImVec2 p0 = at(mid), p1 = at(mid - quarter);
  im.frame([&] { draw_app(s, ui); }, p0, true);
  im.frame([&] { draw_app(s, ui); }, p1, true);
  im.frame([&] { draw_app(s, ui); }, p1, false);
  EXPECT_NEAR(static_cast<double>(s.sel.pos_lo), static_cast<double>(lo) + quarter, 0.1 * quarter + 2);
  EXPECT_EQ(s.sel.pos_hi - s.sel.pos_lo, hi - lo) << "a pan keeps the width";
  for (int f = 0; f < 2; ++f) im.frame([&] { draw_app(s, ui); });
  // Shift-drag brushes a range: the window becomes it.
  const std::int64_t b0 = s.sel.pos_lo + (s.sel.pos_hi - s.sel.pos_lo) / 4,
                     b1 = s.sel.pos_lo + (s.sel.pos_hi - s.sel.pos_lo) / 2;
  im.frame([&] { draw_app(s, ui); }, at(static_cast<double>(b0)), true, 0, true);
  im.frame([&] { draw_app(s, ui); }, at(static_cast<double>(b1)), true, 0, true);
  im.frame([&] { draw_app(s, ui); }, at(static_cast<double>(b1)), false, 0, true);
  EXPECT_NEAR(static_cast<double>(s.sel.pos_lo), static_cast<double>(b0), 2.0);
  EXPECT_NEAR(static_cast<double>(s.sel.pos_hi), static_cast<double>(b1), 2.0);
  // The window is shared: the Tokens view shows the same positions.
  const auto tf = figures::tokens_figure(*s.a, s.tokens.opt, s.sel);
  EXPECT_EQ(std::get<viz::TokenStrip>(tf.panels.at(0)).first_position, s.sel.pos_lo);
  // A click that does not move is a click: it selects the token under the mouse, the window stays.
  for (int f = 0; f < 2; ++f) im.frame([&] { draw_app(s, ui); });
  const std::int64_t wlo = s.sel.pos_lo, whi = s.sel.pos_hi, target = (wlo + whi) / 2;
  im.frame([&] { draw_app(s, ui); }, at(static_cast<double>(target)));
  im.frame([&] { draw_app(s, ui); }, at(static_cast<double>(target)), true);
  im.frame([&] { draw_app(s, ui); }, at(static_cast<double>(target)), false);
  EXPECT_NEAR(static_cast<double>(s.sel.token), static_cast<double>(target), 1.0);
  EXPECT_EQ(s.sel.pos_lo, wlo);
  EXPECT_EQ(s.sel.pos_hi, whi);
}

}  // namespace
}  // namespace kvscope::gui
