// The figure library shared by `kvscope-cli export` and the GUI (app/figures): every export name
// builds from a synthetic session through the view builders with the run's per-layer data decoded,
// missing captures and bad requests throw naming the problem, decoded parts are write-once; a run
// with a heads:pattern=FILE pipeline shows its pattern in the budgets figure and exports it as
// "head-pattern", and a pattern file that went away is named in a panel title; the Selection
// view's step strip (hit / selected only / missed / live) against a recomputation from the raw record.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>
#include <variant>

#include "export_figures.h"
#include "figures.h"
#include "gui_test_support.h"
#include "kvscope/sessions/timeline_blobs.h"
#include "kvscope/viz/cairo_export.h"
#include "selection_steps_figure.h"
#include "timeline_figure.h"

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
    if (name == "accuracy" || name == "eval-tasks" || name == "eval-depth") continue;  // test_eval_view.cpp
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

/// The full-resolution cell of step s, position p: evicted at s > selected at s > live > NaN.
float timeline_cell(const Timeline& t, std::int64_t l, std::int64_t h, std::int64_t s, std::int64_t p,
                    const std::vector<std::int64_t>& live, const std::vector<std::int64_t>* selected) {
  if (t.evicted_step(l, h, p) == s) return kCellEvicted;
  if (selected && std::binary_search(selected->begin(), selected->end(), p)) return kCellSelected;
  if (std::binary_search(live.begin(), live.end(), p)) return kCellKept;
  return std::nanf("");
}

TEST_F(FiguresExport, TimelineRasterEqualsACellByCellRecomputation) {
  const auto store = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
  for (std::int64_t run : {full_.snapkv, full_.streaming}) {  // selections per page; a ring buffer
    const auto t = sessions::load_timeline(store, run);
    ASSERT_TRUE(t.has_value());
    const std::int64_t S = t->n_steps + 1, N = t->n_positions;
    for (std::int64_t l : {std::int64_t(0), t->n_layer - 1})
      for (std::int64_t h : {std::int64_t(0), t->n_head_kv - 1}) {
        SCOPED_TRACE("run " + std::to_string(run) + " head " + std::to_string(l) + ":" + std::to_string(h));
        std::vector<std::vector<float>> full(static_cast<std::size_t>(S));
        for (std::int64_t st = 0; st < S; ++st) {
          const auto live = t->live_positions(l, h, st);
          const auto sel = t->selected_positions(l, h, st, &live);
          for (std::int64_t p = 0; p < N; ++p)
            full[st].push_back(timeline_cell(*t, l, h, st, p, live, sel ? &*sel : nullptr));
        }
        // Full resolution: cell for cell.
        const TimelineRaster exact = timeline_raster(*t, l, h, S, N);
        ASSERT_EQ(exact.rows, S);
        ASSERT_EQ(exact.cols, N);
        for (std::int64_t st = 0; st < S; ++st)
          for (std::int64_t p = 0; p < N; ++p) {
            const float want = full[st][p], got = exact.cells[static_cast<std::size_t>(st * N + p)];
            ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << "step " << st << " position " << p;
          }
        // A zoomed window [N/3, 2N/3] at full resolution: the same cells as the full raster's columns.
        const std::int64_t w0 = N / 3, w1 = 2 * N / 3;
        const TimelineRaster zoomed = timeline_raster(*t, l, h, S, w1 - w0 + 1, true, w0, w1);
        ASSERT_EQ(zoomed.cols, w1 - w0 + 1);
        for (std::int64_t st = 0; st < S; ++st)
          for (std::int64_t p = w0; p <= w1; ++p) {
            const float want = full[st][p], got = zoomed.cells[static_cast<std::size_t>(st * zoomed.cols + (p - w0))];
            ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << "zoomed: step " << st << " position " << p;
          }
        // Binned 3 x 7: kept and evicted are the maximum over the bin; a bin holding a selected
        // cell shows at least "selected" (a selected page marks its whole span).
        const TimelineRaster binned = timeline_raster(*t, l, h, 3, 7);
        for (std::int64_t r = 0; r < 3; ++r)
          for (std::int64_t c = 0; c < 7; ++c) {
            float want_max = std::nanf("");
            bool any_selected = false;
            for (std::int64_t st = 0; st < S; ++st)
              for (std::int64_t p = 0; p < N; ++p)
                if (st * 3 / S == r && p * 7 / N == c) {
                  const float v = full[st][p];
                  any_selected = any_selected || v == kCellSelected;
                  if (!std::isnan(v) && v != kCellSelected && !(want_max >= v)) want_max = v;
                }
            const float got = binned.cells[static_cast<std::size_t>(r * 7 + c)];
            if (any_selected) {
              EXPECT_GE(got, static_cast<float>(kCellSelected)) << r << "," << c;
              if (want_max == kCellEvicted) EXPECT_EQ(got, kCellEvicted);
            } else if (!std::isnan(want_max)) {
              EXPECT_GE(got, want_max) << r << "," << c;
              if (want_max == kCellEvicted) EXPECT_EQ(got, kCellEvicted) << r << "," << c;
            } else {
              EXPECT_TRUE(std::isnan(got) || got == kCellSelected) << r << "," << c;
            }
          }
        EXPECT_EQ(exact.live, binned.live);
      }
  }
}

