#pragma once
// Running the kvscope-cli binary from tests.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/test_support.h"

namespace kvscope::test {

struct CliResult {
  int exit_code;
  std::string out;
};

/// Runs kvscope-cli with `args` (shell-quoted by the caller); stdout, plus stderr if `merge`.
inline CliResult run_cli(const std::string& args, bool merge = false) {
  const std::string cmd = std::string(KVSCOPE_CLI) + " " + args + (merge ? " 2>&1" : " 2>/dev/null");
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// Runs kvscope-cli with `args`; its stderr alone (stdout is discarded).
inline CliResult run_cli_stderr(const std::string& args) {
  return run_cli(args + " 2>&1 >/dev/null #", false);  // '#' comments out run_cli's own redirection
}

inline std::string quote(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

/// A test with a fresh folder of its own (dir_, named after the suite, the process and the test,
/// removed afterwards) holding story.txt (a short stories260K prompt); db_ = dir_ / "runs.db".
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("kvscope_") + info->test_suite_name() + "_" + std::to_string(::getpid()) + "_" + info->name());
    remove_tree(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "story.txt")
        << "Once upon a time, there was a little girl named Lily. She loved to play outside.";
    db_ = dir_ / "runs.db";
  }
  void TearDown() override { remove_tree(dir_); }
  std::filesystem::path dir_, db_;
};

}  // namespace kvscope::test
