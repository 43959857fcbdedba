// Issue 30 item 9: re-run and stale B. "Open in Run" fills the Run view from a stored run (the pure
// mapping fill_from_run, then open_in_run on the app); Compare and the context bar say when A and B
// are on different prompts or models (ab_mismatch), also once a new run became A while B stayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "ab_mismatch.h"
#include "app_state.h"
#include "gui_test_support.h"
#include "headless.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/sessions/turn_blobs.h"
#include "run_from_record.h"

namespace kvscope::gui {
namespace {

bool has_note(const RunFill& f, const std::string& part) {
  return std::any_of(f.notes.begin(), f.notes.end(), [&](const std::string& n) { return n.find(part) != n.npos; });
}

sessions::RunRecord record(std::vector<std::int32_t> ids, const std::string& text = "def f():") {
  sessions::RunRecord r;
  r.row.id = 5;
  r.row.status = sessions::RunStatus::kComplete;
  r.info.name = "snapkv at half";
  r.info.model = {"/models/pycode-16m", "abc123", "llama", 4, 8, 2, 32, "bf16", "cuda:0"};
  r.info.pipeline.spec = "snapkv:gqa=mean,kernel=5,pool=avg,window=8+uniform";
  r.info.budget = {sessions::BudgetUnit::kCompressionRatio, 0.5};
  r.info.prompt = {text, std::move(ids)};
  r.outputs.tokens = {7, 8, 9, 10, 11, 12, 13};
  return r;
}

TEST(FillFromRun, EveryRecordedFieldReachesTheForm) {
  sessions::RunRecord r = record({1, 2, 3});
  r.blobs.push_back({1, "head_summary", 0, -1, sessions::DType::kF32, {2, 7}, 56, 40});
  r.step_metrics.push_back({0, "kl", 0.01});
  r.row.summary["beyond_context_tokens"] = 3;
  RunRequest base;
  base.model_path = "other-model";
  base.tokenizer_path = "/some/tokenizer.json";
  base.prompt = "something else";
  base.max_new_tokens = 64;
  base.capture = "off";
  base.capture_window = 48;
  base.greedy = false;
  const RunFill f = fill_from_run(r, "/tmp/runs.db", base);
  EXPECT_EQ(f.form.model_path, "/models/pycode-16m");
  EXPECT_TRUE(f.form.random_init.empty());
  EXPECT_TRUE(f.form.tokenizer_path.empty());  // an override is not recorded: the model's own
  EXPECT_EQ(f.form.device, "cuda:0");
  EXPECT_EQ(f.form.dtype, "bf16");
  EXPECT_EQ(f.form.prompt, "def f():");
  EXPECT_EQ(f.form.pipeline_spec, r.info.pipeline.spec);
  EXPECT_EQ(f.form.budget_unit, "compression_ratio");
  EXPECT_EQ(f.form.budget_value, 0.5);
  EXPECT_EQ(f.form.max_new_tokens, 7);  // what it generated: the limit is not recorded
  EXPECT_EQ(f.form.capture, "summary");
  EXPECT_TRUE(f.form.reference_full);
  EXPECT_TRUE(f.form.allow_beyond_context);
  EXPECT_EQ(f.form.db_path, "/tmp/runs.db");
  EXPECT_EQ(f.form.name, "snapkv at half");
  // Not recorded: kept from the form, and said so.
  EXPECT_EQ(f.form.capture_window, 48);
  EXPECT_FALSE(f.form.greedy);
  EXPECT_EQ(f.form.bos, base.bos);
  EXPECT_TRUE(has_note(f, "max new tokens not recorded")) << f.notes.size();
  EXPECT_TRUE(has_note(f, "sampling not recorded"));
  EXPECT_TRUE(has_note(f, "capture window not recorded"));
  EXPECT_TRUE(has_note(f, "BOS mode not recorded"));
  EXPECT_TRUE(has_note(f, "tokenizer override not recorded"));
}

TEST(FillFromRun, CaptureReferenceFullCacheRandomInitAndFailedRuns) {
  RunRequest base;
  base.budget_unit = "stored";
  base.budget_value = 99;
  sessions::RunRecord r = record({1, 2, 3});
  EXPECT_EQ(fill_from_run(r, "x.db", base).form.capture, "off");
  EXPECT_FALSE(fill_from_run(r, "x.db", base).form.reference_full);
  r.blobs.push_back({1, "timeline.info", -1, -1, sessions::DType::kI64, {8}, 64, 40});
  EXPECT_EQ(fill_from_run(r, "x.db", base).form.capture, "summary");
  r.blobs.push_back({2, "attention", 0, -1, sessions::DType::kF32, {2, 3}, 24, 20});
  EXPECT_EQ(fill_from_run(r, "x.db", base).form.capture, "full");
  r.row.summary["mean_kl"] = 0.2;
  EXPECT_TRUE(fill_from_run(r, "x.db", base).form.reference_full);
  // The full cache: no pipeline; the form's budget stays (a full-cache run has none to give).
  r.info.pipeline.spec = "full";
  const RunFill full = fill_from_run(r, "x.db", base);
  EXPECT_EQ(full.form.pipeline_spec, "");
  EXPECT_EQ(full.form.budget_unit, "stored");
  EXPECT_EQ(full.form.budget_value, 99);
  // Random weights of a config's shape: stored as the config.json path.
  r.info.model.path = "/shapes/llama-8b.json";
  base.tokenizer_path = "/tok/tokenizer.json";
  const RunFill ri = fill_from_run(r, "x.db", base);
  EXPECT_EQ(ri.form.random_init, "/shapes/llama-8b.json");
  EXPECT_TRUE(ri.form.model_path.empty());
  EXPECT_EQ(ri.form.tokenizer_path, "/tok/tokenizer.json");
  EXPECT_TRUE(has_note(ri, "seed is not recorded"));
  // A failed run: filled, and its first note says it did not complete.
  r.row.status = sessions::RunStatus::kFailed;
  r.row.error = "cancelled by the user";
  r.outputs.tokens.clear();
  const RunFill failed = fill_from_run(r, "x.db", base);
  ASSERT_FALSE(failed.notes.empty());
  EXPECT_NE(failed.notes[0].find("did not complete (cancelled by the user)"), std::string::npos) << failed.notes[0];
  EXPECT_EQ(failed.form.max_new_tokens, base.max_new_tokens);
}

// With the model's tokenizer the stored ids tell the BOS mode, and ids without text become text.
TEST(FillFromRun, TheTokenizerRecoversBosModeAndIdOnlyPrompts) {
  if (!std::filesystem::exists(testing::pycode_dir() / "tokenizer.json")) GTEST_SKIP() << "pycode-16m not present";
  const auto tok = load_tokenizer(testing::pycode_dir());
  const std::string text = "def add(a, b):\n    return a + b\n";
  const std::vector<std::int32_t> enc = tok->encode(text);
  RunRequest base;
  base.bos = "auto";
  EXPECT_EQ(fill_from_run(record(enc, text), "x.db", base, tok.get()).form.bos, "never");
  std::vector<std::int32_t> with_bos = enc;
  with_bos.insert(with_bos.begin(), 1);
  const RunFill always = fill_from_run(record(with_bos, text), "x.db", base, tok.get());
  EXPECT_EQ(always.form.bos, "always");
  EXPECT_FALSE(has_note(always, "BOS mode"));
  // Ids that the text no longer gives: the re-run would not be on the same prompt, said so.
  std::vector<std::int32_t> other = enc;
  other.push_back(enc.front());
  other.push_back(enc.front());
  EXPECT_TRUE(has_note(fill_from_run(record(other, text), "x.db", base, tok.get()), "not be on the same prompt ids"));
  // Ids only: their decoded text.
  const RunFill ids_only = fill_from_run(record(enc, ""), "x.db", base, tok.get());
  EXPECT_EQ(ids_only.form.prompt, tok->decode(enc));
  EXPECT_TRUE(has_note(ids_only, "token ids only"));
  // ... and without a tokenizer the form's prompt stays.
  base.prompt = "mine";
  EXPECT_EQ(fill_from_run(record(enc, ""), "x.db", base).form.prompt, "mine");
}

// A chat prompt (kvscope-cli --chat, the Run view's "chat template") goes back to the box with its
// user and system messages; a longer conversation (--messages) to its rendered text, tokenized as
// is (BOS never), with a note.
TEST(FillFromRun, AChatPromptGoesBackToTheChatTemplateBox) {
  const std::string rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n";
  sessions::RunRecord r = record({1, 2, 3}, rendered);
  r.info.prompt.chat_template = "/models/chat/chat_template.jinja";
  r.info.prompt.chat_messages = R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])";
  RunRequest base;
  base.bos = "always";
  RunFill f = fill_from_run(r, "/tmp/runs.db", base);
  EXPECT_TRUE(f.form.chat);
  EXPECT_EQ(f.form.prompt, "Hi");
  EXPECT_EQ(f.form.system, "Be brief.");
  EXPECT_EQ(f.form.bos, "auto");
  EXPECT_FALSE(has_note(f, "BOS mode not recorded"));

