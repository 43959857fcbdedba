// `kvscope-cli run --reference full --db` records per step the compressed run's token, the full
// cache's top-1 and their probabilities (issue 30 item 10): the --json output and the session's step
// metrics hold the same values, aligned with the output tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "../core/test_support.h"
#include "cli_support.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope {
namespace {
using test::quote;
using test::run_cli;

class CliFidelityTokens : public test::CliTest {};

TEST_F(CliFidelityTokens, StepMetricsRoundTripTheJsonAndFollowTheOutputTokens) {
  const auto r = run_cli("run --model " + quote(test::pycode_dir()) + " --prompt-file " +
                         quote(test::pycode_dir() / "golden/prompts/textwrap_head.py") +
                         " --bos always --greedy --pipeline streamingllm:sink=4 --budget 32 --budget-unit stored"
                         " --max-new-tokens 16 --reference full --json --db " +
                         quote(db_));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& fid = j["fidelity"];
  const auto out = j["output_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(out.size(), 16u);
  EXPECT_EQ(fid["token_id"].get<std::vector<int32_t>>(), out);

  auto store = sessions::SessionStore::open(db_.string(), sessions::OpenMode::kReadOnly);
  const auto rec = store.load_run(j["session_id"].get<int64_t>());
  const std::vector<std::string> names = {"kl",      "top1",       "token_id",    "full_top_id",
                                          "p_token", "p_full_top", "p_full_token"};
  std::map<std::string, std::vector<double>> steps;
  for (const auto& m : rec.step_metrics) {
    if (std::find(names.begin(), names.end(), m.name) == names.end()) continue;  // bytes_read: from step 1
    auto& v = steps[m.name];
    ASSERT_EQ(m.step, static_cast<int64_t>(v.size())) << m.name << ": steps 0, 1, ... in order";
    v.push_back(m.value);
  }
  int disagree = 0;
  for (const std::string& name : names) {
    ASSERT_TRUE(steps.count(name)) << name;
    const auto want = fid[name].get<std::vector<double>>();
    ASSERT_EQ(steps[name].size(), out.size()) << name;
    EXPECT_EQ(steps[name], want) << name << ": the database holds exactly what --json printed";
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(steps["token_id"][i], double(out[i])) << i;
    const bool agree = steps["full_top_id"][i] == steps["token_id"][i];
    EXPECT_EQ(steps["top1"][i], agree ? 1.0 : 0.0) << "greedy: top-1 agreement is full top == token, step " << i;
    if (agree) EXPECT_DOUBLE_EQ(steps["p_full_top"][i], steps["p_full_token"][i]) << i;
    EXPECT_LE(steps["p_full_token"][i], steps["p_full_top"][i]) << i;
    EXPECT_GT(steps["p_token"][i], 0.0) << i;
    EXPECT_LE(steps["p_token"][i], 1.0) << i;
    disagree += !agree;
  }
  EXPECT_GT(disagree, 0) << "StreamingLLM at 32 entries departs from the full cache somewhere";
}

}  // namespace
}  // namespace kvscope
