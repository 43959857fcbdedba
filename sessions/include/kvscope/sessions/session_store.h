#pragma once
// SessionStore: every run of kvscope in one SQLite file (WAL, foreign keys, application_id
// 'KVSC', user_version migrated on open). Schema, units and example queries: docs/sessions.md.
// A run is written while running (begin_run, add_step_metrics, add_blob, set_summary) and is
// immutable once finished (finish_run / fail_run; enforced by triggers in the database).
// Several processes may write one file at once (busy timeout + retry; short transactions).
// One SessionStore per thread: the object itself is not synchronised.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvscope/sessions/types.h"

namespace kvscope::sessions {

/// How to open a database.
enum class OpenMode {
  kReadWrite,  ///< create the file if missing, migrate an older schema in place
  kReadOnly,   ///< never write the file; an older schema is migrated in a private in-memory copy
  /// An existing database to look at (the GUI): read-write where this process can write the file
  /// and its directory and the file passes the open-time check (notes, bookmarks, view state;
  /// an older schema migrated in place), else read-only (see read_only_reason). Never creates or
  /// initialises a file: a missing, empty (0-byte) or schema-less file is refused.
  kView,
};

class SessionStore {
 public:
  /// application_id of a kvscope session database: 0x4B565343, "KVSC" in ASCII.
  static constexpr int32_t kApplicationId = 0x4B565343;
  /// Schema version this build writes (PRAGMA user_version). History: docs/sessions.md.
  static constexpr int kSchemaVersion = 6;

  /// Opens (kReadWrite: creates) the database at `path` and migrates it to kSchemaVersion, one
  /// transaction per step. Refuses, leaving the file byte-identical, a file that is not SQLite,
  /// a SQLite file with another application_id (or a non-empty one without any), and a schema
  /// newer than kSchemaVersion. Throws SessionError naming `path`.
  /// kReadWrite also refuses, in one line naming the file, a file or directory this process
  /// cannot write, and an existing file that fails PRAGMA quick_check (structural damage).
  /// Read-only opens work in a read-only directory (see docs/sessions.md "Read-only files").
  static SessionStore open(const std::string& path, OpenMode mode = OpenMode::kReadWrite);

  SessionStore(SessionStore&&) noexcept;
  SessionStore& operator=(SessionStore&&) noexcept;
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;
  ~SessionStore();

  /// The file this store reads and writes.
  const std::string& path() const;
  /// PRAGMA user_version of the open database (kSchemaVersion after open).
  int schema_version() const;
  /// Whether this store may write (false for kReadOnly, and for kView where writing is impossible).
  bool writable() const;
  /// Why a kView open is read-only ("" when it is writable or was opened kReadOnly).
  const std::string& read_only_reason() const;

  // ---- writing a run ------------------------------------------------------------------------
  /// Starts a run (status running, created_at now, writer = this process) and returns its id.
  /// Throws if `info.sweep_key` already has a complete run.
  int64_t begin_run(const RunInfo& info);
  /// Records metrics of one decode step (one transaction). Each (step, name) once per run.
  void add_step_metrics(int64_t run, int64_t step, const std::vector<std::pair<std::string, double>>& metrics);
  /// Records many (step, name, value) rows in one transaction (metrics computed after the run).
  void add_step_metrics(int64_t run, const std::vector<StepMetric>& rows);
  /// Stores a captured blob, zstd-compressed. Throws unless data.size() == numel * dtype_size
  /// and (name, layer, head) is new for the run.
  void add_blob(int64_t run, const Blob& blob);
  /// Stores many blobs at once, all or none: each checked as add_blob checks it (and no two with
  /// the same (name, layer, head)), compressed on up to `threads` threads (0: the hardware's
  /// count, at most 8), then written in one transaction. What a run's per-head records use (a
  /// blob per layer and head: hundreds per run).
  void add_blobs(int64_t run, std::span<const Blob> blobs, unsigned threads = 0);
  /// Sets (or overwrites, while running) one summary metric.
  void set_summary(int64_t run, const std::string& name, double value);
  /// Marks the run complete with its outputs; from then on its rows are immutable.
  void finish_run(int64_t run, const RunOutputs& outputs);
  /// Marks the run failed with `message`; from then on its rows are immutable.
  void fail_run(int64_t run, const std::string& message);
  /// Deletes a run that is not complete (failed, or an incomplete one a user gave up on), with
  /// its rows, notes and bookmarks. Complete runs cannot be deleted (the trigger raises).
  void delete_run(int64_t run);

  // ---- reading ------------------------------------------------------------------------------
  /// Every run, oldest first, with its summary metrics; crashed runs have incomplete = true.
  std::vector<RunRow> list_runs() const;
  /// Everything about one run except blob bytes. Throws if there is no such run.
  RunRecord load_run(int64_t run) const;
  /// The decompressed blobs of `run` called `name`, ordered by layer, head.
  std::vector<Blob> load_blobs(int64_t run, const std::string& name) const;
  /// One decompressed blob, or nullopt.
  std::optional<Blob> load_blob(int64_t run, const std::string& name, int64_t layer, int64_t head) const;
  /// Per-step values of one metric of a run, ordered by step.
  std::vector<StepMetric> load_step_metric(int64_t run, const std::string& name) const;
  /// The complete run with this sweep key, if any (running / failed attempts do not count).
  std::optional<int64_t> find_by_sweep_key(const std::string& key) const;

  // ---- notes, bookmarks, view state (editable at any time) ----------------------------------
  int64_t add_note(int64_t run, const std::string& text);
  void update_note(int64_t note_id, const std::string& text);
  void delete_note(int64_t note_id);
  /// Notes of `run` (every run's when nullopt), oldest first.
  std::vector<Note> list_notes(std::optional<int64_t> run = std::nullopt) const;
  /// Adds `bookmark` (its id and created_at are ignored) and returns the new id.
  int64_t add_bookmark(const Bookmark& bookmark);
  void delete_bookmark(int64_t bookmark_id);
  std::vector<Bookmark> list_bookmarks(std::optional<int64_t> run = std::nullopt) const;
  /// GUI view state as key -> text (e.g. JSON), not tied to a run.
  void set_view_state(const std::string& key, const std::string& value);
  std::optional<std::string> get_view_state(const std::string& key) const;

  // ---- maintenance --------------------------------------------------------------------------
  /// PRAGMA integrity_check + foreign_key_check: "ok", or the problems found, one per line.
  std::string integrity_check() const;
  /// The thorough check (`kvscope-cli check`): integrity_check, every blob's stored bytes against
  /// their checksum and decoded, every run's token arrays against theirs, and each run's rows
  /// consistent (status and finish time, token counts, raw sizes). Reports instead of throwing,
  /// unless the file cannot be read at all.
  CheckReport check() const;
  /// Copies every run of `inputs` (rows, blobs, notes, bookmarks) into `out_path` (created or
  /// appended to) in one transaction, with new ids. A run whose sweep key already has a
  /// complete run (in the output or earlier in the inputs) is skipped, as are unfinished or
  /// failed attempts of a key that some input completed. Inputs are opened read-only.
  static MergeReport merge(const std::string& out_path, const std::vector<std::string>& inputs);

 private:
  struct Impl;
  explicit SessionStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope::sessions
