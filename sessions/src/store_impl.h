#pragma once
// SessionStore's private state, shared by session_store.cpp and merge.cpp.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvscope/sessions/session_store.h"
#include "sqlite_db.h"

namespace kvscope::sessions {

struct SessionStore::Impl {
  std::unique_ptr<detail::Db> db;
  std::string path;
  bool read_only = false;
  /// Why an OpenMode::kView open fell back to read-only ("" otherwise).
  std::string read_only_reason;
  // The writer identity recorded with each run this store begins (crash detection).
  int64_t pid = 0;
  int64_t start_ticks = -1;
  std::string host;
  /// When this store last wrote runs.heartbeat_at per run. The update rewrites the whole runs
  /// row (prompt tokens included), so it is throttled to once per kHeartbeatEvery.
  std::map<int64_t, std::chrono::steady_clock::time_point> last_heartbeat;
  static constexpr std::chrono::seconds kHeartbeatEvery{60};
  /// Sets runs.heartbeat_at of `run` to now unless this store did so within kHeartbeatEvery.
  /// Call inside a write transaction.
  void heartbeat(int64_t run);
};

namespace detail {
/// Appends to `out` one line per problem of run `run` (its row, token arrays and blobs: checksums,
/// decoding, counts); counts blobs into `counts` when given. Reads with plain statements: call
/// inside a read transaction.
void run_problems(Db& db, int64_t run, std::vector<std::string>& out, CheckReport* counts = nullptr);
}  // namespace detail

}  // namespace kvscope::sessions
