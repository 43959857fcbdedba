// The Fidelity view's tokens (issue 30 item 10): per-step tokens and probabilities read from a
// stored run (fidelity_tokens.h), a one-line note for runs recorded before them, and the panel
// drawn with the mouse over the plot and the texts: hover and click link one step in both.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "app_state.h"
#include "fidelity_tokens.h"
#include "gui_test_support.h"
#include "headless.h"
#include "textures.h"

namespace kvscope::gui {
namespace {

using testing::make_temp_dir;
using testing::remove_tree;

/// What a run recorded with the full reference stores per step (session_record.cpp), for tokens
/// chosen by hand: 40 steps, the full cache's top-1 differing at steps 1, 7, 20, and a last step
/// for a stop token (not in the outputs).
struct HandRun {
  std::vector<std::int32_t> outputs, token, full_top;
  std::vector<double> p_token, p_full_top, p_full_token, kl;
  HandRun() {
    for (int i = 0; i < 40; ++i) {
      const std::int32_t tok = 100 + 7 * i;
      const bool differ = i == 1 || i == 7 || i == 20;
      if (i < 39) outputs.push_back(tok);
      token.push_back(i < 39 ? tok : 2);  // the stop token's entry
      full_top.push_back(differ ? tok + 1 : token.back());
      p_token.push_back(0.5 + 0.01 * i);
      p_full_top.push_back(differ ? 0.6 : 0.5 + 0.01 * i);
      p_full_token.push_back(differ ? 0.1 + 0.001 * i : 0.5 + 0.01 * i);
      kl.push_back(i == 20 ? 2.5 : differ ? 0.8 : 0.01);
    }
  }
};

/// Appends a complete run like `like` with HandRun's outputs and step metrics; with `tokens` false,
/// only "kl" and "top1" (a run recorded before the token record).
std::int64_t write_hand_run(const std::filesystem::path& db, std::int64_t like, bool tokens) {
  auto store = sessions::SessionStore::open(db.string());
  sessions::RunInfo info = store.load_run(like).info;
  info.name = tokens ? "with tokens" : "before the token record";
  info.sweep_key.reset();
  const std::int64_t run = store.begin_run(info);
  const HandRun h;
  std::vector<sessions::StepMetric> rows;
  for (std::size_t i = 0; i < h.token.size(); ++i) {
    const auto s = static_cast<std::int64_t>(i);
    rows.push_back({s, "kl", h.kl[i]});
    rows.push_back({s, "top1", h.token[i] == h.full_top[i] ? 1.0 : 0.0});
    if (!tokens) continue;
    rows.push_back({s, "token_id", double(h.token[i])});
    rows.push_back({s, "full_top_id", double(h.full_top[i])});
    rows.push_back({s, "p_token", h.p_token[i]});
    rows.push_back({s, "p_full_top", h.p_full_top[i]});
    rows.push_back({s, "p_full_token", h.p_full_token[i]});
  }
  store.add_step_metrics(run, rows);
  store.finish_run(run, {h.outputs, "text"});
  return run;
}

class FidelityTokensView : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("fidelity_tokens");
    db_ = dir_ / "runs.db";
    SyntheticSpec spec;
    spec.n_layer = 2;
    spec.n_tok = 64;
    spec.n_steps = 12;
    synthetic_ = testing::write_test_session(db_, spec);
    with_tokens_ = write_hand_run(db_, synthetic_.snapkv, true);
    before_ = write_hand_run(db_, synthetic_.snapkv, false);
  }
  static void TearDownTestSuite() { remove_tree(dir_); }
  static std::shared_ptr<figures::RunData> load(std::int64_t run, const figures::TokenText& text) {
    const auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
    return figures::load_run_data(store, run, text);
  }
  static inline std::filesystem::path dir_, db_;
  static inline SyntheticRuns synthetic_;
  static inline std::int64_t with_tokens_ = -1, before_ = -1;
};

TEST_F(FidelityTokensView, ReadsTokensProbabilitiesAndTexts) {
  const figures::TokenText text = [](std::int32_t id) -> std::optional<std::string> {
    if (id == 2) return "</s>";
    return "t" + std::to_string(id);
  };
  const auto run = load(with_tokens_, text);
  const FidelityTokens t = fidelity_tokens(*run, text);
  const HandRun h;
  EXPECT_TRUE(t.note.empty());
  ASSERT_EQ(t.steps.size(), 40u);
  EXPECT_EQ(t.differ, 3);
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const FidelityStepTokens& s = t.steps[i];
    EXPECT_EQ(s.token, h.token[i]) << i;
    EXPECT_EQ(s.full_top, h.full_top[i]) << i;
    EXPECT_EQ(s.p_token, h.p_token[i]) << i;
    EXPECT_EQ(s.p_full_top, h.p_full_top[i]) << i;
    EXPECT_EQ(s.p_full_token, h.p_full_token[i]) << i;
    EXPECT_EQ(s.kl, h.kl[i]) << i;
    EXPECT_EQ(s.agree(), !(i == 1 || i == 7 || i == 20)) << i;
    EXPECT_EQ(s.in_output, i < 39) << i;
    EXPECT_EQ(s.text, i < 39 ? run->output_text[i] : "</s>") << i;
    EXPECT_EQ(s.full_text, i < 39 ? "t" + std::to_string(h.full_top[i]) : "</s>") << i;
  }
  EXPECT_EQ(t.steps[1].text, "t107");
  EXPECT_EQ(t.steps[1].full_text, "t108");

  // Without a tokenizer every id reads "#id".
  const FidelityTokens ids = fidelity_tokens(*load(with_tokens_, {}), {});
  ASSERT_EQ(ids.steps.size(), 40u);
  EXPECT_EQ(ids.steps[1].text, "#107");
  EXPECT_EQ(ids.steps[1].full_text, "#108");
  EXPECT_EQ(ids.steps[39].text, "#2");
}

