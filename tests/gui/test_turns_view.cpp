// A multi-turn run per turn (issue: "multi-turn sessions open in the GUI per turn"): the turns'
// positions and steps (figures::turn_spans) on hand-made turns and timelines, and on a real
// three-turn run of the embedded pycode-16m recorded through kvscope::run against the positions
// computed by hand from its prompt and turn lengths; the Timeline view with its turn selector drawn
// for that run, choosing a turn zooming to its positions and moving the shared step.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "app_state.h"
#include "gui_test_support.h"
#include "headless.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "panels/panels.h"
#include "session_record.h"
#include "turn_spans.h"

namespace kvscope::gui::testing {
namespace {

sessions::Turn turn(std::size_t n_in, std::size_t n_out) {
  return {std::vector<std::int32_t>(n_in, 7), std::vector<std::int32_t>(n_out, 9)};
}

TEST(TurnSpans, FromLengthsALaterTurnsBlockIsTheFedBackTokenAndItsInput) {
  EXPECT_TRUE(figures::turn_spans({}).empty());
  // Turns 1 and 2 ran to the limit (3 tokens), turn 3 stopped on a stop token after 1.
  const auto s = figures::turn_spans({turn(5, 3), turn(2, 3), turn(4, 1)});
  ASSERT_EQ(s.size(), 3u);
  // Turn 1: the prompt at step 0; outputs 0 and 1 fed at steps 1, 2 (positions 5, 6); output 2 opens
  // turn 2's block at position 7.
  EXPECT_EQ(s[0].block_lo, 0);
  EXPECT_EQ(s[0].block_hi, 5);
  EXPECT_EQ(s[0].out_lo, 5);
  EXPECT_EQ(s[0].out_hi, 8);
  EXPECT_EQ(s[0].step, 0);
  EXPECT_EQ(s[0].n_decode, 2);
  EXPECT_FALSE(s[0].stopped);
  EXPECT_EQ(s[0].first(), 0);
  EXPECT_EQ(s[0].last(), 7);
  // Turn 2: [fed-back token, 2 inputs] at 7..9, prefilled at step 3; outputs at 10, 11 (+ 12).
  EXPECT_EQ(s[1].block_lo, 7);
  EXPECT_EQ(s[1].block_hi, 10);
  EXPECT_EQ(s[1].step, 3);
  EXPECT_EQ(s[1].n_decode, 2);
  EXPECT_EQ(s[1].out_hi, 13);
  // Turn 3: block 12..16 at step 6; it stopped, so its one output was fed (position 17, step 7).
  EXPECT_EQ(s[2].block_lo, 12);
  EXPECT_EQ(s[2].block_hi, 17);
  EXPECT_EQ(s[2].step, 6);
  EXPECT_TRUE(s[2].stopped);
  EXPECT_EQ(s[2].n_decode, 1);
  EXPECT_EQ(s[2].out_lo, 17);
  EXPECT_EQ(s[2].out_hi, 18);
  EXPECT_EQ(s[2].last(), 17);
  for (const auto& x : s) EXPECT_FALSE(x.from_timeline);
}

TEST(TurnSpans, TheTimelineSettlesATurnThatStoppedAtTheLongestLength) {
  // Both turns stopped on a stop token after 2 tokens: from the lengths alone they look as if they
  // ran to the limit. The record: prompt 0..3 at step 0, outputs fed at 4 (step 1) and 5 (step 2),
  // then [stop token, 2 inputs] at 6..8 (step 3), outputs at 9 (step 4) and 10 (step 5).
  const std::vector<sessions::Turn> turns = {turn(4, 2), turn(2, 2)};
  Timeline t;
  t.n_layer = 1, t.n_head_kv = 1, t.n_positions = 11, t.n_steps = 5;
  t.entered_at = {0, 0, 0, 0, 1, 2, 3, 3, 3, 4, 5};
  const auto guess = figures::turn_spans(turns);
  EXPECT_EQ(guess[1].block_lo, 5) << "lengths alone: turn 1 at the limit";
  const auto s = figures::turn_spans(turns, &t);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].stopped);
  EXPECT_EQ(s[0].n_decode, 2);
  EXPECT_EQ(s[0].out_lo, 4);
  EXPECT_EQ(s[0].out_hi, 6) << "the stop token opening turn 2 is not an output";
  EXPECT_EQ(s[1].block_lo, 6);
  EXPECT_EQ(s[1].block_hi, 9);
  EXPECT_EQ(s[1].step, 3);
  EXPECT_TRUE(s[1].stopped);
  EXPECT_EQ(s[1].out_hi, 11);
  EXPECT_TRUE(s[0].from_timeline && s[1].from_timeline);
  // A record that fits neither place: the lengths stand, not from the timeline.
  t.entered_at = {0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7};
  const auto odd = figures::turn_spans(turns, &t);
  EXPECT_EQ(odd[1].block_lo, 5);
  EXPECT_FALSE(odd[1].from_timeline);
}