  r.info.prompt.chat_messages = R"([{"role":"user","content":"Hi"}])";
  base.system = "left over";
  f = fill_from_run(r, "/tmp/runs.db", base);
  EXPECT_TRUE(f.form.chat);
  EXPECT_EQ(f.form.system, "");

  r.info.prompt.chat_messages =
      R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Bye"}])";
  f = fill_from_run(r, "/tmp/runs.db", base);
  EXPECT_FALSE(f.form.chat);
  EXPECT_EQ(f.form.prompt, rendered);
  EXPECT_EQ(f.form.bos, "never");
  EXPECT_TRUE(has_note(f, "a conversation rendered with /models/chat/chat_template.jinja"));

  // A plain prompt clears a chat form.
  base.chat = true;
  f = fill_from_run(record({1, 2, 3}), "/tmp/runs.db", base);
  EXPECT_FALSE(f.form.chat);
  EXPECT_EQ(f.form.prompt, "def f():");
}

// A multi-turn run (kvscope-cli run --turn): the form's later turns are the stored later inputs
// decoded with the model's tokenizer (turn 0 is the prompt), max new tokens the most any turn
// generated; without a tokenizer they cannot be decoded, said so; a single-turn run clears them.
TEST(FillFromRun, ALaterTurnsInputsBecomeTheFormsTurns) {
  if (!std::filesystem::exists(testing::pycode_dir() / "tokenizer.json")) GTEST_SKIP() << "pycode-16m not present";
  const auto tok = load_tokenizer(testing::pycode_dir());
  const std::vector<std::string> texts = {"\n    parser.add_argument(\"--verbose\"", "\n\ndef main():\n"};
  const std::string prompt = "import argparse\n";
  const sessions::RunRecord r = record(tok->encode(prompt), prompt);  // its first turn generated 7 tokens
  const std::vector<sessions::Turn> turns = {{tok->encode(prompt), r.outputs.tokens},
                                             {tok->encode(texts[0]), {5, 6, 7, 8, 9, 10, 11, 12, 13}},
                                             {tok->encode(texts[1]), {4}}};
  RunRequest base;
  base.turns = {"left over"};
  const RunFill f = fill_from_run(r, "x.db", base, tok.get(), turns);
  EXPECT_EQ(f.form.turns, texts);
  EXPECT_EQ(f.form.prompt, prompt);
  EXPECT_EQ(f.form.max_new_tokens, 9);  // turn 2 generated the most
  EXPECT_FALSE(has_note(f, "turn")) << f.notes.size();
  // Ids the decoded text does not give back: filled, and said so.
  std::vector<sessions::Turn> odd = turns;
  odd[2].input_ids = {tok->encode("d").at(0), tok->encode("e").at(0), tok->encode("f").at(0)};
  ASSERT_NE(tok->encode(tok->decode(odd[2].input_ids)), odd[2].input_ids) << "\"def\" is one token";
  const RunFill f_odd = fill_from_run(r, "x.db", base, tok.get(), odd);
  EXPECT_EQ(f_odd.form.turns, (std::vector<std::string>{texts[0], tok->decode(odd[2].input_ids)}));
  EXPECT_TRUE(has_note(f_odd, "turn 3's decoded text tokenizes to other ids"));
  EXPECT_FALSE(has_note(f_odd, "turn 2's"));
  // No tokenizer: the ids cannot become text.
  const RunFill no_tok = fill_from_run(r, "x.db", base, nullptr, turns);
  EXPECT_TRUE(no_tok.form.turns.empty());
  EXPECT_TRUE(has_note(no_tok, "2 later turns (stored as token ids) could not be decoded")) << no_tok.notes.size();
  // A single-turn run: no later turns, whatever the form had.
  EXPECT_TRUE(fill_from_run(r, "x.db", base, tok.get()).form.turns.empty());
  EXPECT_TRUE(fill_from_run(r, "x.db", base, tok.get(), {turns[0]}).form.turns.empty());
}

