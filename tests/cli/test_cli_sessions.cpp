// The headless workbench through the real binary: runs recorded as sessions, sweeps (resume,
// shards, Slurm script, merge), inspect, compare, export, check, a run killed mid-way, and
// databases damaged on disk.
#include <gtest/gtest.h>

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <thread>
#include <vector>

#include "../core/test_support.h"
#include "cli_support.h"
#include "kvscope/sessions/session_store.h"
#include "kvscope/sessions/turn_blobs.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using test::quote;
using test::run_cli;

class CliSessions : public test::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    std::ofstream(dir_ / "grid.toml")
        << "models = [\"" << (test::stories_dir() / "stories260K.bin").string()
        << "\"]\nprompts = [\"story.txt\"]\n"
           "pipelines = [\"snapkv:window=4\", \"streamingllm:sink=4\", \"keydiff\", \"snapkv:window=4+adakv\"]\n"
           "max_new_tokens = 6\ncapture = \"full\"\n[budget]\nunit = \"ratio\"\nvalues = [0.25, 0.5, 0.75]\n";
  }
  int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }
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
  // The budget as the share kept (issue 30), the ratio it was given as a detail.
  EXPECT_NE(list.out.find("  kept "), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("/head (ratio 0.5)"), std::string::npos) << list.out;
}

TEST_F(CliSessions, RunWithTurnsRecordsEveryTurn) {
  // Two later turns after Ada-KV (head-wise lengths: every turn re-ranks each head's entries).
  const auto r = run_cli("run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt") +
                         " --turn 'Then the cat' --turn 'The end.' --pipeline snapkv:window=8+adakv"
                         " --compression-ratio 0.5 --max-new-tokens 4 --db " +
                         quote(db_) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto store = sessions::SessionStore::open(db_, sessions::OpenMode::kReadOnly);
  const std::vector<sessions::Turn> turns = sessions::load_turns(store, j["session_id"].get<int64_t>());
  ASSERT_EQ(turns.size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(turns[t].input_ids, j["turns"][t]["input_ids"].get<std::vector<int32_t>>()) << "turn " << t;
    EXPECT_EQ(turns[t].output_ids, j["turns"][t]["output_ids"].get<std::vector<int32_t>>()) << "turn " << t;
  }
  EXPECT_EQ(turns[0].input_ids, j["input_ids"].get<std::vector<int32_t>>());
  EXPECT_NE(run_cli("inspect " + quote(db_)).out.find("n_turns=3"), std::string::npos);

  // A grid's turns: the same turns on every run, recorded the same way, and part of the sweep key
  // (the grid without them is another sweep: its runs are not skipped).
  std::ofstream(dir_ / "turns.toml") << "models = [\"" << test::stories_dir().string()
                                     << "\"]\nprompts = [\"story.txt\"]\npipelines = [\"snapkv:window=8+adakv\"]\n"
                                        "turns = [\"Then the cat\", \"The end.\"]\nmax_new_tokens = 4\n"
                                        "reference = \"off\"\n[budget]\nunit = \"ratio\"\nvalues = [0.5]\n";
  const std::string grid_db = (dir_ / "grid-turns.db").string();
  auto g = run_cli("sweep " + quote(dir_ / "turns.toml") + " --db " + quote(grid_db), true);
  ASSERT_EQ(g.exit_code, 0) << g.out;
  const auto grid_store = sessions::SessionStore::open(grid_db, sessions::OpenMode::kReadOnly);
  const std::vector<sessions::Turn> swept = sessions::load_turns(grid_store, 1);
  ASSERT_EQ(swept.size(), 3u);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(swept[t], turns[t]) << "turn " << t << ": the sweep ran what run ran";
  std::ofstream(dir_ / "one-turn.toml") << "models = [\"" << test::stories_dir().string()
                                        << "\"]\nprompts = [\"story.txt\"]\npipelines = [\"snapkv:window=8+adakv\"]\n"
                                           "max_new_tokens = 4\nreference = \"off\"\n[budget]\nunit = \"ratio\"\n"
                                           "values = [0.5]\n";
  g = run_cli("sweep " + quote(dir_ / "one-turn.toml") + " --db " + quote(grid_db), true);
  EXPECT_NE(g.out.find("1 runs recorded, 0 already done"), std::string::npos) << g.out;
  std::ofstream(dir_ / "bad-turns.toml") << "models = [\"m\"]\nprompts = [\"story.txt\"]\npipelines = [\"snapkv\"]\n"
                                            "turns = [\"ok\", 3]\n[budget]\nunit = \"ratio\"\nvalues = [0.5]\n";
  g = run_cli("sweep " + quote(dir_ / "bad-turns.toml") + " --db " + quote(grid_db), true);
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.out.find("bad-turns.toml:4: 'turns' has an element that is not a string"), std::string::npos) << g.out;
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

