// kvscope-cli learn-heads through the real binary: a pattern learned on stories260K runs as a
// `heads` pipeline, and bad input exits 2 with one line naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../cli/cli_support.h"

namespace kvscope::test {
namespace {
namespace fs = std::filesystem;

const fs::path kSource = KVSCOPE_SOURCE_DIR;

std::string learn_args(const std::string& method, const std::string& budget, const fs::path& out,
                       const std::string& data = (kSource / "tests/data/learn-heads/*.txt").string()) {
  return "learn-heads --model " + quote(kSource / "assets/models/stories260K") + " --data " + quote(data) +
         " --method " + method + " --budget " + budget +
         " --steps 4 --seq-len 128 --batch 2 --sink 4 --window 16"
         " --block 8 --candidates 4 --init-steps 2 --log-every 1 --out " +
         quote(out);
}

TEST(LearnHeadsCli, WritesAPatternThatTheHeadsPipelineRuns) {
  for (const std::string method : {"duo", "hs-sft"}) {
    const fs::path out =
        fs::temp_directory_path() / ("kvscope_cli_learn_" + std::to_string(::getpid()) + "_" + method + ".json");
    const CliResult r = run_cli(learn_args(method, "0.5", out), /*merge=*/true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("step     4"), std::string::npos) << "progress is printed: " << r.out;
    EXPECT_NE(r.out.find("wrote " + out.string()), std::string::npos) << r.out;
    const auto j = nlohmann::json::parse(std::ifstream(out));
    EXPECT_EQ(j["format"], "kvscope.head_pattern.v1");
    EXPECT_EQ(j["method"], method);
    EXPECT_LE(j["budget_achieved"].get<double>(), 0.5);
    EXPECT_TRUE(fs::exists(out.parent_path() / (out.stem().string() + ".loss.csv")));
    const CliResult run =
        run_cli("run --model " + quote(kSource / "assets/models/stories260K") +
                " --prompt 'Once upon a time there was a little dog named Max. He liked to run in the park "
                "with his friends every day, and he was very happy.' --max-new-tokens 4 --pipeline " +
                quote("heads:pattern=" + out.string()) + " --json");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    EXPECT_EQ(nlohmann::json::parse(run.out)["budgets"].size(), 5u);
    fs::remove(out);
    fs::remove(out.parent_path() / (out.stem().string() + ".loss.csv"));
  }
}

// With every size at its default, `learn-heads` on stories260K (512-token context) refused budgets
// such as 0.25 ("below what the dense heads and the 128 sink tokens ... keep"); the defaults now
// scale with the reference length. Explicit sizes that cannot meet the budget still fail.
TEST(LearnHeadsCli, DefaultSizesMeetTheBudgetOnStories) {
  const fs::path out =
      fs::temp_directory_path() / ("kvscope_cli_learn_defaults_" + std::to_string(::getpid()) + ".json");
  const std::string base = "learn-heads --model " + quote(kSource / "assets/models/stories260K") + " --data " +
                           quote(kSource / "tests/data/learn-heads/*.txt") + " --batch 1 --out " + quote(out);
  struct Case {
    std::string method, budget, steps;
    int64_t sink, window, block;
  };
  for (const Case& c : {Case{"hs-sft", "0.25", "2", 8, -1, 8}, Case{"duo", "0.1", "1", 8, 16, -1}}) {
    const CliResult r = run_cli(base + " --method " + c.method + " --budget " + c.budget + " --steps " + c.steps, true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(std::ifstream(out));
    EXPECT_EQ(j["reference_length"], 512) << "--seq-len 1024 capped at the context";
    EXPECT_LE(j["budget_achieved"].get<double>(), std::stod(c.budget));
    const auto& o = j["learned"]["options"];
    EXPECT_EQ(o["seq_len"], 512);
    EXPECT_EQ(o["sink"], c.sink) << "the sizes the run used are recorded";
    if (c.window > 0) EXPECT_EQ(o["window"], c.window);
    if (c.block > 0) EXPECT_EQ(o["block"], c.block);
    fs::remove(out);
    fs::remove(out.parent_path() / (out.stem().string() + ".loss.csv"));
  }
  CliResult r = run_cli(base + " --method hs-sft --budget 0.25 --steps 2 --sink 128", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.out.find("--budget 0.25 is below what the dense heads and the 128 sink tokens of the streaming heads keep "
                 "on a 512-token reference context"),
      std::string::npos)
      << r.out;
  r = run_cli(base + " --method duo --budget 0.1 --steps 1 --window 256", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--budget 0.1 is below what streaming heads alone keep: sink 8 + window 256"), std::string::npos)
      << r.out;
  r = run_cli(base + " --method duo --budget 0.1 --steps 1 --sink=-1", true);
  EXPECT_EQ(r.exit_code, 2) << "a negative size given is an error, not the default";
  EXPECT_NE(r.out.find("--sink must be >= 0, got -1"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(LearnHeadsCli, BadInputExitsTwoNamingIt) {
  const fs::path out = fs::temp_directory_path() / ("kvscope_cli_learn_bad_" + std::to_string(::getpid()) + ".json");
  const std::string missing = (kSource / "tests/data/none/*.txt").string();
  CliResult r = run_cli(learn_args("duo", "0.5", out, missing), true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--data '" + missing + "': no files match"), std::string::npos) << r.out;
  r = run_cli(learn_args("duo", "1.5", out), true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--budget 1.5"), std::string::npos) << r.out;
  r = run_cli(learn_args("snapkv", "0.5", out), true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("expected hs-sft or duo"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace kvscope::test