class TurnsView : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
    dir_ = make_temp_dir("turns_view");
  }
  void TearDown() override { remove_tree(dir_); }
  std::filesystem::path dir_;
};

TEST_F(TurnsView, ARealThreeTurnRunOpensPerTurn) {
  const Model model = load_model(pycode_dir(), LoadOptions{});
  const Engine engine(model);
  PolicyRegistry registry;
  register_builtin_policies(registry);
  const std::string text = read_text(pycode_dir() / "golden/prompts/argparse_head.py").substr(0, 700);
  const std::string db = (dir_ / "turns.db").string();
  constexpr std::int64_t kNew = 5;  // no stop ids: every turn runs to the limit
  GenerateRequest req;
  req.prompt_ids = model.tokenizer->encode(text);
  req.follow_up_turns = {model.tokenizer->encode("\n    parser.add_argument(\"--verbose\""),
                         model.tokenizer->encode("\n\ndef main():\n")};
  req.max_new_tokens = kNew;
  const Pipeline p(registry, "snapkv:window=8");
  req.pipeline = &p;
  req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.5};
  req.capture = CaptureLevel::kSummary;
  std::int64_t id = -1;
  {
    auto store = sessions::SessionStore::open(db);
    run::generate_into_store(store, engine, &p, registry, req, text, "three turns", std::nullopt, id);
  }
  const auto n0 = static_cast<std::int64_t>(req.prompt_ids.size());
  const auto n1 = static_cast<std::int64_t>(req.follow_up_turns[0].size());
  const auto n2 = static_cast<std::int64_t>(req.follow_up_turns[1].size());
  // By hand: each turn feeds kNew - 1 outputs while decoding; its last opens the next block.
  const std::int64_t b1 = n0 + kNew - 1, b2 = b1 + 1 + n1 + kNew - 1, end = b2 + 1 + n2 + kNew - 1;
  const std::int64_t s1 = kNew, s2 = 2 * kNew;

  // The app opens it as the GUI does (light part, with the tokenizer's texts), the loader decodes
  // the timeline.
  HeadlessImGui im(1400.0f, 900.0f);
  NullTextureStore textures;
  auto s = std::make_unique<AppState>();
  s->headless = true;
  GuiOptions o;
  o.open = {db};
  o.runs = {id};
  o.view = View{"timeline"};
  ASSERT_TRUE(apply_options(*s, o)) << s->status;
  const RunData& a = *s->a;
  ASSERT_EQ(a.turns.size(), 3u) << a.turns_note;
  EXPECT_EQ(a.turns[0].input_ids, req.prompt_ids);
  EXPECT_EQ(a.turns[1].input_ids, req.follow_up_turns[0]);
  EXPECT_EQ(a.turns[2].output_ids.size(), static_cast<std::size_t>(kNew));
  ASSERT_TRUE(a.tokens_from_tokenizer) << a.tokenizer_note;
  EXPECT_NE(a.turn_input_text[1].find("add_argument(\"--verbose\""), std::string::npos) << a.turn_input_text[1];
  EXPECT_NE(a.turn_input_text[2].find("def main():"), std::string::npos) << a.turn_input_text[2];
  EXPECT_EQ(a.turn_output_text[0], model.tokenizer->decode(a.turns[0].output_ids));

  Ui ui{im.fonts(), textures, nullptr, nullptr};
  for (int f = 0; f < 4; ++f) {
    im.frame([&] { draw_app(*s, ui); });
    s->loader.wait_idle();
  }
  const Timeline* t = a.timeline();
  ASSERT_NE(t, nullptr);
  // Lengths alone already agree with the hand count; the timeline confirms them and gives the steps.
  for (const Timeline* tl : {static_cast<const Timeline*>(nullptr), t}) {
    const auto sp = figures::turn_spans(a.turns, tl);
    ASSERT_EQ(sp.size(), 3u);
    EXPECT_EQ(sp[0].block_hi, n0);
    EXPECT_EQ(sp[1].block_lo, b1);
    EXPECT_EQ(sp[1].block_hi, b1 + 1 + n1);
    EXPECT_EQ(sp[2].block_lo, b2);
    EXPECT_EQ(sp[2].block_hi, b2 + 1 + n2);
    EXPECT_EQ(sp[2].out_hi, end);
    EXPECT_EQ(sp[1].step, s1);
    EXPECT_EQ(sp[2].step, s2);
  }
  EXPECT_EQ(t->n_positions, end);
  EXPECT_EQ(t->n_steps, 3 * (kNew - 1) + 2);
  const auto& spans = s->timeline.turns;  // what the view's selector computed
  ASSERT_EQ(spans.size(), 3u) << "the Timeline view drew the turn selector";
  for (std::size_t k = 0; k < spans.size(); ++k) {
    EXPECT_TRUE(spans[k].from_timeline) << k;
    EXPECT_FALSE(spans[k].stopped) << k;
    for (std::int64_t q = spans[k].block_lo; q < spans[k].block_hi; ++q)
      ASSERT_EQ(t->entered_at[static_cast<std::size_t>(q)], spans[k].step) << "turn " << k << " position " << q;
    for (std::int64_t i = 0; i < spans[k].n_decode; ++i)
      EXPECT_EQ(t->entered_at[static_cast<std::size_t>(spans[k].block_hi + i)], spans[k].step + 1 + i);
  }

  // Choosing turn 2: its block and outputs become the window, the shared step its prefill step.
  panels::select_turn(*s, a, 1);
  EXPECT_EQ(s->timeline.turn, 1);
  EXPECT_EQ(s->sel.pos_lo, b1);
  EXPECT_EQ(s->sel.pos_hi, b2) << "its last output opens turn 3's block";
  EXPECT_EQ(s->timeline.step, s1);
  for (int f = 0; f < 3; ++f) im.frame([&] { draw_app(*s, ui); });
  ASSERT_TRUE(s->timeline.fig.valid()) << s->timeline.fig.error();
  const auto* map = std::get_if<viz::Heatmap>(&s->timeline.fig.figure().panels.at(0));
  ASSERT_NE(map, nullptr);
  EXPECT_NE(
      map->title.find("positions " + std::to_string(b1) + "-" + std::to_string(b2) + " of " + std::to_string(end)),
      std::string::npos)
      << map->title;
  // The mouse over the view (tooltips, the selector's rows), then every view with the turns open.
  for (int f = 0; f < 24; ++f) {
    const ImVec2 m{40.0f + static_cast<float>((f * 131) % 1320), 60.0f + static_cast<float>((f * 37) % 800)};
    im.frame([&] { draw_app(*s, ui); }, m, false);
  }
  EXPECT_EQ(s->timeline.turns.size(), 3u);
  for (const char* v : {"tokens", "selection", "timeline"}) {
    s->view = View{v};
    s->select_view = true;
    for (int f = 0; f < 3; ++f) {
      im.frame([&] { draw_app(*s, ui); });
      s->loader.wait_idle();
    }
  }
  EXPECT_EQ(s->timeline.step, s1) << "the Selection view keeps the turn's step";
  panels::select_turn(*s, a, 0);
  EXPECT_EQ(s->sel.pos_lo, 0);
  EXPECT_EQ(s->sel.pos_hi, b1) << "the prompt and its outputs, the last one opening turn 2";
  EXPECT_EQ(s->timeline.step, 1) << "the first turn's first decode step";
  panels::select_turn(*s, a, -1);
  EXPECT_EQ(s->timeline.turn, -1);
  EXPECT_EQ(s->sel.pos_hi, -1) << "all turns: every position";
  im.frame([&] { draw_app(*s, ui); });

  // `--turn 3` opens on the last turn: its block to its last fed output.
  EXPECT_EQ(parse_gui_options({"--turn", "3"}).turn, 3);
  EXPECT_THROW(parse_gui_options({"--turn", "0"}), std::invalid_argument);
  s = std::make_unique<AppState>();
  s->headless = true;
  o.turn = 3;
  ASSERT_TRUE(apply_options(*s, o)) << s->status;
  for (int f = 0; f < 4; ++f) {
    im.frame([&] { draw_app(*s, ui); });
    s->loader.wait_idle();
  }
  EXPECT_EQ(s->timeline.turn, 2);
  EXPECT_EQ(s->sel.pos_lo, b2);
  EXPECT_EQ(s->sel.pos_hi, end - 1);
  EXPECT_EQ(s->timeline.step, s2);
}

}  // namespace
}  // namespace kvscope::gui::testing