TEST(AbMismatch, NamesWhatDiffersWithBothSides) {
  sessions::RunRecord a = record({1, 2, 3, 4});
  sessions::RunRecord b = a;
  b.row.id = 7;
  EXPECT_FALSE(ab_mismatch(a, b).any());
  EXPECT_TRUE(ab_mismatch(a, b).line.empty());
  b.info.prompt.tokens = {1, 2, 3, 4, 5};
  AbMismatch m = ab_mismatch(a, b);
  EXPECT_TRUE(m.prompt);
  EXPECT_EQ(m.what, (std::vector<std::string>{"prompt"}));
  EXPECT_EQ(m.line,
            "B #7 differs from A #5 in prompt (A 4 tokens, B 5): kept sets and A \xe2\x88\x92 B views are "
            "not defined");
  b.info.prompt.tokens = {1, 2, 9, 4};
  EXPECT_NE(ab_mismatch(a, b).line.find("both 4 tokens, first different id at position 2"), std::string::npos);
  // Same prompt, another checkpoint of the same shape: the model, not the prompt.
  b.info.prompt.tokens = a.info.prompt.tokens;
  b.info.model.path = "/models/pycode-16m-ft";
  b.info.model.config_hash = "def456";
  m = ab_mismatch(a, b);
  EXPECT_FALSE(m.prompt);
  EXPECT_EQ(m.what, (std::vector<std::string>{"model path", "model config"}));
  EXPECT_NE(m.line.find("model path (A /models/pycode-16m, B /models/pycode-16m-ft)"), std::string::npos) << m.line;
  EXPECT_NE(m.line.find("model config (hash A abc123, B def456)"), std::string::npos) << m.line;
  EXPECT_NE(m.line.find("its metrics are of another model"), std::string::npos) << m.line;
  // Another shape names it.
  b.info.model.n_layer = 6;
  EXPECT_NE(ab_mismatch(a, b).line.find("model config (A 4 layers x 2 KV heads x 32, B 6 layers"), std::string::npos);
}

class OpenInRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("open_in_run");
    db_ = (dir_ / "s.db").string();
    SyntheticSpec spec;
    spec.n_layer = 2;
    spec.n_tok = 120;
    spec.n_steps = 4;
    runs_ = testing::write_test_session(db_, spec);
    PolicyRegistry registry;
    register_builtin_policies(registry);
    catalog_ = std::make_unique<PolicyCatalog>(registry.catalog());
    im_ = std::make_unique<HeadlessImGui>(1280.0f, 720.0f);
    s_.headless = true;
    GuiOptions o;
    o.open = {db_};
    o.runs = {runs_.snapkv, runs_.streaming};
    ASSERT_TRUE(apply_options(s_, o)) << s_.status;
  }
  void TearDown() override { testing::remove_tree(dir_); }

  void draw(View v, int frames = 3) {
    Ui ui{im_->fonts(), textures_, catalog_.get(), nullptr};
    s_.view = v;
    s_.select_view = true;
    for (int f = 0; f < frames; ++f) im_->frame([&] { draw_app(s_, ui); });
  }

  std::filesystem::path dir_;
  std::string db_;
  SyntheticRuns runs_;
  std::unique_ptr<PolicyCatalog> catalog_;
  NullTextureStore textures_;
  std::unique_ptr<HeadlessImGui> im_;
  AppState s_;
};

