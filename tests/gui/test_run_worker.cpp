// The Run window's worker on the embedded pycode-16m model (CPU): a run streams tokens and is
// recorded as a session the views can open (kept sets, head summary, full capture, fidelity);
// cancelling between decode steps records the run as failed; the worker thread reports through
// its queue; later turns (multi-turn, as kvscope-cli run --turn) continue on the same cache exactly
// as kvscope::generate does, and Open in Run gives them back.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "app_state.h"
#include "gui_test_support.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/sessions/turn_blobs.h"
#include "run_from_record.h"
#include "run_worker.h"

namespace kvscope::gui {
namespace {

using testing::make_temp_dir;
using testing::pycode_dir;
using testing::remove_tree;

RunRequest small_request(const std::filesystem::path& db) {
  RunRequest r;
  r.model_path = pycode_dir().string();
  r.prompt = testing::read_text(pycode_dir() / "golden/prompts/textwrap_head.py");  // generates past 32 tokens (golden)
  r.bos = "always";
  r.pipeline_spec = "snapkv:window=8,kernel=3,pool=avg,gqa=mean+adakv:alpha=0.2";
  r.budget_unit = "fraction";
  r.budget_value = 0.5;
  r.max_new_tokens = 6;
  r.reference_full = true;
  r.capture = "full";
  r.capture_window = 8;
  r.db_path = db.string();
  r.name = "worker test";
  return r;
}

TEST(RunWorker, RecordsASessionTheViewsCanOpen) {
  if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
  const auto dir = make_temp_dir("gui_worker");
  const auto db = dir / "runs.db";
  PolicyRegistry registry;
  register_builtin_policies(registry);
  std::atomic<bool> cancel{false};
  std::vector<RunUpdate> seen;
  const RunUpdate done = execute_run(
      registry, small_request(db), [&](const RunUpdate& u) { seen.push_back(u); }, cancel);
  ASSERT_EQ(done.kind, RunUpdate::Kind::kFinished) << done.text;
  ASSERT_GE(done.run_id, 1);
  std::int64_t tokens = 0;
  for (const auto& u : seen) tokens += u.kind == RunUpdate::Kind::kToken;
  EXPECT_EQ(tokens, done.tokens);
  EXPECT_GT(tokens, 0);
  // Live snapshots: one after the prefill (no decode step yet, the prefill's evictions recorded),
  // one at the end with every decode step; the timeline grows, never shrinks.
  std::vector<std::shared_ptr<const LiveRun>> live;
  for (const auto& u : seen)
    if (u.kind == RunUpdate::Kind::kProgress) live.push_back(u.live);
  ASSERT_GE(live.size(), 2u);
  ASSERT_TRUE(live.front()->timeline);
  EXPECT_EQ(live.front()->decode_steps, 0);
  EXPECT_EQ(live.front()->timeline->n_steps, 0);
  EXPECT_EQ(live.front()->timeline->check(), "");
  EXPECT_GT(live.front()->cache_bytes_live, 0);
  EXPECT_EQ(live.back()->decode_steps, done.tokens - 1);
  EXPECT_EQ(live.back()->timeline->n_steps, done.tokens - 1);
  EXPECT_EQ(live.back()->timeline->check(), "");
  EXPECT_EQ(live.back()->kl.size(), static_cast<size_t>(done.tokens));
  EXPECT_EQ(live.front()->timeline->evicted_at.size() / live.front()->timeline->n_positions,
            live.back()->timeline->evicted_at.size() / live.back()->timeline->n_positions);

  AppState s;
  s.headless = true;
  GuiOptions o;
  o.open = {db.string()};
  ASSERT_TRUE(apply_options(s, o)) << s.status;
  ASSERT_TRUE(s.a);
  const RunData& a = *s.a;
  EXPECT_EQ(a.ref.run, done.run_id);
  EXPECT_EQ(a.record.row.status, sessions::RunStatus::kComplete);
  EXPECT_TRUE(a.has_kept);
  EXPECT_TRUE(a.has_summary);
  EXPECT_TRUE(a.has_attention);
  EXPECT_TRUE(a.has_cos);
  EXPECT_TRUE(a.has_channels);
  EXPECT_TRUE(a.tokens_from_tokenizer);
  EXPECT_EQ(a.steps.count("kl"), 1u);
  EXPECT_FALSE(std::isnan(a.summary_metric("mean_kl")));
  EXPECT_NE(a.record.row.pipeline_spec.find("snapkv"), std::string::npos);
  remove_tree(dir);
}

TEST(RunWorker, CancelStopsBetweenDecodeStepsAndRecordsAFailedRun) {
  if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
  const auto dir = make_temp_dir("gui_cancel");
  const auto db = dir / "runs.db";
  PolicyRegistry registry;
  register_builtin_policies(registry);
  RunWorker worker(registry);
  RunRequest req = small_request(db);
  req.max_new_tokens = 3000;  // far more than the test waits for, inside pycode-16m's 4096-token context
  req.capture = "summary";
  ASSERT_TRUE(worker.start(req));
  EXPECT_FALSE(worker.start(req)) << "one run at a time";
  std::vector<RunUpdate> all;
  bool cancelled_sent = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& u : worker.poll()) all.push_back(u);
    const bool any_token =
        std::any_of(all.begin(), all.end(), [](const auto& u) { return u.kind == RunUpdate::Kind::kToken; });
    if (any_token && !cancelled_sent) {
      worker.cancel();
      cancelled_sent = true;
    }
    if (!all.empty() && (all.back().kind == RunUpdate::Kind::kCancelled ||
                         all.back().kind == RunUpdate::Kind::kFailed || all.back().kind == RunUpdate::Kind::kFinished))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(all.empty());
  ASSERT_EQ(all.back().kind, RunUpdate::Kind::kCancelled) << all.back().text;
  EXPECT_FALSE(worker.busy());
  const auto store = sessions::SessionStore::open(db.string(), sessions::OpenMode::kReadOnly);
  const auto rows = store.list_runs();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, sessions::RunStatus::kFailed);
  EXPECT_NE(rows[0].error.find("cancel"), std::string::npos);
  remove_tree(dir);
}

