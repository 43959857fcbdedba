// Sweeps that used to skip or duplicate work (issue 28, class 2), through the real binary with grids
// made here: budgets that printed alike, keys with working-directory-relative paths, misspelt keys,
// bad values found one run at a time, a grid too large to expand, and prompts from outside the grid.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../core/test_support.h"
#include "cli_support.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using test::quote;
using test::run_cli;

class CliSweeps : public test::CliTest {
 protected:
  static std::string model() { return (test::stories_dir() / "stories260K.bin").string(); }
  /// A grid of stories260K x story.txt x `pipelines` x `budgets`; `extra` goes before [budget].
  static std::string grid_text(const std::string& pipelines, const std::string& budgets, const std::string& extra = "",
                               const std::string& prompts = "\"story.txt\"") {
    return "models = [\"" + model() + "\"]\nprompts = [" + prompts + "]\npipelines = [" + pipelines +
           "]\nmax_new_tokens = 2\n" + extra + "[budget]\nunit = \"ratio\"\nvalues = [" + budgets + "]\n";
  }
  fs::path write(const std::string& text, const fs::path& file) {
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  test::CliResult sweep(const fs::path& grid, const std::string& more = "") {
    return run_cli("sweep " + quote(grid) + " --db " + quote(db_) + " " + more, true);
  }
  /// `kvscope-cli ARGS` run in directory `cwd` (stdout and stderr).
  static test::CliResult run_in(const fs::path& cwd, const std::string& args) {
    const std::string cmd = "cd " + quote(cwd) + " && " + std::string(KVSCOPE_CLI) + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = ::pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  int count_complete() {
    const std::string out = run_cli("inspect " + quote(db_)).out;
    const std::regex line("^[0-9]+  complete  ");
    int n = 0;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) n += std::regex_search(l, line);
    return n;
  }
};

TEST_F(CliSweeps, BudgetsThatPrintedAlikeAreSeparateRuns) {
  // With 6 significant digits both keys were "...=0.3..." and the second point was skipped as done.
  const fs::path grid = write(grid_text("\"snapkv:window=8\"", "0.30000001, 0.30000002, 0.3"), dir_ / "grid.toml");
  auto r = sweep(grid);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("3 runs recorded, 0 already done"), std::string::npos) << r.out;
  EXPECT_EQ(count_complete(), 3);
  r = sweep(grid);
  EXPECT_NE(r.out.find("0 runs recorded, 3 already done"), std::string::npos) << r.out;
  EXPECT_EQ(count_complete(), 3);
}

TEST_F(CliSweeps, ResumingFromAnotherDirectoryRecordsNothingNew) {
  // A grid with a relative prompt and a relative head pattern (resolved against the grid's folder),
  // run from the folder above it, then resumed from the grid's folder, from a sibling through
  // "..", and through a symbolic link to the folder: every key names the same canonical files.
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < 5; ++l)
    layers.push_back({{"heads",
                       {{{"streaming", false}},
                        {{"streaming", true}, {"sink", 4}, {"window", 16}},
                        {{"streaming", true}, {"sink", 4}, {"window", 16}},
                        {{"streaming", true}, {"sink", 4}, {"window", 16}}}}});
  write(nlohmann::json{{"format", "kvscope.head_pattern.v1"},
                       {"method", "manual"},
                       {"budget", 0.5},
                       {"n_layer", 5},
                       {"n_head_kv", 4},
                       {"layers", layers}}
            .dump(),
        dir_ / "grids" / "pattern.json");
  fs::copy_file(dir_ / "story.txt", dir_ / "grids" / "story.txt");
  write(grid_text("\"snapkv:window=8\", \"heads:pattern=pattern.json\"", "0.25, 0.5"), dir_ / "grids" / "grid.toml");
  fs::create_directories(dir_ / "elsewhere");
  fs::create_directory_symlink(dir_ / "grids", dir_ / "link");
  const std::string db = " --db " + quote(db_);
  auto r = run_in(dir_, "sweep grids/grid.toml" + db);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("3 runs recorded, 0 already done"), std::string::npos) << r.out;
  for (const auto& [cwd, grid] : std::vector<std::pair<fs::path, std::string>>{
           {dir_ / "grids", "grid.toml"}, {dir_ / "elsewhere", "../grids/grid.toml"}, {dir_, "link/grid.toml"}}) {
    r = run_in(cwd, "sweep " + grid + db);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("0 runs recorded, 3 already done"), std::string::npos) << cwd << " " << grid << ": " << r.out;
  }
  EXPECT_EQ(count_complete(), 3);
}