TEST_F(OpenInRun, FillsTheRunViewAndItsPipelineEditorFromARun) {
  ASSERT_TRUE(open_in_run(s_, db_, runs_.streaming, catalog_.get())) << s_.status;
  EXPECT_EQ(s_.view, View::kRun);
  const RunState& st = s_.run;
  EXPECT_EQ(st.form.pipeline_spec, "streamingllm:sink=4+uniform");
  ASSERT_EQ(st.pipeline.stages.size(), 2u);
  EXPECT_EQ(st.pipeline.stages[0].policy, "streamingllm");
  EXPECT_EQ(st.spec_text, to_spec(st.pipeline, *catalog_));
  EXPECT_TRUE(st.spec_error.empty()) << st.spec_error;
  EXPECT_EQ(st.form.budget_unit, "fraction");
  EXPECT_EQ(st.form.budget_value, 0.25);
  EXPECT_EQ(st.form.db_path, db_);
  EXPECT_EQ(st.form.prompt, s_.a->record.info.prompt.text);
  EXPECT_EQ(st.filled_from, "#" + std::to_string(runs_.streaming) + " of s.db");
  EXPECT_FALSE(st.fill_notes.empty());
  draw(View::kRun);  // the view draws the filled form (and its bar) without a worker
  // A run whose SPEC the catalogue cannot read: kept as text with the error; Run stays disabled.
  {
    auto store = sessions::SessionStore::open(db_);
    sessions::RunInfo info = store.load_run(runs_.snapkv).info;
    info.pipeline.spec = "nosuchpolicy:x=1";
    const auto id = store.begin_run(info);
    store.finish_run(id, {{1}, "x"});
  }
  refresh_databases(s_);
  const auto newest = newest_run(s_, 0);
  ASSERT_TRUE(open_in_run(s_, db_, newest, catalog_.get()));
  EXPECT_EQ(s_.run.spec_text, "nosuchpolicy:x=1");
  EXPECT_NE(s_.run.spec_error.find("run #" + std::to_string(newest) + "'s pipeline"), std::string::npos)
      << s_.run.spec_error;
  EXPECT_TRUE(s_.run.pipeline.stages.empty());
  EXPECT_FALSE(open_in_run(s_, db_, 999, catalog_.get()));
}