TEST_F(FidelityTokensView, RunsWithoutTheRecordGetAOneLineNote) {
  const FidelityTokens before = fidelity_tokens(*load(before_, {}), {});
  EXPECT_TRUE(before.steps.empty());
  EXPECT_NE(before.note.find("run #" + std::to_string(before_) + " predates the per-step token record"),
            std::string::npos)
      << before.note;
  EXPECT_EQ(before.note.find('\n'), std::string::npos);
  const FidelityTokens failed = fidelity_tokens(*load(synthetic_.failed, {}), {});
  EXPECT_TRUE(failed.steps.empty());
  EXPECT_NE(failed.note.find("has no full-cache reference"), std::string::npos) << failed.note;
}

TEST_F(FidelityTokensView, HoverAndClickLinkOneStepInThePlotAndTheTexts) {
  HeadlessImGui im(1400.0f, 900.0f);
  NullTextureStore textures;
  {
    AppState s;
    s.headless = true;
    GuiOptions o;
    o.open = {db_.string()};
    o.runs = {with_tokens_};
    o.view = View::kFidelity;
    ASSERT_TRUE(apply_options(s, o)) << s.status;
    Ui ui{im.fonts(), textures, nullptr, nullptr};
    for (int f = 0; f < 3; ++f) im.frame([&] { draw_app(s, ui); });
    FidelityState& st = s.fidelity;
    ASSERT_TRUE(st.fig.valid()) << st.fig.error();
    EXPECT_EQ(st.selected, 20) << "a run opens on its step of largest KL";
    ASSERT_EQ(st.tokens.size(), 1u);
    ASSERT_EQ(st.row_start.size() > 0, true) << "the texts were laid out";
    EXPECT_EQ(st.left.size(), 40u);
    EXPECT_EQ(st.right.size(), 40u);

    // The plot: hovering step k's x marks k; a click selects it.
    const viz::PanelLayout& kl = st.fig.layout().panels.at(0);
    const ImVec2 origin = st.fig.origin();
    auto at_step = [&](double k) {
      return ImVec2{origin.x + static_cast<float>(kl.x.map.to_px(k)),
                    origin.y + static_cast<float>(kl.plot.y + kl.plot.h / 2)};
    };
    im.frame([&] { draw_app(s, ui); }, at_step(7));
    EXPECT_EQ(st.hovered, 7);
    im.frame([&] { draw_app(s, ui); }, at_step(7), true);
    im.frame([&] { draw_app(s, ui); }, at_step(7));
    EXPECT_EQ(st.selected, 7);

    // The texts: sweep the mouse over the lower part of the window; every hovered box names a step
    // of the run, and clicking it selects that step.
    std::map<std::int64_t, int> seen;
    const float top = origin.y + static_cast<float>(st.fig.layout().panels.back().cell.bottom()) + 40;
    for (float y = top; y < 880; y += 11)
      for (float x = 12; x < 1390; x += x < 700 ? 11 : 37) {  // left column finely, the right one coarsely
        im.frame([&] { draw_app(s, ui); }, {x, y});
        if (st.hovered >= 0) ++seen[st.hovered];
      }
    EXPECT_EQ(seen.size(), 40u) << "every step's box is under the sweep";
    for (const auto& [step, n] : seen) EXPECT_LT(step, 40);
    // Click the box of step 1 (differs) wherever the sweep found it.
    bool clicked = false;
    for (float y = top; y < 880 && !clicked; y += 11)
      for (float x = 12; x < 700 && !clicked; x += 11) {
        im.frame([&] { draw_app(s, ui); }, {x, y});
        if (st.hovered == 1) {
          im.frame([&] { draw_app(s, ui); }, {x, y}, true);
          im.frame([&] { draw_app(s, ui); }, {x, y});
          clicked = true;
        }
      }
    ASSERT_TRUE(clicked);
    EXPECT_EQ(st.selected, 1);
  }
  {
    // A run from before the record: the figure as before and a note, no texts.
    AppState s;
    s.headless = true;
    GuiOptions o;
    o.open = {db_.string()};
    o.runs = {before_};
    o.view = View::kFidelity;
    ASSERT_TRUE(apply_options(s, o)) << s.status;
    Ui ui{im.fonts(), textures, nullptr, nullptr};
    for (int f = 0; f < 3; ++f) im.frame([&] { draw_app(s, ui); }, {700, 300});
    EXPECT_TRUE(s.fidelity.fig.valid());
    EXPECT_EQ(s.fidelity.selected, -1);
    EXPECT_TRUE(s.fidelity.row_start.empty());
    const auto& t = s.fidelity.tokens.begin()->second;
    EXPECT_TRUE(t.steps.empty());
    EXPECT_FALSE(t.note.empty());
  }
  EXPECT_EQ(textures.live(), 0);
}

}  // namespace
}  // namespace kvscope::gui