TEST_F(FiguresExport, NeedleTokensAreMarkedInTheTokensAndTimelineFigures) {
  // Copies of the full session's SnapKV run with a "needle_tokens" blob (as kvscope-cli eval
  // records it; the second range is clipped to the prompt) and of its StreamingLLM run without.
  const auto db = dir_ / "needle.db";
  struct {
    std::int64_t snapkv = -1, streaming = -1;
  } runs;
  {
    const auto src = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
    auto dst = sessions::SessionStore::open(db.string());
    for (const bool needle : {true, false}) {
      const sessions::RunRecord rec = src.load_run(needle ? full_.snapkv : full_.streaming);
      const std::int64_t id = dst.begin_run(rec.info);
      for (const auto& b : rec.blobs) dst.add_blob(id, *src.load_blob(rec.row.id, b.name, b.layer, b.head));
      dst.add_step_metrics(id, rec.step_metrics);
      if (needle)
        dst.add_blob(id, sessions::Blob::of<std::int64_t>("needle_tokens", -1, -1, {2, 2}, {120, 126, 295, 310}));
      dst.finish_run(id, rec.outputs);
      (needle ? runs.snapkv : runs.streaming) = id;
    }
  }
  const auto store = sessions::SessionStore::open(db.string(), sessions::OpenMode::kReadOnly);
  const auto run = load_run_data(store, runs.snapkv, {});
  const auto plain = load_run_data(store, runs.streaming, {});
  using Needles = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(run->needles, (Needles{{120, 126}, {295, 300}}));
  EXPECT_TRUE(plain->needles.empty());
  for (const auto& b : run->other_blobs) EXPECT_NE(b.name, "needle_tokens");
  for (std::int64_t l = 0; l < run->n_layer; ++l) load_part(store, *run, Part::kKept, l);
  load_part(store, *run, Part::kTimeline, 0);
  load_part(store, *plain, Part::kKept, 1);
  load_part(store, *plain, Part::kTimeline, 0);

  // Tokens: a "needle" marker row under the strip, on the strip's position axis.
  Selection sel;
  sel.layer = 1, sel.head = 2;
  const viz::Figure tf = tokens_figure(*run, {}, sel);
  EXPECT_NO_THROW(viz::validate(tf));
  ASSERT_EQ(tf.panels.size(), 2u);
  EXPECT_TRUE(tf.share_x);
  const auto& row = std::get<viz::TokenStrip>(tf.panels[1]);
  ASSERT_EQ(row.category.size(), 300u);
  ASSERT_EQ(row.categories.size(), 2u);
  EXPECT_EQ(row.categories[1].name, "needle");
  for (std::int64_t p = 0; p < 300; ++p)
    EXPECT_EQ(row.category[static_cast<std::size_t>(p)], (p >= 120 && p < 126) || p >= 295 ? 1 : 0) << p;
  // Its title counts what the selected head, the layer and every layer kept of the 11 needle tokens.
  const auto& kept = *run->kept_set(1, 2);
  std::int64_t k = 0;
  for (std::int64_t p : kept) k += (p >= 120 && p < 126) || p >= 295;
  EXPECT_EQ(row.title.rfind("needle: tokens 120-125, 295-299 (11): L1 H2 kept " + std::to_string(k) + " of 11", 0), 0u)
      << row.title;
  EXPECT_NE(row.title.find("KV heads of layer 1"), std::string::npos) << row.title;
  EXPECT_NE(row.title.find("of 12 KV heads of all layers"), std::string::npos) << row.title;
  EXPECT_EQ(needle_text(*run, sel), row.title);
  // A run without the blob: the strip alone, no needle line.
  const viz::Figure plain_tf = tokens_figure(*plain, {}, sel);
  EXPECT_EQ(plain_tf.panels.size(), 1u);
  EXPECT_EQ(needle_text(*plain, sel), "");

  // Timeline: the needle positions' columns hatched over every step, the title saying what the head did.
  const auto& t = *run->timeline();
  const viz::Figure tl = timeline_figure(*run, {}, sel, 2048);
  EXPECT_NO_THROW(viz::validate(tl));
  const auto& map = std::get<viz::Heatmap>(tl.panels.at(0));
  ASSERT_EQ(map.cols, t.n_positions);  // prompt and generated positions, one column each
  ASSERT_EQ(map.mask.size(), map.values.size());
  for (std::int64_t r = 0; r < map.rows; ++r)
    for (std::int64_t p = 0; p < map.cols; ++p)
      ASSERT_EQ(map.mask[static_cast<std::size_t>(r * map.cols + p)] != 0,
                (p >= 120 && p < 126) || (p >= 295 && p < 300))
          << r << "," << p;
  EXPECT_EQ(map.title.rfind("needle (hatched, tokens 120-125, 295-299): ", 0), 0u) << map.title;
  std::int64_t evicted = 0;
  for (std::int64_t p : {120, 121, 122, 123, 124, 125, 295, 296, 297, 298, 299})
    evicted += t.evicted_at[static_cast<std::size_t>((1 * t.n_head_kv + 2) * t.n_positions + p)] >= 0;
  EXPECT_NE(map.title.find(evicted ? "evicted " + std::to_string(evicted) + " of 11" : "kept to the end"),
            std::string::npos)
      << map.title;
  // Zoomed to [100, 199]: only the first needle's columns.
  sel.pos_lo = 100, sel.pos_hi = 199;
  const viz::Figure zoomed_tl = timeline_figure(*run, {}, sel, 2048);
  const auto& zoomed = std::get<viz::Heatmap>(zoomed_tl.panels.at(0));
  ASSERT_EQ(zoomed.cols, 100);
  for (std::int64_t c = 0; c < 100; ++c)
    EXPECT_EQ(zoomed.mask[static_cast<std::size_t>(c)] != 0, c >= 20 && c < 26) << c;
  // Without the blob: no mask, the title as before.
  sel.pos_lo = 0, sel.pos_hi = -1;
  const viz::Figure plain_tl = timeline_figure(*plain, {}, sel, 2048);
  const auto& plain_map = std::get<viz::Heatmap>(plain_tl.panels.at(0));
  EXPECT_TRUE(plain_map.mask.empty());
  EXPECT_EQ(plain_map.title.rfind("kept, selected and evicted", 0), 0u) << plain_map.title;
}