// A multi-turn run that is not open: its turns are read from the database (sessions::load_turns) and
// fill the form as texts; the Run view draws them (each counted with the model's tokenizer); with
// the chat box on, Run is refused with kvscope-cli's reason; a run whose model has no tokenizer
// says its turns could not be decoded.
TEST_F(OpenInRun, AMultiTurnRunFillsTheLaterTurnsAndTheViewDrawsThem) {
  if (!std::filesystem::exists(testing::pycode_dir() / "tokenizer.json")) GTEST_SKIP() << "pycode-16m not present";
  const auto tok = load_tokenizer(testing::pycode_dir());
  const std::vector<std::string> texts = {"\n    parser.add_argument(\"--verbose\"", "\n\ndef main():\n"};
  std::int64_t id = -1, no_tokenizer = -1;
  {
    auto store = sessions::SessionStore::open(db_);
    sessions::RunInfo info = store.load_run(runs_.snapkv).info;
    std::vector<sessions::Turn> turns = {{info.prompt.tokens, {7, 8, 9}}};
    for (const auto& t : texts) turns.push_back({tok->encode(t), {10, 11, 12, 13}});
    for (std::int64_t* run : {&id, &no_tokenizer}) {
      if (run == &no_tokenizer) info.model.path = (dir_ / "no-such-model").string();
      *run = store.begin_run(info);
      for (const auto& b : sessions::turn_blobs(turns)) store.add_blob(*run, b);
      store.finish_run(*run, {{7, 8, 9}, "x"});
    }
  }
  refresh_databases(s_);
  ASSERT_NE(s_.a->ref.run, id);  // not open: the turns come from the database
  ASSERT_TRUE(open_in_run(s_, db_, id, catalog_.get())) << s_.status;
  RunState& st = s_.run;
  EXPECT_EQ(st.form.turns, texts);
  EXPECT_EQ(st.form.max_new_tokens, 4);
  st.pipeline = from_spec("", *catalog_);  // the full cache: no budget check in the way
  draw(View::kRun);
  ASSERT_EQ(st.turns_tokens.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_EQ(st.turns_tokens[i], static_cast<std::int64_t>(tok->encode(texts[i]).size())) << "turn " << i + 2;
  EXPECT_TRUE(st.run_problem.empty()) << st.run_problem;
  // An empty turn box, then the chat box on: Run refused, with the reason.
  st.form.turns.push_back("");
  draw(View::kRun);
  EXPECT_EQ(st.run_problem, "turn 4 is empty: type it or remove it");
  st.form.turns.pop_back();
  st.form.chat = true;
  draw(View::kRun);
  EXPECT_NE(st.run_problem.find("later turns are not rendered with the chat template"), std::string::npos)
      << st.run_problem;
  st.form.turns.clear();
  draw(View::kRun);
  EXPECT_EQ(st.run_problem.find("later turns"), std::string::npos) << st.run_problem;

  ASSERT_TRUE(open_in_run(s_, db_, no_tokenizer, catalog_.get())) << s_.status;
  EXPECT_TRUE(st.form.turns.empty());
  EXPECT_TRUE(std::any_of(st.fill_notes.begin(), st.fill_notes.end(), [](const std::string& n) {
    return n.find("2 later turns (stored as token ids) could not be decoded") != n.npos;
  }));
  draw(View::kRun);
}

// A new run becomes A (as when a re-run finishes) on another prompt while B stays: the status line,
// the context bar and Compare say so.
TEST_F(OpenInRun, ANewAOnAnotherPromptWarnsAboutTheBThatStayed) {
  ASSERT_EQ(s_.others.size(), 1u);
  EXPECT_FALSE(ab_mismatch(s_.a->record, s_.b()->record).any());
  std::int64_t other_prompt = -1;
  {
    auto store = sessions::SessionStore::open(db_);
    sessions::RunInfo info = store.load_run(runs_.snapkv).info;
    info.prompt.tokens.resize(info.prompt.tokens.size() / 2);
    info.prompt.text = "a shorter prompt";
    other_prompt = store.begin_run(info);
    store.finish_run(other_prompt, {{1}, "x"});
  }
  refresh_databases(s_);
  ASSERT_TRUE(open_run(s_, 0, other_prompt, false));
  ASSERT_EQ(s_.others.size(), 1u);  // B stays ...
  EXPECT_EQ(s_.others[0]->ref.run, runs_.streaming);
  const AbMismatch m = ab_mismatch(s_.a->record, s_.b()->record);  // ... and is no longer comparable
  EXPECT_TRUE(m.prompt);
  EXPECT_NE(s_.status.find(m.line), std::string::npos) << s_.status;
  EXPECT_NE(m.line.find("prompt (A 60 tokens, B 120)"), std::string::npos) << m.line;
  draw(View::kCompare);
  draw(View::kHeads);
}

}  // namespace
}  // namespace kvscope::gui