// "chat template" on: the prompt rendered with the model's template (system message first, the
// generation prompt last) is what the run tokenizes, with no BOS of its own, as kvscope-cli --chat;
// the session records the rendered text, the template's file and the messages. A model without a
// template fails in one line naming its tokenizer_config.json.
TEST(RunWorker, AChatPromptIsRenderedWithTheTemplateAndRecorded) {
  if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
  const auto dir = make_temp_dir("gui_worker_chat");
  const auto model = testing::make_chat_model(dir / "model");
  PolicyRegistry registry;
  register_builtin_policies(registry);
  std::atomic<bool> cancel{false};
  RunRequest r = small_request(dir / "runs.db");
  r.model_path = model.string();
  r.prompt = "def fib(n):";
  r.chat = true;
  r.system = "Be brief.";
  r.bos = "always";  // ignored: the template writes the BOS
  r.reference_full = false;
  r.capture = "summary";
  const RunUpdate done = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  ASSERT_EQ(done.kind, RunUpdate::Kind::kFinished) << done.text;
  const auto store = sessions::SessionStore::open((dir / "runs.db").string(), sessions::OpenMode::kReadOnly);
  const sessions::RunRecord rec = store.load_run(done.run_id);
  const std::string rendered =
      "<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\ndef fib(n):<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(rec.info.prompt.text, rendered);
  EXPECT_EQ(rec.info.prompt.tokens, load_tokenizer(model)->encode(rendered));
  EXPECT_EQ(rec.info.prompt.tokens.at(0), 0);  // <|endoftext|> once, from the template
  EXPECT_NE(rec.info.prompt.tokens.at(1), 0);
  EXPECT_EQ(rec.info.prompt.chat_template, (model / "chat_template.jinja").string());
  EXPECT_EQ(nlohmann::ordered_json::parse(rec.info.prompt.chat_messages),
            nlohmann::ordered_json::parse(
                R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def fib(n):"}])"));

  r.model_path = pycode_dir().string();
  const RunUpdate refused = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  EXPECT_EQ(refused.kind, RunUpdate::Kind::kFailed);
  EXPECT_NE(refused.text.find((pycode_dir() / "tokenizer_config.json").string() + ": has no chat template"),
            std::string::npos)
      << refused.text;
  remove_tree(dir);
}

