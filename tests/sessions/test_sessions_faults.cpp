// Faults while writing a session database: the disk filling up (RLIMIT_FSIZE in a child process:
// every write past the limit fails as on a full disk) and SIGKILL in the middle of a large write.
// Both must leave the database intact: earlier runs unchanged, the interrupted run not complete,
// integrity_check ok, and the next writer able to go on.
#include <gtest/gtest.h>

#include <ftw.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../temp_dir.h"
#include "kvscope/sessions/session_store.h"

using namespace kvscope::sessions;
using ScratchDir = kvscope::test::TempDir;

namespace {

RunInfo info(const std::string& name, const std::string& key) {
  RunInfo i;
  i.name = name;
  i.model = {"/models/stories260K.bin", "sha256:00", "llama2c", 5, 8, 4, 8, "fp32", "cpu"};
  i.pipeline.spec = "snapkv:window=8";
  i.pipeline.stages = {{"scoring", "snapkv", {{"window", ParamType::kInt, "8"}}}};
  i.budget = {BudgetUnit::kStored, 16};
  i.prompt = {"Once upon a time", {1, 403, 407, 261}};
  i.env = {"0.1.0", "1.13", "cpu", "test-host"};
  i.sweep_key = key;
  return i;
}

/// `bytes` of incompressible float32 data (zstd cannot shrink it below the file size limit).
Blob noise_blob(const std::string& name, int64_t layer, size_t bytes) {
  Blob b;
  b.name = name;
  b.layer = layer;
  b.dtype = DType::kF32;
  b.shape = {static_cast<int64_t>(bytes / 4)};
  b.data.resize(bytes / 4 * 4);
  std::mt19937 rng(static_cast<unsigned>(layer) + 7);
  for (auto& byte : b.data) byte = static_cast<uint8_t>(rng());
  return b;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

/// A database with two complete runs, checkpointed so the main file holds everything.
void make_two_runs(const std::string& path) {
  SessionStore s = SessionStore::open(path);
  for (int i = 0; i < 2; ++i) {
    const int64_t run = s.begin_run(info("run " + std::to_string(i), "key-" + std::to_string(i)));
    s.set_summary(run, "mean_kl", 0.25 * i);
    s.add_step_metrics(run, 0, {{"kl", 0.5}, {"top1", 1}});
    s.finish_run(run, {{5, 6, 7}, "abc"});
  }
}

struct ChildResult {
  int exit_code = -1;
  std::string message;
};

/// Runs `body` in a child process whose files may not grow past `limit` bytes (SIGXFSZ ignored, so
/// writes fail with EFBIG / short writes as on a full disk). The child sends back what it threw.
template <class Fn>
ChildResult in_child_with_file_limit(rlim_t limit, Fn&& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    int code = 0;
    std::string msg;
    try {
      body();
    } catch (const SessionError& e) {
      code = 3;
      msg = e.what();
    } catch (const std::exception& e) {
      code = 4;
      msg = std::string("not a SessionError: ") + e.what();
    }
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(code);
  }
  ::close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.message.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void expect_first_two_runs_intact(SessionStore& s) {
  const auto runs = s.list_runs();
  ASSERT_GE(runs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const RunRecord r = s.load_run(runs[i].id);
    EXPECT_EQ(r.row.status, RunStatus::kComplete);
    EXPECT_EQ(r.outputs.text, "abc");
    EXPECT_EQ(r.outputs.tokens, (std::vector<int32_t>{5, 6, 7}));
    EXPECT_EQ(s.load_step_metric(runs[i].id, "kl").size(), 1u);
  }
}

TEST(SessionFaults, DiskFullWhileWritingARunFailsClearlyAndKeepsTheDatabase) {
  ScratchDir dir;
  const std::string path = dir.file("runs.db");
  make_two_runs(path);
  const auto limit = static_cast<rlim_t>(file_size(path) + 256 * 1024);
  const ChildResult child = in_child_with_file_limit(limit, [&] {
    SessionStore s = SessionStore::open(path);
    const int64_t run = s.begin_run(info("too big", "key-big"));
    try {
      for (int layer = 0; layer < 16; ++layer) s.add_blob(run, noise_blob("attn", layer, 128 * 1024));
      s.finish_run(run, {{1}, "x"});
    } catch (const SessionError&) {
      try {
        s.fail_run(run, "disk full");  // may fail as well: the disk is still full
      } catch (const SessionError&) {
      }
      throw;
    }
  });
  ASSERT_EQ(child.exit_code, 3) << child.message;
  EXPECT_NE(child.message.find(path + ":"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find("disk is full"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find("intact"), std::string::npos) << child.message;

  // With space again: the database is intact, the big run is not complete, writing goes on.
  SessionStore s = SessionStore::open(path);
  EXPECT_EQ(s.integrity_check(), "ok");
  expect_first_two_runs_intact(s);
  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_NE(runs[2].status, RunStatus::kComplete);
  EXPECT_FALSE(s.find_by_sweep_key("key-big").has_value());
  const int64_t again = s.begin_run(info("retry", "key-big"));
  s.add_blob(again, noise_blob("attn", 0, 4096));
  s.finish_run(again, {{1}, "x"});
  EXPECT_EQ(s.find_by_sweep_key("key-big"), again);
}

TEST(SessionFaults, DiskFullWhenOpeningANewDatabaseFailsClearly) {
  ScratchDir dir;
  const std::string path = dir.file("new.db");
  const ChildResult child = in_child_with_file_limit(2048, [&] { SessionStore::open(path); });
  ASSERT_EQ(child.exit_code, 3) << child.message;
  EXPECT_NE(child.message.find(path + ":"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find("disk is full"), std::string::npos) << child.message;
}

TEST(SessionFaults, SigkillDuringALargeWriteLosesOnlyThatRun) {
  ScratchDir dir;
  const std::string path = dir.file("runs.db");
  make_two_runs(path);
  const std::string started = dir.file("started");
  const pid_t pid = ::fork();
  if (pid == 0) {
    SessionStore s = SessionStore::open(path);
    const int64_t run = s.begin_run(info("killed", "key-killed"));
    std::FILE* f = std::fopen(started.c_str(), "w");
    if (f) std::fclose(f);
    for (int layer = 0;; ++layer) s.add_blob(run, noise_blob("attn", layer, 256 * 1024));  // until killed
  }
  for (int i = 0; i < 600 && file_size(path + "-wal") < 1024 * 1024; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  SessionStore s = SessionStore::open(path);
  EXPECT_EQ(s.integrity_check(), "ok");
  expect_first_two_runs_intact(s);
  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_TRUE(runs[2].incomplete);
  EXPECT_EQ(runs[2].status, RunStatus::kRunning);
  EXPECT_FALSE(s.find_by_sweep_key("key-killed").has_value());
  // Every blob that was committed before the kill reads back whole.
  for (const Blob& b : s.load_blobs(runs[2].id, "attn"))
    EXPECT_EQ(b.data, noise_blob("attn", b.layer, 256 * 1024).data);
}

std::string read_all(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::string out;
  char buf[65536];
  for (size_t n; f && (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  if (f) std::fclose(f);
  return out;
}

// A kvscope database is in WAL mode; even a read-only SQLite connection to it creates -wal and
// -shm files. A newer or foreign one is refused from its header without any, leaving the folder
// as it was (the sessions tests check the main file; this checks the files beside it).
TEST(SessionFaults, RefusedWalDatabasesLeaveNoFilesBehind) {
  ScratchDir dir;
  const std::string path = dir.file("runs.db");
  make_two_runs(path);
  ASSERT_NE(::access((path + "-wal").c_str(), F_OK), 0);
  const std::string original = read_all(path);
  ASSERT_EQ(original[18], 2);  // WAL mode (file format read/write versions)
  for (const auto& [offset, value, problem] : {std::tuple{60, 7u, "session schema version 7 is newer"},
                                               std::tuple{68, 0x12345678u, "not a kvscope session database"}}) {
    std::string bytes = original;
    for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>(value >> (24 - 8 * i));
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
      try {
        SessionStore::open(path, mode);
        ADD_FAILURE() << "opened";
      } catch (const SessionError& e) {
        EXPECT_NE(std::string(e.what()).find(path + ": " + problem), std::string::npos) << e.what();
      }
      EXPECT_EQ(read_all(path), bytes);
      for (const char* suffix : {"-wal", "-shm", "-journal"})
        EXPECT_NE(::access((path + suffix).c_str(), F_OK), 0) << suffix;
    }
  }
}

}  // namespace
