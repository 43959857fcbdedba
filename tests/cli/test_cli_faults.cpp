// Faults through the real binary: out of memory at prefill and at decode (injected with
// KVSCOPE_TEST_FAULT, as a CUDA allocator's c10::Error), a sweep killed with SIGKILL and resumed,
// and a sweep grid that used to reach undefined behaviour in toml++.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <thread>
#include <utility>
#include <vector>

#include "../core/test_support.h"
#include "cli_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using test::quote;
using test::run_cli;

/// Sets KVSCOPE_TEST_FAULT for the commands run while it lives.
class InjectedFault {
 public:
  explicit InjectedFault(const char* spec) { ::setenv("KVSCOPE_TEST_FAULT", spec, 1); }
  ~InjectedFault() { ::unsetenv("KVSCOPE_TEST_FAULT"); }
};

class CliFaults : public test::CliTest {
 protected:
  void write_grid(const std::string& pipelines, const std::string& budgets, int max_new_tokens = 6) {
    std::ofstream(dir_ / "grid.toml") << "models = [\"" << (test::stories_dir() / "stories260K.bin").string()
                                      << "\"]\nprompts = [\"story.txt\"]\npipelines = [" << pipelines
                                      << "]\nmax_new_tokens = " << max_new_tokens
                                      << "\n[budget]\nunit = \"ratio\"\nvalues = [" << budgets << "]\n";
  }
  std::string run_args() const {
    return "run --model " + quote(test::stories_dir()) + " --prompt-file " + quote(dir_ / "story.txt") +
           " --pipeline snapkv:window=8 --compression-ratio 0.5 --max-new-tokens 8 --reference full --db " + quote(db_);
  }
  /// Lines of `inspect` whose status column is `status`.
  int count_status(const std::string& status) {
    const std::string out = run_cli("inspect " + quote(db_)).out;
    const std::regex line("^[0-9]+  " + status + "  ");
    int n = 0;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) n += std::regex_search(l, line);
    return n;
  }
};

TEST_F(CliFaults, OutOfMemoryAtPrefillFailsClearlyAndTheRunIsNotComplete) {
  ASSERT_EQ(run_cli(run_args()).exit_code, 0);
  {
    InjectedFault oom("oom@prefill");
    const auto r = run_cli(run_args(), true);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("kvscope-cli: error: out of memory during the prefill of"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--prefill-chunk"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("smaller budget"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("CUDA out of memory"), std::string::npos) << r.out;  // the allocator's own words
  }
  EXPECT_EQ(count_status("complete"), 1);
  EXPECT_EQ(count_status("failed"), 1);
  // The next run in the same database works.
  ASSERT_EQ(run_cli(run_args()).exit_code, 0);
  EXPECT_EQ(count_status("complete"), 2);
}

TEST_F(CliFaults, OutOfMemoryAtDecodeFailsClearlyAndTheRunIsNotComplete) {
  InjectedFault oom("oom@decode:2");
  const auto r = run_cli(run_args() + " --json", true);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("out of memory at decode step 2 on cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smaller budget (--budget / --compression-ratio)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"output_ids\""), std::string::npos) << "no partial result is printed: " << r.out;
  EXPECT_EQ(count_status("complete"), 0);
  EXPECT_EQ(count_status("failed"), 1);
}

TEST_F(CliFaults, SweepGoesOnAfterOutOfMemoryAndResumeCompletesTheFailedRuns) {
  write_grid("\"snapkv:window=8\", \"streamingllm:sink=4\"", "0.25, 0.5");
  {
    InjectedFault oom("oom@decode:1");
    const auto r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("0 runs recorded, 0 already done, 4 failed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sweep: item 3 failed: out of memory at decode step 1"), std::string::npos) << r.out;
  }
  EXPECT_EQ(count_status("failed"), 4);
  auto r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("4 runs recorded, 0 already done, 0 failed"), std::string::npos) << r.out;
  r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  EXPECT_NE(r.out.find("0 runs recorded, 4 already done"), std::string::npos) << r.out;
  EXPECT_EQ(count_status("complete"), 4);
  EXPECT_EQ(count_status("failed"), 4);  // the failed attempts stay, for the record
}

TEST_F(CliFaults, SweepKilledWithSigkillResumesWithoutLosingOrDuplicatingRuns) {
  // 24 runs of up to 256 tokens: long enough to be killed part-way on a fast machine.
  write_grid("\"snapkv:window=4\", \"streamingllm:sink=4\", \"keydiff\", \"tova\"", "0.1, 0.25, 0.4, 0.5, 0.6, 0.75",
             256);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd =
        std::string(KVSCOPE_CLI) + " sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_) + " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Kill -9 once a few runs are complete (the sweep is then between or inside runs).
  for (int i = 0; i < 1200 && count_status("complete") < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int done_before = count_status("complete");
  ASSERT_GE(done_before, 3);
  ASSERT_LT(done_before, 24) << "the sweep finished before it could be killed";
  EXPECT_LE(count_status("incomplete"), 1);

  const auto r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(std::to_string(24 - done_before) + " runs recorded, " + std::to_string(done_before) +
                       " already done, 0 failed"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count_status("complete"), 24);  // each grid point exactly once
  const auto again = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
  EXPECT_NE(again.out.find("0 runs recorded, 24 already done"), std::string::npos) << again.out;
}

TEST_F(CliFaults, NewerOrForeignDatabasesAreRefusedByEveryCommandAndLeftByteIdentical) {
  ASSERT_EQ(run_cli(run_args()).exit_code, 0);
  ASSERT_FALSE(fs::exists(db_.string() + "-wal"));  // checkpointed on close: the file is the whole database
  const std::string original = test::read_text(db_);
  // The SQLite header holds user_version at byte 60 and application_id at byte 68 (big-endian).
  auto patched = [&](size_t offset, uint32_t value) {
    std::string bytes = original;
    for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>(value >> (24 - 8 * i));
    return bytes;
  };
  write_grid("\"tova\"", "0.5");
  for (const auto& [bytes, problem] :
       {std::pair{patched(60, 99), std::string("session schema version 99 is newer")},
        std::pair{patched(68, 0x12345678), std::string("not a kvscope session database")}}) {
    std::ofstream(db_, std::ios::binary | std::ios::trunc) << bytes;
    for (const std::string& cmd :
         {run_args(), "sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), "inspect " + quote(db_),
          "compare " + quote(db_) + " 1 1", "merge --out " + quote(dir_ / "merged.db") + " " + quote(db_)}) {
      const auto r = run_cli(cmd, true);
      EXPECT_NE(r.exit_code, 0) << cmd << ": " << r.out;
      EXPECT_NE(r.out.find(db_.string() + ": " + problem), std::string::npos) << cmd << ": " << r.out;
      EXPECT_EQ(test::read_text(db_), bytes) << cmd << " changed the file";
      EXPECT_FALSE(fs::exists(db_.string() + "-wal")) << cmd;
      EXPECT_FALSE(fs::exists(db_.string() + "-journal")) << cmd;
    }
  }
}

TEST_F(CliFaults, GridsThatReachUndefinedBehaviourInTomlPlusPlusAreRefusedClearly) {
  // Found by fuzz_sweep_toml: toml++ 3.3 reached __builtin_unreachable on 'Þ' in a bare key, on
  // U+FCBF in a value and on U+FEFB escaped by a backslash in a multi-line string, and a false
  // assumption (TOML_ASSERT_ASSUME) on a table header '[' followed by a newline and on "[}]".
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mo-els\xc3\x9e"
       "demax_new_t-goldl=5,p=[\"p\"]\npipelines=[\"tova\"]\n",
       "not valid TOML: a character outside comments that kvscope's TOML library (toml++ 3.3) cannot read (line 1)"},
      {"models=-[\"c>>\xef\xb2\xbf>>\"]\n", "cannot read (line 1)"},
      // U+FEFB right after a backslash in a multi-line string (toml++ asks whether it is whitespace).
      {"dmoneilustmodels=[\"\"\"m\\\\\\\\\\\xef\xbb\xbb\\\\\\\\\\\\", "cannot read (line 1)"},
      {"models = [\"a\"]\nprompts = [\"\"\"\nx\\\xc3\xa9\"\"\"]\n", "cannot read (line 3)"},
      {"models = [\"m\"]\n[\ndbguet]\nunit = \"ratio\"\n",
       "not valid TOML: a table header without a name after '[' (line 2)"},
      {"models = [\"m\"]\npipelines = [}]\n", "not valid TOML: refused by an internal check of toml++"},
  };
  for (const auto& [text, problem] : cases) {
    std::ofstream(dir_ / "grid.toml", std::ios::binary) << text;
    const auto r = run_cli("sweep " + quote(dir_ / "grid.toml") + " --db " + quote(db_), true);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find((dir_ / "grid.toml").string() + ": not valid TOML: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(problem), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(db_));
  // Non-ASCII text in comments, and escapes in strings, are fine.
  fs::copy_file(dir_ / "story.txt", dir_ / "st\xc3\xbcry.txt");
  std::ofstream(dir_ / "ok.toml")
      << "# Grille d'essai: mod\xc3\xa8les\nmodels = [\"" << (test::stories_dir() / "stories260K.bin").string()
      << "\"]\nprompts = [\"st\\u00FCry.txt\"]\npipelines = [\"tova\"]  # \xc3\xa9lan\nmax_new_tokens = 2\n"
         "[budget]\nunit = \"ratio\"\nvalues = [0.5]\n";
  const auto ok = run_cli("sweep " + quote(dir_ / "ok.toml") + " --db " + quote(db_), true);
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

}  // namespace
}  // namespace kvscope
