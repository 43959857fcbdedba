#include "sqlite_db.h"

#include <time.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>

namespace kvscope::sessions::detail {

namespace {
bool is_busy(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

/// Sleeps a few milliseconds, randomised so that competing writers do not retry in lockstep.
void backoff(int attempt) {
  thread_local std::minstd_rand rng(static_cast<unsigned>(::getpid()) * 2654435761u + static_cast<unsigned>(attempt));
  const int cap = std::min(200, 5 << std::min(attempt, 5));
  std::this_thread::sleep_for(std::chrono::milliseconds(1 + static_cast<int>(rng() % static_cast<unsigned>(cap))));
}
}  // namespace

// ---- Stmt ---------------------------------------------------------------------------------------

Stmt::Stmt(Db& db, std::string_view sql) : db_(db) {
  const int rc = sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &s_, nullptr);
  if (rc != SQLITE_OK) db.fail(rc, "preparing \"" + std::string(sql.substr(0, 80)) + "\"");
}

Stmt::~Stmt() { sqlite3_finalize(s_); }

Stmt& Stmt::bind(int i, int64_t v) {
  if (int rc = sqlite3_bind_int64(s_, i, v); rc != SQLITE_OK) db_.fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  if (int rc = sqlite3_bind_double(s_, i, v); rc != SQLITE_OK) db_.fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, std::string_view v) {
  if (int rc = sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8); rc != SQLITE_OK)
    db_.fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, const std::optional<std::string>& v) {
  return v ? bind(i, std::string_view(*v)) : bind_null(i);
}
Stmt& Stmt::bind_blob(int i, const void* data, size_t bytes) {
  // A zero-length blob must still be a blob (not NULL): SQLite wants a non-null pointer.
  static const char empty = 0;
  if (int rc = sqlite3_bind_blob64(s_, i, bytes ? data : &empty, bytes, SQLITE_TRANSIENT); rc != SQLITE_OK)
    db_.fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind_null(int i) {
  if (int rc = sqlite3_bind_null(s_, i); rc != SQLITE_OK) db_.fail(rc, "bind");
  return *this;
}
Stmt& Stmt::bind_value(int i, const sqlite3_value* v) {
  if (int rc = sqlite3_bind_value(s_, i, v); rc != SQLITE_OK) db_.fail(rc, "bind");
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3_reset(s_);
  if (is_busy(rc)) throw Busy();
  db_.fail(rc, "");
}

void Stmt::run() {
  while (step()) {
  }
}

void Stmt::reset() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
}

bool Stmt::is_null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
int64_t Stmt::col_int(int c) const { return sqlite3_column_int64(s_, c); }
double Stmt::col_double(int c) const {
  return is_null(c) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(s_, c);
}
std::string Stmt::col_text(int c) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, c))) : std::string();
}
std::optional<std::string> Stmt::col_opt_text(int c) const {
  if (is_null(c)) return std::nullopt;
  return col_text(c);
}
std::vector<uint8_t> Stmt::col_blob(int c) const {
  const auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(s_, c));
  const int n = sqlite3_column_bytes(s_, c);
  return p ? std::vector<uint8_t>(p, p + n) : std::vector<uint8_t>();
}
const sqlite3_value* Stmt::col_value(int c) const { return sqlite3_column_value(s_, c); }
int Stmt::column_count() const { return sqlite3_column_count(s_); }

// ---- Db -----------------------------------------------------------------------------------------

Db::Db(const std::string& path, int flags, std::string display_path) : path_(std::move(display_path)) {
  const int rc = sqlite3_open_v2(path.c_str(), &h_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = h_ ? sqlite3_errmsg(h_) : sqlite3_errstr(rc);
    sqlite3_close_v2(h_);
    h_ = nullptr;
    throw SessionError(path_, "cannot open: " + msg);
  }
  sqlite3_extended_result_codes(h_, 1);
  sqlite3_busy_timeout(h_, 5000);
}

Db::~Db() {
  cache_.clear();
  sqlite3_close_v2(h_);
}

