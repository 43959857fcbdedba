// kvscope-cli timeline and run --pin through the binary on pycode-16m: the JSON contract of README
// "CLI" (n_positions, n_steps, evicted_at, selected, exact), checked against the ring buffer's
// formula, the selection policy's budget and the stored record, and the bad paths (no timeline, no
// head, a pin outside the model).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "kvscope/sessions/timeline_blobs.h"

#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace kvscope::test {
namespace {

class CliTimeline : public CliTest {
 protected:
  std::string prompt() const { return quote(pycode_dir() / "golden/prompts/textwrap_head.py"); }
  std::string run_args() const {
    return "run --model " + quote(pycode_dir()) + " --prompt-file " + prompt() + " --db " + quote(db_);
  }
  nlohmann::json timeline(int run, int layer, int head) {
    const auto r = run_cli("timeline " + quote(db_) + " " + std::to_string(run) + " --layer " + std::to_string(layer) +
                           " --head " + std::to_string(head) + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return nlohmann::json::parse(r.out);
  }
};

TEST_F(CliTimeline, StreamingHeadEvictionStepsFollowTheRing) {
  const auto pattern = dir_ / "pattern.json";
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < 8; ++l)
    layers.push_back({{"heads", {{{"streaming", true}, {"sink", 4}, {"window", 60}}, {{"streaming", false}}}}});
  std::ofstream(pattern) << nlohmann::json{{"format", "kvscope.head_pattern.v1"}, {"layers", layers}}.dump();
  const auto r = run_cli(run_args() + " --pipeline heads:pattern=" + quote(pattern) + " --max-new-tokens 30", true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = timeline(1, 5, 0);
  const int64_t n_steps = j["n_steps"], n_pos = j["n_positions"];
  ASSERT_GT(n_steps, 0);
  const int64_t n = n_pos - n_steps;  // prompt tokens: each decode step adds one position
  const auto evicted = j["evicted_at"].get<std::vector<int64_t>>();
  ASSERT_EQ(static_cast<int64_t>(evicted.size()), n_pos);
  for (int64_t p = 0; p < n_pos; ++p) {
    int64_t want = -1;
    if (p >= 4) {
      const int64_t s = p + 60 - n + 1;
      want = s <= 0 ? 0 : (s <= n_steps ? s : -1);
    }
    ASSERT_EQ(evicted[p], want) << "position " << p;
  }
  EXPECT_FALSE(j.contains("selected")) << "no decode-time selection policy";
  for (int64_t e : timeline(1, 5, 1)["evicted_at"].get<std::vector<int64_t>>()) ASSERT_EQ(e, -1) << "a dense head";
}

TEST_F(CliTimeline, PinnedHeadSelectionsPerStep) {
  const auto r = run_cli(run_args() + " --pipeline quest:page=16,k=64 --budget 128 --budget-unit fetched" +
                             " --max-new-tokens 6 --pin 1:1,3:0",
                         true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = timeline(1, 1, 1);
  const int64_t n_steps = j["n_steps"];
  ASSERT_EQ(n_steps, 5);
  ASSERT_TRUE(j.contains("selected"));
  ASSERT_EQ(j["selected"].size(), 5u);
  for (int64_t s = 1; s <= n_steps; ++s) {
    const auto sel = j["selected"][std::to_string(s)].get<std::vector<int64_t>>();
    EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
    EXPECT_LE(sel.size(), 64u) << "ceil(64 / 16) pages of 16";
    EXPECT_GT(sel.size(), 48u);
    EXPECT_EQ(j["granularity"][std::to_string(s)], "token");
    for (int64_t p : sel) EXPECT_LT(p, j["n_positions"].get<int64_t>());
  }
  // The text overview lists every head.
  const auto o = run_cli("timeline " + quote(db_) + " 1");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("steps_selected"), std::string::npos) << o.out;
}

TEST_F(CliTimeline, PinnedHeadAtCaptureFullPrintsItsExactTopK) {
  const auto r = run_cli(run_args() + " --pipeline quest:page=16,k=64 --budget 128 --budget-unit fetched" +
                             " --max-new-tokens 6 --capture full --pin 1:1",
                         true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = timeline(1, 1, 1);
  ASSERT_TRUE(j.contains("exact")) << "capture full records the exact top-k of the pinned head";
  for (const char* key : {"n_positions", "n_steps", "evicted_at", "selected", "granularity", "recall"})
    EXPECT_TRUE(j.contains(key)) << key;
  const auto store = kvscope::sessions::SessionStore::open(db_, kvscope::sessions::OpenMode::kReadOnly);
  const auto t = kvscope::sessions::load_timeline(store, 1);
  ASSERT_TRUE(t.has_value());
  const int64_t n_steps = j["n_steps"];
  ASSERT_EQ(j["exact"].size(), static_cast<size_t>(n_steps));
  for (int64_t s = 1; s <= n_steps; ++s) {
    const std::string step = std::to_string(s);
    const auto ex = j["exact"][step].get<std::vector<int64_t>>();
    EXPECT_EQ(ex, *t->exact_positions(1, 1, s)) << "step " << s;
    EXPECT_TRUE(std::is_sorted(ex.begin(), ex.end()));
    // k = entries selected (Quest: one selection for the group), recall = the share of it selected.
    const auto sel = j["selected"][step].get<std::vector<int64_t>>();
    ASSERT_EQ(ex.size(), sel.size()) << "step " << s;
    std::vector<int64_t> both;
    std::set_intersection(sel.begin(), sel.end(), ex.begin(), ex.end(), std::back_inserter(both));
    EXPECT_NEAR(j["recall"][step].get<double>(), double(both.size()) / double(ex.size()), 1e-6) << "step " << s;
  }
  // A small run records every head per token, and so every head's exact top-k.
  const nlohmann::json other = timeline(1, 2, 0);
  ASSERT_EQ(other["exact"].size(), static_cast<size_t>(n_steps));
  EXPECT_EQ(other["exact"]["3"].get<std::vector<int64_t>>(), *t->exact_positions(2, 0, 3));
  // The text summary names the mean recall and how much of the exact top-k was selected.
  const auto text = run_cli("timeline " + quote(db_) + " 1 --layer 1 --head 1");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("mean recall of the exact top-k: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("exact top-k recorded at " + std::to_string(n_steps) + " of " + std::to_string(n_steps)),
            std::string::npos)
      << text.out;
  // At capture summary: no recall, no exact top-k, so no "exact" key.
  ASSERT_EQ(run_cli(run_args() + " --pipeline quest:page=16,k=64 --budget 128 --budget-unit fetched" +
                    " --max-new-tokens 4 --pin 1:1")
                .exit_code,
            0);
  const nlohmann::json summary = timeline(2, 1, 1);
  EXPECT_FALSE(summary.contains("exact"));
  EXPECT_FALSE(summary.contains("recall"));
  EXPECT_TRUE(summary.contains("selected"));
  const auto summary_text = run_cli("timeline " + quote(db_) + " 2 --layer 2 --head 0");
  EXPECT_NE(summary_text.out.find("no exact top-k recorded for this head (record with --capture full and --pin 2:0)"),
            std::string::npos)
      << summary_text.out;
}

TEST_F(CliTimeline, BadRequestsExitWithTwoAndOneLine) {
  auto r = run_cli(run_args() + " --pipeline quest --budget 64 --budget-unit fetched --max-new-tokens 3 --capture off",
                   true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli_stderr("timeline " + quote(db_) + " 1 --layer 0 --head 0 --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("has no timeline"), std::string::npos) << r.out;
  ASSERT_EQ(run_cli(run_args() + " --pipeline quest --budget 64 --budget-unit fetched --max-new-tokens 3").exit_code,
            0);
  r = run_cli_stderr("timeline " + quote(db_) + " 2 --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--layer L --head H"), std::string::npos) << r.out;
  r = run_cli_stderr("timeline " + quote(db_) + " 2 --layer 8 --head 0 --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("no head 8:0"), std::string::npos) << r.out;
  r = run_cli_stderr(run_args() + " --pipeline quest --budget 64 --budget-unit fetched --pin 8:0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--pin 8:0"), std::string::npos) << r.out;
  r = run_cli_stderr(run_args() + " --pipeline quest --budget 64 --budget-unit fetched --pin 1-2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("is not L:H"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvscope::test
