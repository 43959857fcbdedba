#pragma once
// Thin RAII layer over the SQLite C API for the session store: a connection that knows its file
// (for error messages), prepared statements with typed bind/column helpers, and the retry
// policy for SQLITE_BUSY. Private to kvscope_sessions.
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvscope/sessions/types.h"

namespace kvscope::sessions::detail {

/// Thrown (internally only) when SQLite answers SQLITE_BUSY / SQLITE_LOCKED after its busy
/// timeout: the caller rolls back and retries the whole transaction.
struct Busy : std::exception {
  const char* what() const noexcept override { return "database is busy"; }
};

class Db;

/// A prepared statement. Bind indices are 1-based, column indices 0-based (as in SQLite).
class Stmt {
 public:
  Stmt(Db& db, std::string_view sql);
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_) { o.s_ = nullptr; }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view v);
  Stmt& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, const std::optional<std::string>& v);
  Stmt& bind_blob(int i, const void* data, size_t bytes);
  Stmt& bind_null(int i);
  Stmt& bind_value(int i, const sqlite3_value* v);

  /// Steps once: true when a row is available. Throws Busy or SessionError.
  bool step();
  /// Steps to completion (statements without result rows).
  void run();
  /// Resets and clears bindings so the statement can be reused.
  void reset();

  bool is_null(int c) const;
  int64_t col_int(int c) const;
  /// NULL reads as NaN (SQLite stores NaN as NULL).
  double col_double(int c) const;
  std::string col_text(int c) const;
  std::optional<std::string> col_opt_text(int c) const;
  std::vector<uint8_t> col_blob(int c) const;
  const sqlite3_value* col_value(int c) const;
  int column_count() const;
  sqlite3_stmt* handle() { return s_; }

 private:
  Db& db_;
  sqlite3_stmt* s_ = nullptr;
};

/// One connection.
class Db {
 public:
  /// Opens `path` with sqlite3_open_v2 `flags` (":memory:" allowed). `display_path` names the
  /// file in errors. Sets extended result codes and the busy timeout.
  Db(const std::string& path, int flags, std::string display_path);
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  sqlite3* handle() const { return h_; }
  const std::string& path() const { return path_; }

  /// Runs one or more statements without results. Throws Busy or SessionError.
  void exec(std::string_view sql);
  /// Value of a single-row, single-integer query (e.g. "PRAGMA user_version").
  int64_t query_int(std::string_view sql);
  /// A statement cached by its SQL text (reset before it is returned).
  Stmt& cached(const std::string& sql);

  /// Throws SessionError(path, context + ": " + sqlite's message) or Busy for `rc`.
  [[noreturn]] void fail(int rc, std::string_view context) const;

  /// Runs `fn` inside BEGIN IMMEDIATE ... COMMIT; on Busy rolls back, waits and retries the
  /// whole transaction (up to `retry_for`); on any other exception rolls back and rethrows.
  void write_tx(const std::function<void()>& fn, std::string_view context);
  /// Runs a read inside BEGIN (deferred: one consistent snapshot) ... COMMIT, or without a
  /// transaction when `in_transaction` is false, with the same Busy retry.
  void read(const std::function<void()>& fn, std::string_view context, bool in_transaction = true);
  /// Resets every cached statement (a stepped, un-reset statement would pin its read snapshot).
  void reset_all();
  /// Resets statements and rolls back an open transaction, ignoring errors.
  void rollback();
  /// `e` re-based on this file, with `context` in front unless it is there already.
  SessionError with_context(const SessionError& e, std::string_view context) const;

  std::chrono::milliseconds retry_for{120000};

 private:
  sqlite3* h_ = nullptr;
  std::string path_;
  std::unordered_map<std::string, std::unique_ptr<Stmt>> cache_;
};

/// "2025-01-31T12:00:00.123Z" for now (UTC).
std::string now_iso8601();

}  // namespace kvscope::sessions::detail