TEST_F(CliSweeps, MisspeltKeysAreRefusedWithFileAndLineAndNothingRuns) {
  const std::string good = grid_text("\"snapkv:window=8\"", "0.5");
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Each: text, what the message says (after "FILE:LINE: ").
      {grid_text("\"snapkv:window=8\"", "0.5", "reference = \"fulll\"\n"),
       ":5: 'reference' must be \"full\" or \"off\" (got \"fulll\")"},
      {grid_text("\"snapkv:window=8\"", "0.5", "max_new_token = 5\n"),
       ":5: unknown key 'max_new_token' (did you mean 'max_new_tokens'?)"},
      {good + "valeus = [0.25]\n", ":8: unknown [budget] key 'valeus' (did you mean 'values'?)"},
      {good + "[budgets]\nvalues = [0.25]\n", ":8: unknown key 'budgets' (did you mean 'budget'?)"},
      {"zzz = 1\naaa = 2\n" + good, ":1: unknown key 'zzz'"},  // the first by line, not by name
      {"models = [\"" + model() + "\"]\nprompt = [\"story.txt\"]\n",
       ":2: unknown key 'prompt' (did you mean 'prompts'?)"},
  };
  for (const auto& [text, problem] : cases) {
    const fs::path grid = write(text, dir_ / "grid.toml");
    const auto r = sweep(grid);
    EXPECT_EQ(r.exit_code, 2) << text << r.out;
    EXPECT_NE(r.out.find(grid.string() + problem), std::string::npos) << text << r.out;
    EXPECT_FALSE(fs::exists(db_)) << text << r.out;
  }
}

TEST_F(CliSweeps, BadValuesOfEveryAxisAreRefusedBeforeTheFirstRun) {
  // Each grid's first points are good; the run that used to fail came later, after some recorded.
  const std::string p2 = "\"snapkv:window=8\", \"streamingllm:sink=4\"";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {grid_text(p2, "0.25, 0.5,\n  1.5"),
       ":8: [budget] value 1.5 is outside [0, 1), the range of unit "
       "compression_ratio"},
      {grid_text(p2, "0.25, nan"), ":7: [budget] values must be finite numbers (got nan)"},
      {grid_text("\"snapkv:window=8\",\n \"snapkv:windw=8\"", "0.5"),
       ":4: pipeline 'snapkv:windw=8': snapkv: unknown parameter 'windw'"},
      {grid_text("\"snapkv:window=8\",\n \"snapk\"", "0.5"), ":4: pipeline 'snapk': unknown policy 'snapk'"},
      {grid_text(p2 + ",\n \"heads:pattern=none.json\"", "0.5"),
       ":4: pipeline 'heads:pattern=none.json': " + (dir_ / "none.json").string() + ": no such file"},
      {grid_text(p2, "0.5", "", "\"story.txt\",\n \"nope.txt\""),
       ":3: prompt file '" + (dir_ / "nope.txt").string() + "': no such file"},
      {grid_text(p2, "0.5", "", "\"story.txt\", \".\""),
       ":2: prompt file '" + dir_.string() + "' is not a regular file"},
      {grid_text(p2, "0.5", "dtype = \"fp33\"\n"), ":5: 'dtype': unknown dtype 'fp33'"},
      {grid_text(p2, "0.5", "device = \"gpu\"\n"), ":5: 'device': --device: 'gpu' is not a device"},
      {grid_text(p2, "0.5", "capture = \"ful\"\n"), ":5: 'capture': unknown --capture level 'ful'"},
      {grid_text(p2, "0.5", "pin = \"1-2\"\n"), ":5: 'pin': --pin '1-2': '1-2' is not L:H"},
      {grid_text(p2, "0.5", "bos = \"sometimes\"\n"), ":5: 'bos' must be \"auto\", \"always\" or \"never\""},
      {std::regex_replace(grid_text(p2, "0.5"), std::regex("max_new_tokens = 2"), "max_new_tokens = 0"),
       ":4: 'max_new_tokens' must be an integer >= 1"},
      {grid_text(p2, "0.5", "allow_prompts_outside_grid = \"yes\"\n"),
       ":5: 'allow_prompts_outside_grid' must be true or false"},
      {"models = [\"" + model() + "\",\n  \"" + (dir_ / "no-model").string() +
           "\"]\nprompts = [\"story.txt\"]\npipelines = [\"tova\"]\n[budget]\nvalues = [0.5]\n",
       ":2: model '" + (dir_ / "no-model").string() + "': no such file or directory"},
  };
  for (const auto& [text, problem] : cases) {
    const fs::path grid = write(text, dir_ / "grid.toml");
    const auto r = sweep(grid);
    EXPECT_EQ(r.exit_code, 2) << text << r.out;
    EXPECT_NE(r.out.find(grid.string() + problem), std::string::npos) << text << r.out;
    EXPECT_FALSE(fs::exists(db_)) << "nothing runs: " << text << r.out;
  }
  // The same grids without the bad value run (a pinned head records its selections per token).
  const auto ok = sweep(write(grid_text(p2, "0.25, 0.5", "dtype = \"float32\"\npin = \"0:0\"\n"), dir_ / "grid.toml"));
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("4 runs recorded"), std::string::npos) << ok.out;
}

TEST_F(CliSweeps, AGridOfABillionRunsIsRefusedQuicklyWithItsCount) {
  // 1000 models x 1000 prompts x 1 pipeline x 1000 budgets: a 36 KB file. Expanding it took all
  // memory; now it is counted first and refused (the files need not even exist for that).
  std::string models, prompts, budgets;
  for (int i = 0; i < 1000; ++i) {
    models += (i ? ", " : "") + ("\"model-" + std::to_string(i) + "\"");
    prompts += (i ? ", " : "") + ("\"prompt-" + std::to_string(i) + ".txt\"");
    budgets += (i ? ", " : "") + std::to_string(i / 1000.0).substr(0, 5);
  }
  const fs::path grid = write("models = [" + models + "]\nprompts = [" + prompts +
                                  "]\npipelines = [\"snapkv:window=8\"]\n[budget]\nvalues = [" + budgets + "]\n",
                              dir_ / "grid.toml");
  ASSERT_GT(fs::file_size(grid), 35000u);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = sweep(grid);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(grid.string() +
                       ": the grid has 1000000000 runs (1000 models x 1000 prompts x (1 pipelines x 1000 budgets + 0 "
                       "pipelines without a budget)), more than --max-runs 100000"),
            std::string::npos)
      << r.out;
  EXPECT_LT(seconds, 20.0);
  EXPECT_FALSE(fs::exists(db_));
  // The limit is the user's: a 4-run grid under --max-runs 3 is refused, under 4 it runs.
  const fs::path small = write(grid_text("\"snapkv:window=8\", \"tova\"", "0.25, 0.5"), dir_ / "small.toml");
  r = sweep(small, "--max-runs 3");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("the grid has 4 runs"), std::string::npos) << r.out;
  r = sweep(small, "--max-runs 4");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("4 runs recorded"), std::string::npos) << r.out;
}

TEST_F(CliSweeps, PromptsOutsideTheGridsFolderNeedTheGridToSaySo) {
  write("a prompt from elsewhere", dir_ / "outside.txt");
  fs::create_directories(dir_ / "grids");
  fs::create_symlink(dir_ / "outside.txt", dir_ / "grids" / "link.txt");  // a link inside to a file outside
  for (const std::string& prompt : {std::string("\"../outside.txt\""), "\"" + (dir_ / "outside.txt").string() + "\"",
                                    std::string("\"link.txt\"")}) {
    const fs::path grid =
        write(grid_text("\"tova\"", "0.5", "", "\"story.txt\",\n  " + prompt), dir_ / "grids" / "g.toml");
    auto r = sweep(grid);
    EXPECT_EQ(r.exit_code, 2) << prompt << r.out;
    EXPECT_NE(r.out.find(grid.string() + ":3: prompt '"), std::string::npos) << prompt << r.out;
    EXPECT_NE(r.out.find("is outside the grid's folder " + (dir_ / "grids").string() + " (it is " +
                         (dir_ / "outside.txt").string() + "); write allow_prompts_outside_grid = true"),
              std::string::npos)
        << prompt << r.out;
    EXPECT_FALSE(fs::exists(db_));
  }
  const fs::path grid =
      write(grid_text("\"tova\"", "0.5", "", "\"../story.txt\", \"../outside.txt\""), dir_ / "grids" / "g.toml");
  std::string text = test::read_text(grid);
  write("allow_prompts_outside_grid = true\n" + text, grid);
  const auto r = sweep(grid);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("2 runs recorded"), std::string::npos) << r.out;
}

TEST_F(CliSweeps, KeysOfTheOldFormatStillResumeWhenTheirBudgetIsExactlyThisOne) {
  // Databases written before keys held exact numbers and canonical paths: a point is done if a
  // complete run has the key the old format gives it (paths as the grid was named, the budget with 6
  // digits) and recorded exactly this budget. 0.30000001 and 0.30000002 share an old key; only the
  // one recorded with it is done.
  const fs::path grid = write(grid_text("\"snapkv:window=8\"", "0.5, 0.30000001, 0.30000002"), dir_ / "grid.toml");
  auto legacy_key = [&](const std::string& budget) {
    return model() + "|" + (dir_ / "story.txt").string() + "|snapkv:window=8|ratio=" + budget +
           "|new=2|fp32|bos=auto|ref=1";
  };
  {
    auto store = sessions::SessionStore::open(db_.string());
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, double>>{{legacy_key("0.5"), 0.5}, {legacy_key("0.3"), 0.30000001}}) {
      sessions::RunInfo info;
      info.name = "old";
      info.pipeline.spec = "snapkv:window=8";
      info.budget = {BudgetUnit::kCompressionRatio, value};
      info.sweep_key = key;
      store.finish_run(store.begin_run(info), {});
    }
  }
  auto r = sweep(grid);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("1 runs recorded, 2 already done"), std::string::npos) << r.out;
  r = sweep(grid);
  EXPECT_NE(r.out.find("0 runs recorded, 3 already done"), std::string::npos) << r.out;
  EXPECT_EQ(count_complete(), 3);
}

}  // namespace
}  // namespace kvscope