// ---- damaged databases -------------------------------------------------------------------------------

/// First column of the first row of `sql` on `db` (read-only), as bytes.
std::string query_bytes(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    out.assign(static_cast<const char*>(sqlite3_column_blob(s, 0)), static_cast<size_t>(sqlite3_column_bytes(s, 0)));
  sqlite3_finalize(s);
  sqlite3_close_v2(h);
  return out;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

/// Flips `n` bytes of the stored value `stored` where they lie in the database file (as a bad
/// sector would); false when no unique contiguous run of them is found.
bool damage_in_file(const fs::path& db, const std::string& stored, size_t n) {
  std::string bytes = test::read_text(db);
  for (size_t k = stored.size() / 4; k + n <= stored.size(); k += 8) {
    const std::string needle = stored.substr(k, n);
    const size_t at = bytes.find(needle);
    if (at == std::string::npos || bytes.find(needle, at + 1) != std::string::npos) continue;
    for (size_t i = 0; i < n; ++i) bytes[at + i] = static_cast<char>(bytes[at + i] ^ 0x5A);
    write_bytes(db, bytes);
    return true;
  }
  return false;
}

TEST_F(CliSessions, CheckPassesAGoodDatabaseAndNamesTheDamagedBlobOfADamagedOne) {
  auto r = run_cli("run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt") +
                       " --pipeline snapkv:window=8 --compression-ratio 0.5 --max-new-tokens 4 --capture full --db " +
                       quote(db_),
                   true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("check " + quote(db_), true);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(db_.string() + ": 1 runs, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("integrity_check: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(db_.string() + ": ok"), std::string::npos) << r.out;

  // 24 bytes inside layer 1's attention blob, edited in the file.
  const fs::path out = dir_ / "attention.csv";
  ASSERT_EQ(run_cli("export " + quote(db_) + " 1 --figure attention --layer 1 --head 0 --out " + quote(out)).exit_code,
            0);
  const std::string good_csv = test::read_text(out);
  fs::remove(out);
  const std::string frame = query_bytes(db_, "SELECT data FROM blobs WHERE name = 'attention' AND layer = 1");
  ASSERT_GT(frame.size(), 48u);
  ASSERT_TRUE(damage_in_file(db_, frame, 24));

  r = run_cli("check " + quote(db_), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("damaged: blob 'attention' layer 1 of run 1 is damaged (checksum mismatch)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(db_.string() + ": damaged (1 problem"), std::string::npos) << r.out;

  // export fails naming the blob instead of writing wrong values; other figures still export.
  r = run_cli("export " + quote(db_) + " 1 --figure attention --layer 1 --head 0 --out " + quote(out), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(db_.string() + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blob 'attention' layer 1 of run 1 is damaged (checksum mismatch)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(good_csv.empty());
  r = run_cli("export " + quote(db_) + " 1 --figure attention --layer 2 --head 0 --out " + quote(out), true);
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST_F(CliSessions, WritingIntoAStructurallyDamagedDatabaseIsRefused) {
  const std::string run = "run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt") +
                          " --pipeline snapkv:window=8 --compression-ratio 0.5 --max-new-tokens 4 --db " + quote(db_);
  ASSERT_EQ(run_cli(run).exit_code, 0);
  fs::copy_file(db_, dir_ / "shard.db");
  // Garbage over the root page of step_metrics (past its first bytes).
  const int64_t page = std::stoll(query_bytes(db_, "SELECT rootpage FROM sqlite_schema WHERE name = 'step_metrics'"));
  const int64_t page_size = std::stoll(query_bytes(db_, "PRAGMA page_size"));
  std::string bytes = test::read_text(db_);
  ASSERT_GE(bytes.size(), static_cast<size_t>(page * page_size));
  for (int64_t i = 8; i < page_size; ++i) bytes[static_cast<size_t>((page - 1) * page_size + i)] = '\x5A';
  write_bytes(db_, bytes);

  auto r = run_cli(run, true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(db_.string() + ": is damaged (PRAGMA quick_check: "), std::string::npos) << r.out;
  EXPECT_EQ(test::read_text(db_), bytes);  // nothing appended
  r = run_cli("merge --out " + quote(db_) + " " + quote(dir_ / "shard.db"), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(db_.string() + ": is damaged (PRAGMA quick_check: "), std::string::npos) << r.out;
  EXPECT_EQ(test::read_text(db_), bytes);
  r = run_cli("check " + quote(db_), true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("integrity_check: FAILED"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvscope
