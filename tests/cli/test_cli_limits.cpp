// Resource limits through the real binary (ulimit in the shell that starts it): a file-size limit
// while writing a session, an address-space limit below what kvscope needs to start, and one that
// runs out during a model load. Each must end in a clear message and a non-zero exit within
// seconds, with nothing saved lost (app/run/process_guard.h).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>

#include "../core/test_support.h"
#include "cli_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using test::quote;
using test::run_cli;

// No `ulimit -v` run works under ASan (it reserves terabytes of shadow memory) or in a CUDA build
// (the CUDA libraries map and reserve tens of GB of address space before main).
#if defined(__SANITIZE_ADDRESS__) || defined(KVSCOPE_CLI_WITH_CUDA)
constexpr bool kNoAddressSpaceLimit = true;
#else
constexpr bool kNoAddressSpaceLimit = false;
#endif

struct Limited {
  int exit_code;
  std::string out;  ///< stdout and stderr
  double seconds;
};

/// Runs kvscope-cli `args` (redirections included) under `ulimit LIMIT` (e.g. "-v 600000") in
/// /bin/sh, killed after 60 s (exit 124).
Limited run_limited(const std::string& limit, const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cmd = "ulimit " + limit + " && exec timeout 60 " + std::string(KVSCOPE_CLI) + " " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

class CliLimits : public test::CliTest {
 protected:
  std::string run_args(const std::string& name) const {
    return "run --model " + quote(test::stories_dir()) +
           " --prompt 'Once upon a time' --pipeline snapkv:window=2 --compression-ratio 0.5 --max-new-tokens 12"
           " --capture full --name " +
           name + " --db " + quote(db_);
  }
};

TEST_F(CliLimits, FileSizeLimitWhileWritingASessionFailsClearlyAndKeepsEarlierRuns) {
  ASSERT_EQ(run_cli(run_args("first")).exit_code, 0);
  // The next run's writes pass the limit: SIGXFSZ used to kill the process without a word (exit 153
  // from the shell). 40 KiB per file: room for the -shm index (32 KiB), not for the run's -wal
  // frames (~78 KiB for this run: its transactions rewrite the runs page, and the blobs go in one).
  const uintmax_t blocks = 80;  // dash: ulimit -f counts 512-byte blocks
  const Limited r = run_limited("-f " + std::to_string(blocks), run_args("second") + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("the disk is full or the file reached a size limit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(db_.string()), std::string::npos) << r.out;
  // Nothing saved is lost: the first run is complete, the second is not.
  const std::string listing = run_cli("inspect " + quote(db_)).out;
  EXPECT_TRUE(std::regex_search(listing, std::regex("\\bcomplete  [^\n]*first"))) << listing;
  EXPECT_FALSE(std::regex_search(listing, std::regex("\\bcomplete  [^\n]*second"))) << listing;
  // And writing resumes once the limit is gone.
  EXPECT_EQ(run_cli(run_args("third")).exit_code, 0);
  EXPECT_TRUE(std::regex_search(run_cli("inspect " + quote(db_)).out, std::regex("\\bcomplete  [^\n]*third")));
}

TEST_F(CliLimits, AddressSpaceBelowTheMinimumIsRefusedBeforeLibrariesStart) {
  if (kNoAddressSpaceLimit) GTEST_SKIP() << "ASan and CUDA builds cannot start under an address-space limit";
  // 700 MiB: the libraries map, then LibTorch's static initialisation threw std::bad_alloc and the
  // process aborted before main (or OpenBLAS spun forever at 600-800 MiB).
  const Limited r = run_limited("-v 716800", "policies 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_NE(r.out.find("kvscope-cli: error: the address-space limit (ulimit -v) is 700 MiB; kvscope needs at least"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST_F(CliLimits, AddressSpaceThatSufficesGivesTheSameTokensAsNoLimit) {
  if (kNoAddressSpaceLimit) GTEST_SKIP() << "ASan and CUDA builds cannot start under an address-space limit";
  const std::string args =
      "generate --model " + quote(test::stories_dir()) + " --prompt 'Once upon a time' --max-new-tokens 24 --json";
  const test::CliResult free_run = run_cli(args);
  ASSERT_EQ(free_run.exit_code, 0);
  const Limited r = run_limited("-v 1258291", args + " 2>/dev/null");  // 1.2 GiB
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const auto ids = [](const std::string& json) { return json.substr(json.find("\"output_ids\"")); };
  EXPECT_EQ(ids(r.out).substr(0, 200), ids(free_run.out).substr(0, 200));
}

TEST_F(CliLimits, AddressSpaceRunningOutDuringALoadFailsWithinSecondsNotAHang) {
  if (kNoAddressSpaceLimit) GTEST_SKIP() << "ASan and CUDA builds cannot start under an address-space limit";
  // About 200 M parameters (800 MB of fp32 weights) under a 1.3 GiB limit: the allocation fails part
  // way. OpenBLAS used to retry its buffer allocation forever here.
  std::ofstream(dir_ / "config.json")
      << R"({"model_type":"llama","hidden_size":1024,"intermediate_size":4096,"num_hidden_layers":8,)"
      << R"("num_attention_heads":16,"num_key_value_heads":16,"vocab_size":32000,)"
      << R"("max_position_embeddings":4096,"rms_norm_eps":1e-5})";
  const Limited r = run_limited(
      "-v 1363148", "generate --random-init " + quote(dir_ / "config.json") + " --max-new-tokens 4 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_LT(r.seconds, 45.0);
  EXPECT_NE(r.out.find("kvscope-cli: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allocate"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvscope
