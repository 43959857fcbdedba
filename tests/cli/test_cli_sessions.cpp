// The headless workbench through the real binary: runs recorded as sessions, sweeps (resume,
// shards, Slurm script, merge), inspect, compare, export, and a run killed mid-way.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "../core/test_support.h"
#include "cli_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using test::quote;
using test::run_cli;

class CliSessions : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvscope_cli_sessions_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    test::remove_tree(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "story.txt")
        << "Once upon a time, there was a little girl named Lily. She loved to play outside.";
    std::ofstream(dir_ / "grid.toml")
        << "models = [\"" << (test::stories_dir() / "stories260K.bin").string()
        << "\"]\nprompts = [\"story.txt\"]\n"
           "pipelines = [\"snapkv:window=8\", \"streamingllm:sink=4\", \"keydiff\", \"snapkv:window=8+adakv\"]\n"
           "max_new_tokens = 6\ncapture = \"full\"\n[budget]\nunit = \"ratio\"\nvalues = [0.25, 0.5, 0.75]\n";
    db_ = dir_ / "runs.db";
  }
  void TearDown() override { test::remove_tree(dir_); }
  int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }
  fs::path dir_, db_;
};

TEST_F(CliSessions, RunRecordsASessionAndPrintsItsId) {
  const auto r =
      run_cli("run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt") +
              " --pipeline snapkv:window=8 --compression-ratio 0.5 --max-new-tokens 4 --reference full --db " +
              quote(db_) + " --name first --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["session_id"], 1);
  const auto list = run_cli("inspect " + quote(db_));
  EXPECT_EQ(list.out.rfind("1  complete  first", 0), 0u) << list.out;
  EXPECT_NE(list.out.find("mean_kl="), std::string::npos);
}

TEST_F(CliSessions, SweepResumesAndCompareAndExportWork) {
  auto r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("12 runs recorded, 0 already done"), std::string::npos) << r.out;
  r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  EXPECT_NE(r.out.find("0 runs recorded, 12 already done"), std::string::npos) << r.out;
  EXPECT_EQ(count_lines(run_cli("inspect " + quote(db_)).out), 12);

  r = run_cli("compare " + quote(db_) + " 2 8");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("mean Jaccard"), std::string::npos);
  EXPECT_NE(r.out.find("mean_kl"), std::string::npos);

  for (const std::string fig :
       {"heads", "tokens", "mass", "topk-cdf", "keys", "channels", "fidelity", "budgets", "grid"})
    for (const std::string ext : {"png", "svg", "pdf", "csv"}) {
      const fs::path out = dir_ / (fig + "." + ext);
      r = run_cli("export " + quote(db_) + " 8 --figure " + fig + " --layer 1 --head 2 --out " + quote(out), true);
      ASSERT_EQ(r.exit_code, 0) << fig << "." << ext << ": " << r.out;
      const std::string bytes = test::read_text(out);
      ASSERT_GT(bytes.size(), ext == "csv" ? 60u : 200u) << out;
      if (ext == "png") EXPECT_EQ(bytes.substr(1, 3), "PNG");
      if (ext == "svg") EXPECT_NE(bytes.find("<svg"), std::string::npos);
      if (ext == "pdf") EXPECT_EQ(bytes.substr(0, 5), "%PDF-");
      if (ext == "csv") EXPECT_EQ(bytes.rfind("panel,kind,series", 0), 0u);
    }
  r = run_cli("export " + quote(db_) + " 8 --figure nope --out " + quote(dir_ / "x.png"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("unknown figure 'nope'"), std::string::npos) << r.out;
}

TEST_F(CliSessions, HeadPatternRunExportsItsPatternAndBudgets) {
  // stories260K: 5 layers x 4 KV heads; KV head 0 dense, the others 4 sinks + a 16-token window.
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < 5; ++l)
    layers.push_back({{"heads",
                       {{{"streaming", false}},
                        {{"streaming", true}, {"sink", 4}, {"window", 16}},
                        {{"streaming", true}, {"sink", 4}, {"window", 16}},
                        {{"streaming", true}, {"sink", 4}, {"window", 16}}}}});
  const fs::path pattern = dir_ / "pattern.json";
  std::ofstream(pattern) << nlohmann::json{
      {"format", "kvscope.head_pattern.v1"},
      {"method", "manual"},
      {"budget", 0.5},
      {"n_layer", 5},
      {"n_head_kv", 4},
      {"layers", layers}}.dump();
  // A head pattern keeps what the pattern says: it takes no budget, and one given anyway is refused
  // as unused (nothing recorded); a pipeline that evicts to a budget refuses to run without one.
  const std::string base = "run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt");
  auto r = run_cli(
      base + " --pipeline heads:pattern=" + quote(pattern) + " --budget 1 --budget-unit fraction --db " + quote(db_),
      true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("uses no budget"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unused"), std::string::npos) << r.out;
  r = run_cli(base + " --pipeline snapkv:window=8 --max-new-tokens 4", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("needs a budget: give --compression-ratio R or --budget N"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(db_)) << "a refused run records nothing";
  r = run_cli(base + " --pipeline heads:pattern=" + quote(pattern) + " --max-new-tokens 4 --db " + quote(db_), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt") +
                  " --pipeline snapkv:window=8 --compression-ratio 0.5 --max-new-tokens 4 --db " + quote(db_),
              true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const std::string ext : {"png", "csv"}) {
    const fs::path out = dir_ / ("head-pattern." + ext);
    r = run_cli("export " + quote(db_) + " 1 --figure head-pattern --out " + quote(out), true);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    ASSERT_GT(test::read_text(out).size(), 200u) << out;
  }
  // The map (dense heads in the mask) and the window bars; budgets adds them as panels 2 and 3.
  const std::string csv = test::read_text(dir_ / "head-pattern.csv");
  EXPECT_NE(csv.find("\n0,heatmap,mask,0,0,"), std::string::npos) << csv.substr(0, 400);
  EXPECT_NE(csv.find("\n1,bar,window,"), std::string::npos) << csv.substr(0, 400);
  r = run_cli("export " + quote(db_) + " 1 --figure budgets --out " + quote(dir_ / "budgets.csv"), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string budgets = test::read_text(dir_ / "budgets.csv");
  EXPECT_NE(budgets.find("\n2,heatmap,mask,0,0,"), std::string::npos);
  EXPECT_NE(budgets.find("\n3,bar,window,"), std::string::npos);
  // A run without a heads stage.
  r = run_cli("export " + quote(db_) + " 2 --figure head-pattern --out " + quote(dir_ / "x.png"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("run 2 has no head pattern: its pipeline 'snapkv:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("has no 'heads' stage"), std::string::npos) << r.out;
  // The pattern file gone: budgets still exports (a panel says so), head-pattern names the file.
  fs::rename(pattern, dir_ / "moved.json");
  r = run_cli("export " + quote(db_) + " 1 --figure budgets --out " + quote(dir_ / "budgets2.csv"), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(test::read_text(dir_ / "budgets2.csv").find("\n2,heatmap"), std::string::npos);
  r = run_cli("export " + quote(db_) + " 1 --figure head-pattern --out " + quote(dir_ / "y.png"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find(pattern.string() + ": no such file"), std::string::npos) << r.out;
}

TEST_F(CliSessions, ShardsMergeIntoTheWholeSweep) {
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " +
                      quote(dir_ / ("s" + std::to_string(i) + ".db")) + " --shard " + std::to_string(i) + "/2")
                  .exit_code,
              0);
  EXPECT_EQ(count_lines(run_cli("inspect " + quote(dir_ / "s0.db")).out), 6);
  auto r = run_cli("merge --out " + quote(db_) + " " + quote(dir_ / "s0.db") + " " + quote(dir_ / "s1.db"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count_lines(run_cli("inspect " + quote(db_)).out), 12);
  // Resuming the whole sweep on the merged database has nothing left to do.
  r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  EXPECT_NE(r.out.find("0 runs recorded, 12 already done"), std::string::npos) << r.out;
  r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_) + " --shard 0/4 --emit-slurm " +
              quote(dir_ / "job.sh"));
  ASSERT_EQ(r.exit_code, 0);
  const std::string job = test::read_text(dir_ / "job.sh");
  EXPECT_NE(job.find("#SBATCH --array=0-3"), std::string::npos) << job;
  EXPECT_NE(job.find("--shard ${SLURM_ARRAY_TASK_ID}/4"), std::string::npos) << job;
}

TEST_F(CliSessions, KilledRunLeavesTheDatabaseReadableAndTheRunIncomplete) {
  ASSERT_EQ(run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_) + " --shard 0/12").exit_code, 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd =
        std::string(KVSCOPE_CLI) + " run --model " + quote(test::pycode_dir()) +
        " --prompt 'def main():' --pipeline keydiff --compression-ratio 0.5 --max-new-tokens 4000 --db " + quote(db_) +
        " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the run row exists, then kill -9 mid-decode.
  for (int i = 0; i < 300 && count_lines(run_cli("inspect " + quote(db_)).out) < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto r = run_cli("inspect " + quote(db_), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("1  complete", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n2  incomplete"), std::string::npos) << r.out;
}

TEST_F(CliSessions, BadGridsAndDatabasesAreRefusedClearly) {
  std::ofstream(dir_ / "bad.toml") << "models = [\"x\"\n";
  auto r = run_cli("sweep " + quote(dir_ / "bad.toml") + " --db " + quote(db_), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find((dir_ / "bad.toml").string() + ": not valid TOML"), std::string::npos) << r.out;
  std::ofstream(dir_ / "nodb.db") << "this is not a database";
  r = run_cli("inspect " + quote(dir_ / "nodb.db"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find((dir_ / "nodb.db").string()), std::string::npos) << r.out;
  EXPECT_EQ(test::read_text(dir_ / "nodb.db"), "this is not a database");
}

}  // namespace
}  // namespace kvscope