TEST_F(FiguresExport, TimelineDiffMarksWhereTheCachesOfAAndBDiffer) {
  // A ring of 2 sinks + 6 against a head that keeps everything: positions the ring dropped are
  // "only B" from the step they left; a run against itself is "both" wherever it is live.
  Timeline a;
  a.n_layer = a.n_head_kv = 1;
  a.n_positions = 14;
  a.n_steps = 4;
  for (std::int64_t p = 0; p < 14; ++p) a.entered_at.push_back(static_cast<std::int32_t>(p < 10 ? 0 : p - 9));
  a.evicted_at.assign(14, -1);
  a.evicted_by.assign(14, 0);
  Timeline b = a;
  for (std::int64_t p = 2; p < 14; ++p) {
    const std::int64_t s = p + 6 - 10 + 1;
    if (s <= 4) a.evicted_at[p] = static_cast<std::int32_t>(std::max<std::int64_t>(s, 0));
  }
  const TimelineRaster d = timeline_diff_raster(a, b, 0, 0, 5, 14);
  for (std::int64_t st = 0; st <= 4; ++st)
    for (std::int64_t p = 0; p < 14; ++p) {
      const bool in_b = b.entered_at[p] <= st;
      const bool in_a = in_b && (a.evicted_at[p] < 0 || a.evicted_at[p] > st);
      const float got = d.cells[static_cast<std::size_t>(st * 14 + p)];
      if (!in_b)
        EXPECT_TRUE(std::isnan(got)) << st << "," << p;
      else
        EXPECT_EQ(got, in_a ? kDiffBoth : kDiffOnlyB) << st << "," << p;
    }
  const TimelineRaster self = timeline_diff_raster(a, a, 0, 0, 5, 14);
  for (float v : self.cells) EXPECT_TRUE(std::isnan(v) || v == kDiffBoth);
  EXPECT_THROW(timeline_diff_raster(a, b, 0, 1, 5, 14), std::out_of_range);
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

// A DuoAttention pattern (tests/data/duo/small: 3 layers x 4 KV heads of gates) is shown as the run
// binarized it: recorded sparsity 0.5 streams ceil(0.5 x 11) = 6 of the 12 heads, the lowest gates,
// with the recorded sink and recent sizes; the head-pattern export draws the same map.
TEST_F(HeadPatternFigures, BudgetsFigureOfADuoPatternRunBinarizesAsTheRunDid) {
  const std::string duo = (gui::testing::source_dir() / "tests/data/duo/small").string();
  // Recorded with the pattern key only, as runs before the DuoAttention keys were: their defaults apply.
  const std::int64_t run_id =
      gui::testing::write_heads_run(db_, runs_.snapkv, duo, gui::testing::test_head_pattern(3, 4));
  const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto run = load_run_data(store, run_id, {});
  const HeadsStagePattern hp = run_head_pattern(*run);
  int64_t streaming = 0;
  for (const auto& layer : hp.pattern.layers)
    for (const auto& h : layer) {
      streaming += h.streaming;
      if (h.streaming) EXPECT_EQ(h.sink + h.window, kDuoDefaultSink + kDuoDefaultRecent);
    }
  EXPECT_EQ(streaming, 6);
  // The six lowest gates: layer 0 heads 1-3 (-1.2e-4 clipped to 0, 0.559, 2.0e-4), layer 1 head 1
  // (0.428), layer 2 heads 1 and 2 (0.621, 0.0021).
  for (const auto [l, h] : {std::pair{0, 1}, {0, 2}, {0, 3}, {1, 1}, {2, 1}, {2, 2}})
    EXPECT_TRUE(hp.pattern.layers[l][h].streaming) << l << " " << h;
  EXPECT_FALSE(hp.pattern.layers[0][0].streaming);
  const viz::Figure f = budgets_figure(*run, nullptr, {});
  ASSERT_NO_THROW(viz::validate(f));
  ASSERT_EQ(f.panels.size(), 4u) << "kept map, kept per layer, pattern map, windows (not a note)";
  const auto& map = std::get<viz::Heatmap>(f.panels[2]);
  EXPECT_NE(map.title.find("head pattern small"), std::string::npos) << map.title;
  EXPECT_EQ(map.mask[1], 0);  // layer 0 head 1 streams
  EXPECT_EQ(map.mask[0], 1);
  const viz::Figure e = build_figure(store, run_id, {"head-pattern", 0, 0, "", {}});
  ASSERT_NO_THROW(viz::validate(e));
  EXPECT_EQ(std::get<viz::Heatmap>(e.panels.at(0)).mask, map.mask);
}

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

namespace kvscope::figures {
namespace {

/// Units set in entry e of `b`, ascending, from the raw bytes (LSB first).
std::vector<std::int64_t> raw_units(const SelectionBits& b, std::int64_t e) {
  std::vector<std::int64_t> out;
  if (e + 1 >= static_cast<std::int64_t>(b.offsets.size())) return out;
  for (std::int64_t i = b.offsets[e]; i < b.offsets[e + 1]; ++i)
    for (int bit = 0; bit < 8; ++bit)
      if (b.bits[static_cast<std::size_t>(i)] >> bit & 1) out.push_back((i - b.offsets[e]) * 8 + bit);
  return out;
}

/// selection_step() from scratch: live set from entered_at / evicted_at, ranks from the bitmaps.
void expect_step_recomputed(const Timeline& t, std::int64_t l, std::int64_t h, std::int64_t s) {
  SCOPED_TRACE("head " + std::to_string(l) + ":" + std::to_string(h) + " step " + std::to_string(s));
  std::vector<std::int64_t> live;
  for (std::int64_t p = 0; p < t.n_positions; ++p) {
    const std::int32_t out = t.evicted_at[static_cast<std::size_t>((l * t.n_head_kv + h) * t.n_positions + p)];
    if (t.entered_at[static_cast<std::size_t>(p)] <= s && (out < 0 || out > s)) live.push_back(p);
  }
  const std::int64_t n = static_cast<std::int64_t>(live.size()), e = (s - 1) * t.n_head_kv + h;
  std::vector<bool> sel(static_cast<std::size_t>(n), false), ex(static_cast<std::size_t>(n), false);
  bool any_sel = false, token = false, any_exact = false;
  if (s >= 1) {
    if (!t.tokens.empty() && t.tokens[l].size(e) > 0) {
      token = any_sel = true;
      for (std::int64_t r : raw_units(t.tokens[l], e))
        if (r < n) sel[static_cast<std::size_t>(r)] = true;
    } else if (!t.pages.empty() && t.pages[l].size(e) > 0) {
      any_sel = true;
      for (std::int64_t pg : raw_units(t.pages[l], e))
        for (std::int64_t r = pg * t.page; r < std::min(n, (pg + 1) * t.page); ++r)
          sel[static_cast<std::size_t>(r)] = true;
    }
    if (!t.exact.empty() && t.exact[l].size(e) > 0) {
      any_exact = true;
      for (std::int64_t r : raw_units(t.exact[l], e))
        if (r < n) ex[static_cast<std::size_t>(r)] = true;
    }
  }
  const SelectionStep st = selection_step(t, l, h, s);
  ASSERT_EQ(st.live, live);
  EXPECT_EQ(st.selected, any_sel);
  EXPECT_EQ(st.per_token, token);
  EXPECT_EQ(st.exact, any_exact);
  std::int64_t n_sel = 0, n_ex = 0, n_hit = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    const bool a = sel[static_cast<std::size_t>(r)], b = ex[static_cast<std::size_t>(r)];
    const int want = a && b ? kStepHit : b ? kStepMissed : a ? kStepSelected : kStepLive;
    ASSERT_EQ(st.cell[static_cast<std::size_t>(r)], want) << "rank " << r << " position " << live[r];
    n_sel += a, n_ex += b, n_hit += a && b;
  }
  EXPECT_EQ(st.n_selected, n_sel);
  EXPECT_EQ(st.n_exact, n_ex);
  EXPECT_EQ(st.n_hit, n_hit);
  const float recall = t.recall_at(s, l, h);
  EXPECT_TRUE(std::isnan(recall) ? std::isnan(st.recall) : st.recall == recall);
  // The strip: a column shows the highest state among its ranks (live / selected only without an
  // exact top-k), at full resolution and binned.
  for (int width : {7, 64, 5000}) {
    const viz::Figure f = selection_steps_figure(t, st, "run", "caption", width);
    EXPECT_NO_THROW(viz::validate(f));
    const auto& strip = std::get<viz::Heatmap>(f.panels.at(0));
    EXPECT_EQ(strip.categories.size(), any_exact ? 4u : 2u);
    if (n == 0) continue;
    const std::int64_t cols = std::min<std::int64_t>(n, std::clamp(width, 64, 4096));
    ASSERT_EQ(strip.cols, cols) << width;
    std::vector<float> want(static_cast<std::size_t>(cols), -1.0f);
    for (std::int64_t r = 0; r < n; ++r) {
      float v = static_cast<float>(st.cell[static_cast<std::size_t>(r)]);
      if (!any_exact) v = std::min(v, 1.0f);
      float& w = want[static_cast<std::size_t>(r * cols / n)];
      w = std::max(w, v);
    }
    for (std::int64_t c = 0; c < cols; ++c) ASSERT_EQ(strip.values[static_cast<std::size_t>(c)], want[c]) << c;
    const StripBins bins = strip_bins(n, strip.cols);
    for (std::int64_t c = 0; c < cols; ++c)
      for (std::int64_t r = bins.first_rank(c); r < bins.first_rank(c + 1); ++r) ASSERT_EQ(bins.col(r), c);
  }
}

TEST_F(FiguresExport, SelectionStepStripEqualsARecomputation) {
  const auto store = sessions::SessionStore::open((dir_ / "full.db").string(), sessions::OpenMode::kReadOnly);
  const auto t = sessions::load_timeline(store, full_.snapkv);  // pages; head (0, 0) per token + exact top-k
  ASSERT_TRUE(t.has_value());
  ASSERT_FALSE(t->exact.empty());
  for (std::int64_t l = 0; l < t->n_layer; ++l)
    for (std::int64_t h = 0; h < t->n_head_kv; ++h)
      for (std::int64_t s = 0; s <= t->n_steps; ++s) expect_step_recomputed(*t, l, h, s);
  // The synthetic head (0, 0): recall = hits / k, k = entries selected.
  std::int64_t missed = 0;
  for (std::int64_t s = 1; s <= t->n_steps; ++s) {
    const SelectionStep st = selection_step(*t, 0, 0, s);
    ASSERT_TRUE(st.exact && st.per_token);
    EXPECT_GT(st.n_hit, 0);
    missed += st.n_exact - st.n_hit;
    EXPECT_FLOAT_EQ(st.recall, float(st.n_hit) / float(st.n_selected));
  }
  EXPECT_GT(missed, 0) << "every state occurs";
  // Random records: rings and prefill evictions, tokens / pages / exact top-k per head and step.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    Timeline r;
    r.n_layer = 1;
    r.n_head_kv = 2;
    r.n_steps = 1 + rng() % 12;
    r.n_positions = 1 + rng() % 150;
    r.page = 1 + rng() % 5;
    for (std::int64_t p = 0; p < r.n_positions; ++p)
      r.entered_at.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(r.n_steps, p / 10)));
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t p = 0; p < r.n_positions; ++p) {
        const std::int32_t in = r.entered_at[static_cast<std::size_t>(p)];
        r.evicted_at.push_back(rng() % 3 ? -1 : static_cast<std::int32_t>(in + rng() % (r.n_steps - in + 1)));
        r.evicted_by.push_back(r.evicted_at.back() < 0 ? 0 : 1);
      }
    r.pages.resize(1);
    r.tokens.resize(1);
    r.exact.resize(1);
    for (std::int64_t s = 1; s <= r.n_steps; ++s)
      for (std::int64_t h = 0; h < 2; ++h) {
        const std::int64_t n = static_cast<std::int64_t>(r.live_positions(0, h, s).size());
        std::vector<std::int64_t> ranks, pages, exact;
        for (std::int64_t k = 0; k < n; ++k) {
          if (rng() % 3 == 0) ranks.push_back(k);
          if (rng() % 4 == 0) exact.push_back(k);
        }
        for (std::int64_t k : ranks)
          if (pages.empty() || pages.back() != k / r.page) pages.push_back(k / r.page);
        r.pages[0].append((n + r.page - 1) / r.page, pages);
        if (n > 0 && rng() % 2)
          r.tokens[0].append(n, ranks);
        else
          r.tokens[0].pad_to(r.tokens[0].entries() + 1);
        if (n > 0 && rng() % 2)
          r.exact[0].append(n, exact);
        else
          r.exact[0].pad_to(r.exact[0].entries() + 1);
      }
    ASSERT_EQ(r.check(), "");
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t s = 0; s <= r.n_steps; ++s) expect_step_recomputed(r, 0, h, s);
  }
}

}  // namespace
}  // namespace kvscope::figures