void Db::fail(int rc, std::string_view context) const {
  if (is_busy(rc)) throw Busy();
  std::string msg = sqlite3_errmsg(h_);
  if (msg == "not an error" || msg.empty()) msg = sqlite3_errstr(rc);
  if ((rc & 0xff) == SQLITE_NOTADB) msg = "not a SQLite database (" + msg + ")";
  // A full disk (or a file size limit) shows up as SQLITE_FULL or as a failed write / truncate.
  if ((rc & 0xff) == SQLITE_FULL || rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_TRUNCATE ||
      rc == SQLITE_IOERR_SHMSIZE)
    msg = "the disk is full or the file reached a size limit (" + msg +
          "); this write was rolled back, everything saved before it is intact";
  throw SessionError(path_, context.empty() ? msg : std::string(context) + ": " + msg);
}

void Db::exec(std::string_view sql) {
  // sqlite3_exec needs a NUL-terminated string.
  const std::string text(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(h_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    sqlite3_free(err);
    fail(rc, "");
  }
}

int64_t Db::query_int(std::string_view sql) {
  Stmt s(*this, sql);
  if (!s.step()) throw SessionError(path_, "no result for \"" + std::string(sql) + "\"");
  return s.col_int(0);
}

Stmt& Db::cached(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) it = cache_.emplace(sql, std::make_unique<Stmt>(*this, sql)).first;
  it->second->reset();
  return *it->second;
}

void Db::write_tx(const std::function<void()>& fn, std::string_view context) {
  const auto deadline = std::chrono::steady_clock::now() + retry_for;
  auto locked = [&] {
    return SessionError(path_, std::string(context) + ": database stayed locked by another writer");
  };
  for (int attempt = 0;; ++attempt) {
    try {
      exec("BEGIN IMMEDIATE");
    } catch (const Busy&) {
      if (std::chrono::steady_clock::now() > deadline) throw locked();
      backoff(attempt);
      continue;
    } catch (const SessionError& e) {
      throw with_context(e, context);
    }
    try {
      fn();
      reset_all();
      // COMMIT can be answered BUSY; the transaction then stays open and COMMIT may be retried.
      for (int c = 0;; ++c) {
        try {
          exec("COMMIT");
          break;
        } catch (const Busy&) {
          if (std::chrono::steady_clock::now() > deadline) throw;
          backoff(c);
        }
      }
      return;
    } catch (const Busy&) {
      rollback();
      if (std::chrono::steady_clock::now() > deadline) throw locked();
      backoff(attempt);
    } catch (const SessionError& e) {
      rollback();
      throw with_context(e, context);
    } catch (...) {
      rollback();
      throw;
    }
  }
}

void Db::reset_all() {
  for (auto& [sql, stmt] : cache_) sqlite3_reset(stmt->handle());
}

void Db::rollback() {
  reset_all();
  if (!sqlite3_get_autocommit(h_)) sqlite3_exec(h_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Db::read(const std::function<void()>& fn, std::string_view context, bool in_transaction) {
  const auto deadline = std::chrono::steady_clock::now() + retry_for;
  for (int attempt = 0;; ++attempt) {
    try {
      if (in_transaction) exec("BEGIN");
      fn();
      reset_all();
      if (in_transaction) exec("COMMIT");
      return;
    } catch (const Busy&) {
      rollback();
      if (std::chrono::steady_clock::now() > deadline)
        throw SessionError(path_, std::string(context) + ": database stayed locked");
      backoff(attempt);
    } catch (const SessionError& e) {
      rollback();
      throw with_context(e, context);
    } catch (...) {
      rollback();
      throw;
    }
  }
}

SessionError Db::with_context(const SessionError& e, std::string_view context) const {
  const std::string prefix = path_ + ": ";
  std::string what = e.what();
  if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
  if (context.empty() || what.rfind(std::string(context), 0) == 0) return SessionError(path_, what);
  return SessionError(path_, std::string(context) + ": " + what);
}

std::string now_iso8601() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[96];
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace kvscope::sessions::detail