// The Run view's later turns: the worker passes them as RunOptions::follow_up_turns, so the session
// holds 3 turns whose later inputs are the turns' tokens (no BOS) and whose outputs are exactly
// kvscope::generate's for the same request with follow_up_turns; the stream marks where each turn
// begins; Open in Run of the recorded run fills the form's turns with the original texts.
TEST(RunWorker, LaterTurnsContinueOnTheSameCacheAsGenerateDoes) {
  if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
  const auto dir = make_temp_dir("gui_worker_turns");
  const auto db = dir / "runs.db";
  PolicyRegistry registry;
  register_builtin_policies(registry);
  std::atomic<bool> cancel{false};
  RunRequest r = small_request(db);
  r.prompt = testing::read_text(pycode_dir() / "golden/prompts/argparse_head.py").substr(0, 700);
  r.reference_full = false;
  r.capture = "summary";
  r.max_new_tokens = 5;
  r.turns = {"\n    parser.add_argument(\"--verbose\"", "\n\ndef main():\n"};
  std::string stream;
  const RunUpdate done = execute_run(
      registry, r,
      [&](const RunUpdate& u) {
        if (u.kind == RunUpdate::Kind::kToken) stream += u.text;
      },
      cancel);
  ASSERT_EQ(done.kind, RunUpdate::Kind::kFinished) << done.text;

  // What kvscope::generate gives the same request (as kvscope-cli run --turn builds it).
  const Model model = load_model(pycode_dir(), LoadOptions{});
  const Engine engine(model);
  GenerateRequest g;
  g.prompt_ids = prompt_ids(model, r.prompt, BosMode::kAlways);
  for (const auto& t : r.turns) g.follow_up_turns.push_back(model.tokenizer->encode(t));
  g.max_new_tokens = r.max_new_tokens;
  g.stop_ids = model.stop_token_ids;
  const Pipeline p(registry, r.pipeline_spec);
  g.pipeline = &p;
  g.budget = {BudgetSpec::Unit::kFraction, 0.5};
  g.capture = CaptureLevel::kSummary;
  const GenerateResult expected = generate(engine, g);
  ASSERT_EQ(expected.turn_output_ids.size(), 3u);

  const auto store = sessions::SessionStore::open(db.string(), sessions::OpenMode::kReadOnly);
  const std::vector<sessions::Turn> turns = sessions::load_turns(store, done.run_id);
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[0].input_ids, g.prompt_ids);
  EXPECT_EQ(turns[1].input_ids, model.tokenizer->encode(r.turns[0]));
  EXPECT_EQ(turns[2].input_ids, model.tokenizer->encode(r.turns[1]));
  std::int64_t generated = 0;
  for (std::size_t t = 0; t < 3; ++t) {
    EXPECT_FALSE(turns[t].output_ids.empty()) << "turn " << t + 1;
    EXPECT_EQ(turns[t].output_ids, expected.turn_output_ids[t]) << "turn " << t + 1;
    generated += static_cast<std::int64_t>(turns[t].output_ids.size());
  }
  EXPECT_EQ(done.tokens, generated) << "every turn's tokens are streamed";
  EXPECT_EQ(store.load_run(done.run_id).row.summary.at("n_turns"), 3.0);
  // The stream: turn 2 and turn 3 each marked, with their text, after turn 1's tokens.
  const auto t2 = stream.find("[turn 2] " + r.turns[0]), t3 = stream.find("[turn 3] " + r.turns[1]);
  ASSERT_NE(t2, std::string::npos) << stream;
  ASSERT_NE(t3, std::string::npos) << stream;
  EXPECT_GT(t2, 0u);
  EXPECT_GT(t3, t2);

  // Open in Run: the form gets the turns back as their texts (the run is open as A: its RunData's turns).
  AppState s;
  s.headless = true;
  GuiOptions o;
  o.open = {db.string()};
  ASSERT_TRUE(apply_options(s, o)) << s.status;
  ASSERT_TRUE(s.a);
  ASSERT_EQ(s.a->ref.run, done.run_id);
  s.run.form.turns = {"left over"};
  ASSERT_TRUE(open_in_run(s, db.string(), done.run_id, nullptr)) << s.status;
  EXPECT_EQ(s.run.form.turns, r.turns);
  EXPECT_EQ(s.run.form.prompt, r.prompt);
  EXPECT_EQ(s.run.form.max_new_tokens, r.max_new_tokens);
  for (const auto& n : s.run.fill_notes) EXPECT_EQ(n.find("turn"), std::string::npos) << n;
  remove_tree(dir);
}

// Refused as kvscope-cli refuses them: later turns with a chat prompt (make_request), and a
// prompt with turns past the model's context, with the numbers; neither is recorded.
TEST(RunWorker, LaterTurnsAreRefusedWithAChatPromptAndPastTheContext) {
  if (!std::filesystem::exists(pycode_dir() / "model.safetensors")) GTEST_SKIP() << "embedded model missing";
  const auto dir = make_temp_dir("gui_worker_turns_refused");
  PolicyRegistry registry;
  register_builtin_policies(registry);
  std::atomic<bool> cancel{false};
  RunRequest r = small_request(dir / "runs.db");
  r.model_path = testing::make_chat_model(dir / "model").string();
  r.prompt = "def fib(n):";
  r.chat = true;
  r.turns = {"and in Rust?"};
  RunUpdate done = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  EXPECT_EQ(done.kind, RunUpdate::Kind::kFailed);
  EXPECT_NE(done.text.find("later turns (--turn) are not rendered with the chat template"), std::string::npos)
      << done.text;
  EXPECT_EQ(done.run_id, -1);

  r = small_request(dir / "runs.db");
  r.turns = {"\n\ndef main():\n", "\nif __name__ == \"__main__\":\n"};
  r.max_new_tokens = 1500;  // 3 x 1500 new tokens alone pass pycode-16m's 4096-token context
  done = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  EXPECT_EQ(done.kind, RunUpdate::Kind::kFailed);
  EXPECT_NE(done.text.find("the prompt and 2 later turns are"), std::string::npos) << done.text;
  EXPECT_NE(done.text.find("context of 4096 tokens"), std::string::npos) << done.text;
  EXPECT_EQ(done.run_id, -1);
  remove_tree(dir);
}

TEST(RunWorker, BadRequestsFailWithAMessage) {
  PolicyRegistry registry;
  register_builtin_policies(registry);
  std::atomic<bool> cancel{false};
  RunRequest r;
  r.db_path = "/tmp/never-created.db";
  r.model_path = "/nonexistent/model";
  r.prompt = "x";
  auto done = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  EXPECT_EQ(done.kind, RunUpdate::Kind::kFailed);
  EXPECT_NE(done.text.find("/nonexistent/model"), std::string::npos);
  r.pipeline_spec = "nosuchpolicy";
  done = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  EXPECT_EQ(done.kind, RunUpdate::Kind::kFailed);
  EXPECT_NE(done.text.find("nosuchpolicy"), std::string::npos);
  // A random-init model without a tokenizer cannot encode the prompt: refused before any load.
  r.pipeline_spec.clear();
  r.model_path.clear();
  r.random_init = "bench/configs/llama-3.1-8b.json";
  done = execute_run(
      registry, r, [](const RunUpdate&) {}, cancel);
  EXPECT_EQ(done.kind, RunUpdate::Kind::kFailed);
  EXPECT_NE(done.text.find("needs a tokenizer"), std::string::npos) << done.text;
}

}  // namespace
}  // namespace kvscope::gui
