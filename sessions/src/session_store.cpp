// SessionStore: the SQLite session database (runs, step metrics, blobs, summaries, notes,
// bookmarks, view state). Sections, in order (search for the name):
//   helpers (anonymous namespace)  run_ctx, param_number, row / blob decoding (status_from, row_from,
//                                  tokens_from, blob_from), require_running, require_run
//   heartbeat                      SessionStore::Impl::heartbeat
//   "---- lifetime"                constructors, path, schema_version, write_blocker, read_only_connection
//                                  (immutable fallback), open_check (quick_check), open, writable
//   "---- writing"                 begin_run, add_step_metrics, add_blob, set_summary, finish_run,
//                                  fail_run, delete_run
//   "---- reading"                 list_runs, load_run, load_blobs, load_blob, load_step_metric,
//                                  find_by_sweep_key
//   "---- notes, bookmarks, view state"  notes, bookmarks, set_view_state / get_view_state,
//                                  integrity_check
//   "---- checking"                detail::run_problems (checksums, decoding, counts), check
#include "kvscope/sessions/session_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "codec.h"
#include "process.h"
#include "schema.h"
#include "store_impl.h"

namespace kvscope::sessions {

using detail::Db;
using detail::Stmt;

static_assert(SessionStore::kApplicationId == detail::kApplicationId);
static_assert(SessionStore::kSchemaVersion == detail::kSchemaVersion);

namespace {

/// A running writer on another host counts as alive while its heartbeat is younger than this.
constexpr double kRemoteHeartbeatSeconds = 15 * 60;

std::string run_ctx(const char* op, int64_t run) { return std::string(op) + "(run " + std::to_string(run) + ")"; }

/// Numeric value of a typed parameter (int / float / bool), nullopt for choice / path.
/// Throws SessionError when the text does not parse as its type.
std::optional<double> param_number(const std::string& file, const PipelineStage& stage, size_t index,
                                   const StageParam& p) {
  auto bad = [&]() -> SessionError {
    return SessionError(file, "pipeline stage " + std::to_string(index) + " (" + stage.policy + "): parameter '" +
                                  p.key + "' = '" + p.value + "' is not a valid " +
                                  std::string(param_type_name(p.type)));
  };
  const char* b = p.value.data();
  const char* e = b + p.value.size();
  switch (p.type) {
    case ParamType::kInt: {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(b, e, v);
      if (ec != std::errc() || end != e) throw bad();
      return static_cast<double>(v);
    }
    case ParamType::kFloat: {
      double v = 0;
      const auto [end, ec] = std::from_chars(b, e, v);
      if (ec != std::errc() || end != e) throw bad();
      return v;
    }
    case ParamType::kBool:
      if (p.value == "true" || p.value == "1" || p.value == "yes" || p.value == "on") return 1.0;
      if (p.value == "false" || p.value == "0" || p.value == "no" || p.value == "off") return 0.0;
      throw bad();
    case ParamType::kChoice:
    case ParamType::kPath:
      return std::nullopt;
  }
  return std::nullopt;
}

/// Columns of a RunRow plus what liveness needs (indices 0..14); load_run appends more.
constexpr const char* kRowCols =
    "id, name, created_at, finished_at, status, model_path, pipeline_spec, budget_unit, budget_value, sweep_key, "
    "error, writer_pid, writer_host, writer_start, (julianday('now') - julianday(heartbeat_at)) * 86400.0";

RunStatus status_from(const Db& db, const std::string& text, int64_t run) {
  const auto s = parse_run_status(text);
  if (!s) throw SessionError(db.path(), "run " + std::to_string(run) + " has unknown status '" + text + "'");
  return *s;
}

RunRow row_from(const Db& db, const Stmt& s) {
  RunRow r;
  r.id = s.col_int(0);
  r.name = s.col_text(1);
  r.created_at = s.col_text(2);
  r.finished_at = s.col_text(3);
  r.status = status_from(db, s.col_text(4), r.id);
  r.model_path = s.col_text(5);
  r.pipeline_spec = s.col_text(6);
  const std::string unit = s.col_text(7);
  const auto u = find_budget_unit(unit);
  if (!u) throw SessionError(db.path(), "run " + std::to_string(r.id) + " has unknown budget unit '" + unit + "'");
  r.budget = {*u, s.col_double(8)};
  r.sweep_key = s.col_opt_text(9);
  r.error = s.col_text(10);
  if (r.status == RunStatus::kRunning) {
    const int64_t pid = s.is_null(11) ? 0 : s.col_int(11);
    const int64_t start = s.is_null(13) ? -1 : s.col_int(13);
    const auto alive = detail::writer_alive(pid, s.col_text(12), start);
    const bool live = alive ? *alive : (!s.is_null(14) && s.col_double(14) < kRemoteHeartbeatSeconds);
    r.incomplete = !live;
  }
  return r;
}

std::vector<int32_t> tokens_from(const Db& db, const std::vector<uint8_t>& bytes, int64_t run, const char* what) {
  auto t = detail::decode_tokens(bytes);
  if (!t) throw SessionError(db.path(), "run " + std::to_string(run) + ": " + what + " is not an int32 array");
  return *t;
}

/// Throws unless `run` exists and is still running (clear messages ahead of the triggers).
void require_running(Db& db, int64_t run) {
  Stmt& s = db.cached("SELECT status FROM runs WHERE id = ?1");
  s.bind(1, run);
  if (!s.step()) throw SessionError(db.path(), "no run " + std::to_string(run));
  const std::string status = s.col_text(0);
  s.reset();
  if (status != "running")
    throw SessionError(db.path(), "run " + std::to_string(run) + " is " + status + " and immutable");
}

void require_run(Db& db, int64_t run) {
  Stmt& s = db.cached("SELECT 1 FROM runs WHERE id = ?1");
  s.bind(1, run);
  const bool found = s.step();
  s.reset();
  if (!found) throw SessionError(db.path(), "no run " + std::to_string(run));
}

/// "blob 'attention' layer 3 head 1" (layer / head left out when -1).
std::string blob_label(const std::string& name, int64_t layer, int64_t head) {
  std::string out = "blob '" + name + "'";
  if (layer >= 0) out += " layer " + std::to_string(layer);
  if (head >= 0) out += " head " + std::to_string(head);
  return out;
}

/// Whether `bytes` match a stored checksum column (NULL: written before checksums, nothing to check).
bool checksum_ok(const Stmt& s, int col, const std::vector<uint8_t>& bytes) {
  return s.is_null(col) || static_cast<uint32_t>(s.col_int(col)) == detail::crc32(bytes);
}

Blob blob_from(const Db& db, const Stmt& s, int64_t run) {
  // columns: id, name, layer, head, dtype, shape, raw_size, data, checksum
  const int64_t id = s.col_int(0);
  auto fail = [&](const std::string& why) {
    return SessionError(
        db.path(), "run " + std::to_string(run) + " blob " + std::to_string(id) + " ('" + s.col_text(1) + "'): " + why);
  };
  auto damaged = [&](const std::string& why) {
    return SessionError(db.path(), blob_label(s.col_text(1), s.col_int(2), s.col_int(3)) + " of run " +
                                       std::to_string(run) + " is damaged (" + why + ")");
  };
  Blob b;
  b.name = s.col_text(1);
  b.layer = s.col_int(2);
  b.head = s.col_int(3);
  const auto dt = parse_dtype(s.col_text(4));
  if (!dt) throw fail("unknown dtype '" + s.col_text(4) + "'");
  b.dtype = *dt;
  const auto shape = detail::parse_shape(s.col_text(5));
  if (!shape) throw fail("bad shape '" + s.col_text(5) + "'");
  b.shape = *shape;
  const size_t expected = static_cast<size_t>(b.numel()) * dtype_size(b.dtype);
  if (!s.is_null(6) && s.col_int(6) != static_cast<int64_t>(expected))
    throw fail("raw_size " + std::to_string(s.col_int(6)) + " does not match shape and dtype (" +
               std::to_string(expected) + ")");
  const std::vector<uint8_t> frame = s.col_blob(7);
  if (!checksum_ok(s, 8, frame)) throw damaged("checksum mismatch");
  std::string error;
  auto data = detail::zstd_decompress(frame, expected, error);
  if (!data) throw damaged(error);
  b.data = std::move(*data);
  return b;
}

}  // namespace

void SessionStore::Impl::heartbeat(int64_t run) {
  const auto now = std::chrono::steady_clock::now();
  auto it = last_heartbeat.find(run);
  if (it != last_heartbeat.end() && now - it->second < kHeartbeatEvery) return;
  db->cached("UPDATE runs SET heartbeat_at = ?1 WHERE id = ?2").bind(1, detail::now_iso8601()).bind(2, run).run();
  last_heartbeat[run] = now;
}

// ---- lifetime -----------------------------------------------------------------------------------

SessionStore::SessionStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SessionStore::SessionStore(SessionStore&&) noexcept = default;
SessionStore& SessionStore::operator=(SessionStore&&) noexcept = default;
SessionStore::~SessionStore() = default;

const std::string& SessionStore::path() const { return impl_->path; }

int SessionStore::schema_version() const {
  int64_t v = 0;
  impl_->db->read([&] { v = impl_->db->query_int("PRAGMA user_version"); }, "reading the schema version");
  return static_cast<int>(v);
}

namespace {

/// Why this process cannot write `path` (and the -wal / -shm files SQLite keeps beside it), or ""
/// when it can. `exists`: whether `path` exists.
std::string write_blocker(const std::string& path, bool exists) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string hint = "; inspect, compare, export, check and the GUI open it read-only";
  if (!exists) {
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return "cannot open: cannot create a session database in directory " + dir + ": " + std::strerror(errno);
    return "";
  }
  if (::access(path.c_str(), W_OK) != 0) return std::string("cannot write: ") + std::strerror(errno) + hint;
  const bool sidecars = ::access((path + "-wal").c_str(), W_OK) == 0 && ::access((path + "-shm").c_str(), W_OK) == 0;
  if (!sidecars && ::access(dir.c_str(), W_OK | X_OK) != 0)
    return "cannot write: its directory " + dir + " is not writable (" + std::strerror(errno) +
           "), and SQLite needs to create its -wal and -shm files there" + hint;
  return "";
}

/// `path` as an SQLite URI ("file:" + percent-encoded path).
std::string file_uri(const std::string& path) {
  std::string out = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || std::strchr("/-_.~", c)) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

/// A read-only connection to `path` that works where the file or its directory is read-only. A WAL
/// database needs its -shm file (created beside it on first use); where that cannot be created
/// and there is no -wal file with unmerged changes, the file alone is the whole database and is
/// opened as immutable (SQLite then takes no locks and writes nothing).
std::unique_ptr<Db> read_only_connection(const std::string& path) {
  auto db = std::make_unique<Db>(path, SQLITE_OPEN_READONLY, path);
  const int rc = sqlite3_exec(db->handle(), "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
  const int primary = rc & 0xff;
  if (primary != SQLITE_READONLY && primary != SQLITE_CANTOPEN) return db;  // errors surface on the first read
  struct stat wal {};
  if (::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0)
    throw SessionError(path,
                       "cannot be read where it is: its -wal file holds changes not yet merged into it, and SQLite "
                       "cannot create its -shm file beside it (" +
                           std::string(sqlite3_errmsg(db->handle())) +
                           "); copy the file and its -wal file to a writable directory and open the copy");
  db = std::make_unique<Db>(file_uri(path) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, path);
  return db;
}

/// The check a database gets before kvscope writes to it: PRAGMA quick_check (the b-trees,
/// their pages and records; O(file size), no index cross-check). "" when it passes.
std::string open_check(Db& db) {
  std::string out;
  db.read(
      [&] {
        out.clear();
        Stmt s(db, "PRAGMA quick_check(5)");
        while (s.step()) {
          const std::string line = s.col_text(0);
          if (line == "ok") continue;
          out += (out.empty() ? "" : "; ") + line;
        }
      },
      "checking the database");
  return out;
}

}  // namespace

SessionStore SessionStore::open(const std::string& path, OpenMode mode) {
  if (path.empty()) throw SessionError("(empty path)", "no session database file given");
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->pid = detail::self_pid();
  impl->start_ticks = detail::process_start_ticks(impl->pid);
  impl->host = detail::local_hostname();

  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw SessionError(path, "is a directory, not a session database");
  if (!exists && mode != OpenMode::kReadWrite) throw SessionError(path, "no such session database");
  if (mode == OpenMode::kView && st.st_size == 0) {
    // A WAL database may still be all in its -wal file; anything else is an empty file.
    struct stat wal {};
    if (::stat((path + "-wal").c_str(), &wal) != 0 || wal.st_size == 0)
      throw SessionError(path,
                         "is an empty file (0 bytes), not a session database; it is left as it is (kvscope-cli "
                         "run --db FILE starts a new database in it)");
  }
  // Writing needs the file and its directory (for -wal / -shm) writable: refuse up front, one line.
  if (mode != OpenMode::kReadOnly) {
    if (std::string why = write_blocker(path, exists); !why.empty()) {
      if (mode == OpenMode::kReadWrite) throw SessionError(path, why);
      impl->read_only_reason = why;  // kView: look at it read-only
    }
  }

  // Refuse a foreign or newer database from its file header alone when no -wal file exists (then
  // the main file is the whole database): even a read-only SQLite connection to a WAL database
  // creates -wal and -shm files beside it, and a refused file should be left exactly as found.
  if (exists && !S_ISDIR(st.st_mode) && ::access((path + "-wal").c_str(), F_OK) != 0) {
    unsigned char raw[100] = {};
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const size_t n = std::fread(raw, 1, sizeof raw, f);
      std::fclose(f);
      auto be32 = [&](size_t at) {
        return (uint32_t(raw[at]) << 24) | (uint32_t(raw[at + 1]) << 16) | (uint32_t(raw[at + 2]) << 8) | raw[at + 3];
      };
      if (n == sizeof raw && std::memcmp(raw, "SQLite format 3", 16) == 0) {
        detail::Header h;
        h.user_version = static_cast<int32_t>(be32(60));
        h.application_id = static_cast<int32_t>(be32(68));
        // More than one page (the in-header size is valid when offset 92 matches the change
        // counter at 24): tables beyond an empty schema.
        h.n_schema_objects = be32(92) == be32(24) && be32(28) > 1 ? 1 : 0;
        if (h.application_id != 0 || h.user_version != 0 || h.n_schema_objects != 0) detail::check_header(path, h);
      }
    }
  }

  detail::Header header;
  // A read-only open always looks through SQLite: a WAL database may hold everything in its -wal
  // file while the main file is still empty.
  if (exists && (st.st_size > 0 || mode != OpenMode::kReadWrite)) {
    // Look with a read-only connection first: a file we refuse is never written to.
    auto probe = read_only_connection(path);
    probe->read([&] { header = detail::read_header(*probe); }, "reading the database header");
    detail::check_header(*probe, header);
    if (mode != OpenMode::kReadWrite && header.user_version == 0)
      throw SessionError(path, "empty database: no session schema yet");
    // Before writing: a structurally damaged file is refused (kView looks at it read-only).
    if (mode != OpenMode::kReadOnly && impl->read_only_reason.empty()) {
      if (std::string damage = open_check(*probe); !damage.empty()) {
        const std::string why = "is damaged (PRAGMA quick_check: " + damage +
                                "); refusing to write to it. `kvscope-cli check " + path +
                                "` reports what is damaged; reading commands still read what is intact";
        if (mode == OpenMode::kReadWrite) throw SessionError(path, why);
        impl->read_only_reason = why;
      }
    }
    if (mode == OpenMode::kReadOnly || !impl->read_only_reason.empty()) {
      impl->read_only = true;
      if (header.user_version == kSchemaVersion) {
        probe->exec("PRAGMA query_only = ON");
        impl->db = std::move(probe);
      } else {
        // Older schema: migrate a private in-memory copy, leaving the file as it is.
        auto mem =
            std::make_unique<Db>(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY, path);
        sqlite3_backup* b = sqlite3_backup_init(mem->handle(), "main", probe->handle(), "main");
        if (!b) mem->fail(sqlite3_errcode(mem->handle()), "copying the database to migrate it in memory");
        int rc;
        while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(10);
        sqlite3_backup_finish(b);
        if (rc != SQLITE_DONE) probe->fail(rc, "copying the database to migrate it in memory");
        mem->exec("PRAGMA foreign_keys = ON");
        detail::migrate(*mem);
        impl->db = std::move(mem);
      }
      return SessionStore(std::move(impl));
    }
  }

  impl->db = std::make_unique<Db>(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, path);
  Db& db = *impl->db;
  db.read(
      [&] {
        Stmt s(db, "PRAGMA journal_mode = WAL");  // not inside a transaction: it cannot change there
        const std::string got = s.step() ? s.col_text(0) : "";
        if (got != "wal") throw SessionError(path, "cannot switch to WAL journal mode (got '" + got + "')");
      },
      "enabling WAL", /*in_transaction=*/false);
  db.exec("PRAGMA synchronous = NORMAL");
  db.exec("PRAGMA foreign_keys = ON");
  detail::migrate(db);
  return SessionStore(std::move(impl));
}

bool SessionStore::writable() const { return !impl_->read_only; }

const std::string& SessionStore::read_only_reason() const { return impl_->read_only_reason; }

// ---- writing ------------------------------------------------------------------------------------

int64_t SessionStore::begin_run(const RunInfo& info) {
  Impl& m = *impl_;
  if (m.read_only) throw SessionError(m.path, "begin_run: opened read-only");
  // Validate and type the parameters before taking the write lock.
  std::vector<std::vector<std::optional<double>>> numbers;
  for (size_t i = 0; i < info.pipeline.stages.size(); ++i) {
    const PipelineStage& st = info.pipeline.stages[i];
    auto& row = numbers.emplace_back();
    for (const StageParam& p : st.params) row.push_back(param_number(m.path, st, i, p));
  }
  const std::vector<uint8_t> prompt_tokens = detail::encode_tokens(info.prompt.tokens);
  const std::string hostname = info.env.hostname.empty() ? m.host : info.env.hostname;
  int64_t id = 0;
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        if (info.sweep_key) {
          Stmt& k = db.cached("SELECT id FROM runs WHERE sweep_key = ?1 AND status = 'complete'");
          k.bind(1, *info.sweep_key);
          if (k.step())
            throw SessionError(m.path, "sweep key '" + *info.sweep_key + "' already has complete run " +
                                           std::to_string(k.col_int(0)) + " (sweeps skip finished keys)");
        }
        const std::string now = detail::now_iso8601();
        Stmt& s = db.cached(
            "INSERT INTO runs (name, status, created_at, model_path, model_config_hash, model_type, n_layer, n_head, "
            "n_head_kv, head_dim, dtype, device, pipeline_spec, budget_unit, budget_value, prompt_text, prompt_tokens, "
            "n_prompt_tokens, kvscope_version, torch_version, device_name, hostname, sweep_key, writer_pid, "
            "writer_host, "
            "writer_start, heartbeat_at, prompt_tokens_checksum, prompt_chat_template, prompt_chat_messages, "
            "model_layer_windows) VALUES "
            "(?1, 'running', ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
            "?9, ?10, ?11, ?12, ?13, "
            "?14, "
            "?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?2, ?26, ?27, ?28, ?29)");
        s.bind(1, info.name).bind(2, now).bind(3, info.model.path).bind(4, info.model.config_hash);
        s.bind(5, info.model.model_type).bind(6, info.model.n_layer).bind(7, info.model.n_head);
        s.bind(8, info.model.n_head_kv)
            .bind(9, info.model.head_dim)
            .bind(10, info.model.dtype)
            .bind(11, info.model.device);
        s.bind(12, info.pipeline.spec).bind(13, budget_unit_name(info.budget.unit)).bind(14, info.budget.value);
        s.bind(15, info.prompt.text).bind_blob(16, prompt_tokens.data(), prompt_tokens.size());
        s.bind(17, static_cast<int64_t>(info.prompt.tokens.size())).bind(18, info.env.kvscope_version);
        s.bind(19, info.env.torch_version).bind(20, info.env.device_name).bind(21, hostname).bind(22, info.sweep_key);
        s.bind(23, m.pid).bind(24, m.host);
        if (m.start_ticks >= 0) s.bind(25, m.start_ticks);
        s.bind(26, static_cast<int64_t>(detail::crc32(prompt_tokens)));
        // NULL for a prompt that is not a chat prompt (as in runs written before v5).
        const auto or_null = [](const std::string& v) { return v.empty() ? std::nullopt : std::optional(v); };
        s.bind(27, or_null(info.prompt.chat_template)).bind(28, or_null(info.prompt.chat_messages));
        s.bind(29, or_null(detail::format_int_list(info.model.layer_window)));
        s.run();
        id = sqlite3_last_insert_rowid(db.handle());
        m.last_heartbeat[id] = std::chrono::steady_clock::now();
        for (size_t i = 0; i < info.pipeline.stages.size(); ++i) {
          const PipelineStage& st = info.pipeline.stages[i];
          db.cached("INSERT INTO pipeline_stages (run_id, stage_index, stage, policy) VALUES (?1, ?2, ?3, ?4)")
              .bind(1, id)
              .bind(2, static_cast<int64_t>(i))
              .bind(3, st.stage)
              .bind(4, st.policy)
              .run();
          for (size_t j = 0; j < st.params.size(); ++j) {
            const StageParam& p = st.params[j];
            Stmt& q = db.cached(
                "INSERT INTO pipeline_params (run_id, stage_index, param_index, key, type, value, num) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
            q.bind(1, id).bind(2, static_cast<int64_t>(i)).bind(3, static_cast<int64_t>(j)).bind(4, p.key);
            q.bind(5, param_type_name(p.type)).bind(6, p.value);
            if (numbers[i][j]) q.bind(7, *numbers[i][j]);
            q.run();
          }
        }
      },
      "begin_run");
  return id;
}

void SessionStore::add_step_metrics(int64_t run, int64_t step,
                                    const std::vector<std::pair<std::string, double>>& metrics) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("add_step_metrics", run) + " step " + std::to_string(step);
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        require_running(db, run);
        for (const auto& [name, value] : metrics)
          db.cached("INSERT INTO step_metrics (run_id, name, step, value) VALUES (?1, ?2, ?3, ?4)")
              .bind(1, run)
              .bind(2, name)
              .bind(3, step)
              .bind(4, value)
              .run();
        m.heartbeat(run);
      },
      ctx);
}

void SessionStore::add_step_metrics(int64_t run, const std::vector<StepMetric>& rows) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("add_step_metrics", run);
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        require_running(db, run);
        for (const StepMetric& r : rows) {
          Stmt& s = db.cached("INSERT INTO step_metrics (run_id, name, step, value) VALUES (?1, ?2, ?3, ?4)");
          s.bind(1, run).bind(2, r.name).bind(3, r.step).bind(4, r.value);
          try {
            s.run();
          } catch (const SessionError& e) {
            throw db.with_context(e, "step " + std::to_string(r.step) + " '" + r.name + "'");
          }
        }
        m.heartbeat(run);
      },
      ctx);
}

namespace {

/// What add_blob refuses: returns the blob's error context; throws SessionError.
std::string check_blob(const std::string& path, const std::string& run_ctx, bool read_only, const Blob& blob) {
  const std::string ctx =
      run_ctx + " '" + blob.name + "' layer " + std::to_string(blob.layer) + " head " + std::to_string(blob.head);
  if (read_only) throw SessionError(path, ctx + ": opened read-only");
  if (blob.name.empty()) throw SessionError(path, ctx + ": empty blob name");
  if (blob.layer < -1 || blob.head < -1) throw SessionError(path, ctx + ": layer and head must be >= -1");
  for (int64_t d : blob.shape)
    if (d < 0) throw SessionError(path, ctx + ": negative dimension in shape " + detail::format_shape(blob.shape));
  const size_t expected = static_cast<size_t>(blob.numel()) * dtype_size(blob.dtype);
  if (blob.data.size() != expected)
    throw SessionError(path, ctx + ": " + std::to_string(blob.data.size()) + " bytes do not fit shape " +
                                 detail::format_shape(blob.shape) + " of " + std::string(to_string(blob.dtype)) + " (" +
                                 std::to_string(expected) + " bytes)");
  return ctx;
}

/// A blob as stored: its zstd frame and the frame's CRC-32.
struct Frame {
  std::vector<uint8_t> bytes;
  uint32_t checksum = 0;
};

Frame frame_of(const Blob& blob) {
  Frame f{detail::zstd_compress(blob.data.data(), blob.data.size()), 0};
  f.checksum = detail::crc32(f.bytes);
  return f;
}

void insert_blob(Db& db, int64_t run, const Blob& blob, const Frame& f) {
  db.cached(
        "INSERT INTO blobs (run_id, name, layer, head, dtype, shape, codec, data, raw_size, checksum) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'zstd', ?7, ?8, ?9)")
      .bind(1, run)
      .bind(2, blob.name)
      .bind(3, blob.layer)
      .bind(4, blob.head)
      .bind(5, to_string(blob.dtype))
      .bind(6, detail::format_shape(blob.shape))
      .bind_blob(7, f.bytes.data(), f.bytes.size())
      .bind(8, static_cast<int64_t>(blob.data.size()))
      .bind(9, static_cast<int64_t>(f.checksum))
      .run();
}

}  // namespace

void SessionStore::add_blob(int64_t run, const Blob& blob) {
  Impl& m = *impl_;
  const std::string ctx = check_blob(m.path, run_ctx("add_blob", run), m.read_only, blob);
  const Frame f = frame_of(blob);  // compressed outside the write lock: transactions stay short
  m.db->write_tx(
      [&] {
        require_running(*m.db, run);
        insert_blob(*m.db, run, blob, f);
        m.heartbeat(run);
      },
      ctx);
}

void SessionStore::add_blobs(int64_t run, std::span<const Blob> blobs, unsigned threads) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("add_blobs", run);
  std::set<std::tuple<std::string_view, int64_t, int64_t>> keys;
  for (const Blob& b : blobs) {
    const std::string blob_ctx = check_blob(m.path, ctx, m.read_only, b);
    if (!keys.emplace(b.name, b.layer, b.head).second) throw SessionError(m.path, blob_ctx + ": given twice");
  }
  if (blobs.empty()) return;
  // Compression dominates (tens of MB of kept positions per run): spread it over threads, each
  // taking every n-th blob, outside the write lock.
  std::vector<Frame> frames(blobs.size());
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  const size_t n = std::min<size_t>(threads, blobs.size());
  std::vector<std::exception_ptr> errors(n);
  auto compress = [&](size_t t) {  // worker t: blobs t, t + n, ...
    try {
      for (size_t i = t; i < blobs.size(); i += n) frames[i] = frame_of(blobs[i]);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> pool;
    for (size_t t = 1; t < n; ++t) pool.emplace_back(compress, t);
    compress(0);
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  m.db->write_tx(
      [&] {
        require_running(*m.db, run);
        for (size_t i = 0; i < blobs.size(); ++i) insert_blob(*m.db, run, blobs[i], frames[i]);
        m.heartbeat(run);
      },
      ctx + " (" + std::to_string(blobs.size()) + " blobs)");
}

void SessionStore::set_summary(int64_t run, const std::string& name, double value) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("set_summary", run) + " '" + name + "'";
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        require_running(db, run);
        db.cached(
              "INSERT INTO summary_metrics (run_id, name, value) VALUES (?1, ?2, ?3) "
              "ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value")
            .bind(1, run)
            .bind(2, name)
            .bind(3, value)
            .run();
        m.heartbeat(run);
      },
      ctx);
}

void SessionStore::finish_run(int64_t run, const RunOutputs& outputs) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("finish_run", run);
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  const std::vector<uint8_t> tokens = detail::encode_tokens(outputs.tokens);
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        require_running(db, run);
        Stmt& k = db.cached(
            "SELECT other.id, other.sweep_key FROM runs AS this JOIN runs AS other ON other.sweep_key = this.sweep_key "
            "WHERE this.id = ?1 AND other.status = 'complete' AND other.id <> this.id");
        k.bind(1, run);
        if (k.step())
          throw SessionError(m.path, "sweep key '" + k.col_text(1) + "' was completed first by run " +
                                         std::to_string(k.col_int(0)) + "; fail_run this one");
        k.reset();
        const std::string now = detail::now_iso8601();
        db.cached(
              "UPDATE runs SET status = 'complete', finished_at = ?1, heartbeat_at = ?1, output_text = ?2, "
              "output_tokens = ?3, n_output_tokens = ?4, output_tokens_checksum = ?6 WHERE id = ?5")
            .bind(1, now)
            .bind(2, outputs.text)
            .bind_blob(3, tokens.data(), tokens.size())
            .bind(4, static_cast<int64_t>(outputs.tokens.size()))
            .bind(5, run)
            .bind(6, static_cast<int64_t>(detail::crc32(tokens)))
            .run();
      },
      ctx);
  m.last_heartbeat.erase(run);
}

void SessionStore::fail_run(int64_t run, const std::string& message) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("fail_run", run);
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        require_running(db, run);
        const std::string now = detail::now_iso8601();
        db.cached("UPDATE runs SET status = 'failed', error = ?1, finished_at = ?2, heartbeat_at = ?2 WHERE id = ?3")
            .bind(1, message)
            .bind(2, now)
            .bind(3, run)
            .run();
      },
      ctx);
  m.last_heartbeat.erase(run);
}

void SessionStore::delete_run(int64_t run) {
  Impl& m = *impl_;
  const std::string ctx = run_ctx("delete_run", run);
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        Db& db = *m.db;
        require_run(db, run);
        db.cached("DELETE FROM runs WHERE id = ?1").bind(1, run).run();
      },
      ctx);
}

// ---- reading ------------------------------------------------------------------------------------

std::vector<RunRow> SessionStore::list_runs() const {
  Db& db = *impl_->db;
  std::vector<RunRow> rows;
  db.read(
      [&] {
        rows.clear();
        std::map<int64_t, size_t> index;
        Stmt& s = db.cached(std::string("SELECT ") + kRowCols + ", prompt_chat_template FROM runs ORDER BY id");
        while (s.step()) {
          index[s.col_int(0)] = rows.size();
          rows.push_back(row_from(db, s));
          rows.back().chat_template = s.col_text(15);
        }
        Stmt& sm = db.cached("SELECT run_id, name, value FROM summary_metrics ORDER BY run_id, name");
        while (sm.step()) {
          const auto it = index.find(sm.col_int(0));
          if (it != index.end()) rows[it->second].summary[sm.col_text(1)] = sm.col_double(2);
        }
      },
      "list_runs");
  return rows;
}

RunRecord SessionStore::load_run(int64_t run) const {
  Db& db = *impl_->db;
  RunRecord r;
  db.read(
      [&] {
        r = RunRecord();
        Stmt& s =
            db.cached(std::string("SELECT ") + kRowCols +
                      ", model_config_hash, model_type, n_layer, n_head, n_head_kv, head_dim, dtype, device, "
                      "prompt_text, prompt_tokens, output_text, output_tokens, kvscope_version, torch_version, "
                      "device_name, hostname, prompt_tokens_checksum, output_tokens_checksum, prompt_chat_template, "
                      "prompt_chat_messages, model_layer_windows FROM runs WHERE id = ?1");
        s.bind(1, run);
        if (!s.step()) throw SessionError(db.path(), "no run " + std::to_string(run));
        r.row = row_from(db, s);
        r.writer_pid = s.is_null(11) ? 0 : s.col_int(11);
        r.writer_host = s.col_text(12);
        RunInfo& i = r.info;
        i.name = r.row.name;
        i.model = {r.row.model_path, s.col_text(15), s.col_text(16), s.col_int(17), s.col_int(18),
                   s.col_int(19),    s.col_int(20),  s.col_text(21), s.col_text(22)};
        const auto windows = detail::parse_int_list(s.col_text(35));
        if (!windows)
          throw SessionError(db.path(), "model_layer_windows of run " + std::to_string(run) + " is malformed ('" +
                                            s.col_text(35) + "')");
        i.model.layer_window = *windows;
        i.pipeline.spec = r.row.pipeline_spec;
        i.budget = r.row.budget;
        i.prompt.text = s.col_text(23);
        const std::vector<uint8_t> prompt_tokens = s.col_blob(24), output_tokens = s.col_blob(26);
        if (!checksum_ok(s, 31, prompt_tokens))
          throw SessionError(db.path(),
                             "prompt_tokens of run " + std::to_string(run) + " are damaged (checksum mismatch)");
        if (!checksum_ok(s, 32, output_tokens))
          throw SessionError(db.path(),
                             "output_tokens of run " + std::to_string(run) + " are damaged (checksum mismatch)");
        i.prompt.tokens = tokens_from(db, prompt_tokens, run, "prompt_tokens");
        i.prompt.chat_template = s.col_text(33);
        i.prompt.chat_messages = s.col_text(34);
        r.row.chat_template = i.prompt.chat_template;
        r.outputs.text = s.col_text(25);
        r.outputs.tokens = tokens_from(db, output_tokens, run, "output_tokens");
        i.env = {s.col_text(27), s.col_text(28), s.col_text(29), s.col_text(30)};
        i.sweep_key = r.row.sweep_key;
        s.reset();

        Stmt& st =
            db.cached("SELECT stage_index, stage, policy FROM pipeline_stages WHERE run_id = ?1 ORDER BY stage_index");
        st.bind(1, run);
        while (st.step()) i.pipeline.stages.push_back({st.col_text(1), st.col_text(2), {}});
        Stmt& pp = db.cached(
            "SELECT stage_index, key, type, value FROM pipeline_params WHERE run_id = ?1 ORDER BY stage_index, "
            "param_index");
        pp.bind(1, run);
        while (pp.step()) {
          const int64_t si = pp.col_int(0);
          const auto type = parse_param_type(pp.col_text(2));
          if (si < 0 || si >= static_cast<int64_t>(i.pipeline.stages.size()) || !type)
            throw SessionError(db.path(),
                               "run " + std::to_string(run) + ": bad pipeline parameter row '" + pp.col_text(1) + "'");
          i.pipeline.stages[static_cast<size_t>(si)].params.push_back({pp.col_text(1), *type, pp.col_text(3)});
        }

        Stmt& sm = db.cached("SELECT step, name, value FROM step_metrics WHERE run_id = ?1 ORDER BY step, name");
        sm.bind(1, run);
        while (sm.step()) r.step_metrics.push_back({sm.col_int(0), sm.col_text(1), sm.col_double(2)});

        Stmt& su = db.cached("SELECT name, value FROM summary_metrics WHERE run_id = ?1 ORDER BY name");
        su.bind(1, run);
        while (su.step()) r.row.summary[su.col_text(0)] = su.col_double(1);

        Stmt& b = db.cached(
            "SELECT id, name, layer, head, dtype, shape, raw_size, length(data) FROM blobs WHERE run_id = ?1 "
            "ORDER BY name, layer, head");
        b.bind(1, run);
        while (b.step()) {
          BlobInfo bi;
          bi.id = b.col_int(0);
          bi.name = b.col_text(1);
          bi.layer = b.col_int(2);
          bi.head = b.col_int(3);
          const auto dt = parse_dtype(b.col_text(4));
          const auto shape = detail::parse_shape(b.col_text(5));
          if (!dt || !shape)
            throw SessionError(db.path(), "run " + std::to_string(run) + " blob " + std::to_string(bi.id) +
                                              ": bad dtype '" + b.col_text(4) + "' or shape '" + b.col_text(5) + "'");
          bi.dtype = *dt;
          bi.shape = *shape;
          bi.raw_bytes = b.col_int(6);
          bi.stored_bytes = b.col_int(7);
          r.blobs.push_back(std::move(bi));
        }
      },
      "load_run(" + std::to_string(run) + ")");
  r.notes = list_notes(run);
  r.bookmarks = list_bookmarks(run);
  return r;
}

std::vector<Blob> SessionStore::load_blobs(int64_t run, const std::string& name) const {
  Db& db = *impl_->db;
  std::vector<Blob> out;
  db.read(
      [&] {
        out.clear();
        Stmt& s = db.cached(
            "SELECT id, name, layer, head, dtype, shape, raw_size, data, checksum FROM blobs WHERE run_id = ?1 AND "
            "name = ?2 "
            "ORDER BY layer, head");
        s.bind(1, run).bind(2, name);
        while (s.step()) out.push_back(blob_from(db, s, run));
      },
      run_ctx("load_blobs", run) + " '" + name + "'");
  return out;
}

std::optional<Blob> SessionStore::load_blob(int64_t run, const std::string& name, int64_t layer, int64_t head) const {
  Db& db = *impl_->db;
  std::optional<Blob> out;
  db.read(
      [&] {
        out.reset();
        Stmt& s = db.cached(
            "SELECT id, name, layer, head, dtype, shape, raw_size, data, checksum FROM blobs WHERE run_id = ?1 AND "
            "name = ?2 "
            "AND layer = ?3 AND head = ?4");
        s.bind(1, run).bind(2, name).bind(3, layer).bind(4, head);
        if (s.step()) out = blob_from(db, s, run);
      },
      run_ctx("load_blob", run) + " '" + name + "'");
  return out;
}

std::vector<StepMetric> SessionStore::load_step_metric(int64_t run, const std::string& name) const {
  Db& db = *impl_->db;
  std::vector<StepMetric> out;
  db.read(
      [&] {
        out.clear();
        Stmt& s = db.cached("SELECT step, value FROM step_metrics WHERE run_id = ?1 AND name = ?2 ORDER BY step");
        s.bind(1, run).bind(2, name);
        while (s.step()) out.push_back({s.col_int(0), name, s.col_double(1)});
      },
      run_ctx("load_step_metric", run));
  return out;
}

std::optional<int64_t> SessionStore::find_by_sweep_key(const std::string& key) const {
  Db& db = *impl_->db;
  std::optional<int64_t> out;
  db.read(
      [&] {
        out.reset();
        Stmt& s = db.cached("SELECT id FROM runs WHERE sweep_key = ?1 AND status = 'complete'");
        s.bind(1, key);
        if (s.step()) out = s.col_int(0);
      },
      "find_by_sweep_key('" + key + "')");
  return out;
}

// ---- notes, bookmarks, view state ---------------------------------------------------------------

int64_t SessionStore::add_note(int64_t run, const std::string& text) {
  Impl& m = *impl_;
  if (m.read_only) throw SessionError(m.path, run_ctx("add_note", run) + ": opened read-only");
  int64_t id = 0;
  m.db->write_tx(
      [&] {
        require_run(*m.db, run);
        const std::string now = detail::now_iso8601();
        m.db->cached("INSERT INTO notes (run_id, text, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)")
            .bind(1, run)
            .bind(2, text)
            .bind(3, now)
            .run();
        id = sqlite3_last_insert_rowid(m.db->handle());
      },
      run_ctx("add_note", run));
  return id;
}

void SessionStore::update_note(int64_t note_id, const std::string& text) {
  Impl& m = *impl_;
  const std::string ctx = "update_note(" + std::to_string(note_id) + ")";
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        m.db->cached("UPDATE notes SET text = ?1, updated_at = ?2 WHERE id = ?3")
            .bind(1, text)
            .bind(2, detail::now_iso8601())
            .bind(3, note_id)
            .run();
        if (sqlite3_changes(m.db->handle()) == 0) throw SessionError(m.path, "no note " + std::to_string(note_id));
      },
      ctx);
}

void SessionStore::delete_note(int64_t note_id) {
  Impl& m = *impl_;
  const std::string ctx = "delete_note(" + std::to_string(note_id) + ")";
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        m.db->cached("DELETE FROM notes WHERE id = ?1").bind(1, note_id).run();
        if (sqlite3_changes(m.db->handle()) == 0) throw SessionError(m.path, "no note " + std::to_string(note_id));
      },
      ctx);
}

std::vector<Note> SessionStore::list_notes(std::optional<int64_t> run) const {
  Db& db = *impl_->db;
  std::vector<Note> out;
  db.read(
      [&] {
        out.clear();
        Stmt& s = db.cached(
            "SELECT id, run_id, text, created_at, updated_at FROM notes WHERE ?1 IS NULL OR run_id = ?1 ORDER BY id");
        if (run) s.bind(1, *run);
        while (s.step()) out.push_back({s.col_int(0), s.col_int(1), s.col_text(2), s.col_text(3), s.col_text(4)});
      },
      "list_notes");
  return out;
}

int64_t SessionStore::add_bookmark(const Bookmark& bm) {
  Impl& m = *impl_;
  if (m.read_only) throw SessionError(m.path, run_ctx("add_bookmark", bm.run_id) + ": opened read-only");
  int64_t id = 0;
  m.db->write_tx(
      [&] {
        require_run(*m.db, bm.run_id);
        m.db->cached(
                "INSERT INTO bookmarks (run_id, label, step, layer, head, token, created_at) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
            .bind(1, bm.run_id)
            .bind(2, bm.label)
            .bind(3, bm.step)
            .bind(4, bm.layer)
            .bind(5, bm.head)
            .bind(6, bm.token)
            .bind(7, detail::now_iso8601())
            .run();
        id = sqlite3_last_insert_rowid(m.db->handle());
      },
      run_ctx("add_bookmark", bm.run_id));
  return id;
}

void SessionStore::delete_bookmark(int64_t bookmark_id) {
  Impl& m = *impl_;
  const std::string ctx = "delete_bookmark(" + std::to_string(bookmark_id) + ")";
  if (m.read_only) throw SessionError(m.path, ctx + ": opened read-only");
  m.db->write_tx(
      [&] {
        m.db->cached("DELETE FROM bookmarks WHERE id = ?1").bind(1, bookmark_id).run();
        if (sqlite3_changes(m.db->handle()) == 0)
          throw SessionError(m.path, "no bookmark " + std::to_string(bookmark_id));
      },
      ctx);
}

std::vector<Bookmark> SessionStore::list_bookmarks(std::optional<int64_t> run) const {
  Db& db = *impl_->db;
  std::vector<Bookmark> out;
  db.read(
      [&] {
        out.clear();
        Stmt& s = db.cached(
            "SELECT id, run_id, label, step, layer, head, token, created_at FROM bookmarks "
            "WHERE ?1 IS NULL OR run_id = ?1 ORDER BY id");
        if (run) s.bind(1, *run);
        while (s.step())
          out.push_back({s.col_int(0), s.col_int(1), s.col_text(2), s.col_int(3), s.col_int(4), s.col_int(5),
                         s.col_int(6), s.col_text(7)});
      },
      "list_bookmarks");
  return out;
}

void SessionStore::set_view_state(const std::string& key, const std::string& value) {
  Impl& m = *impl_;
  if (m.read_only) throw SessionError(m.path, "set_view_state('" + key + "'): opened read-only");
  m.db->write_tx(
      [&] {
        m.db->cached(
                "INSERT INTO view_state (key, value, updated_at) VALUES (?1, ?2, ?3) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at")
            .bind(1, key)
            .bind(2, value)
            .bind(3, detail::now_iso8601())
            .run();
      },
      "set_view_state('" + key + "')");
}

std::optional<std::string> SessionStore::get_view_state(const std::string& key) const {
  Db& db = *impl_->db;
  std::optional<std::string> out;
  db.read(
      [&] {
        out.reset();
        Stmt& s = db.cached("SELECT value FROM view_state WHERE key = ?1");
        s.bind(1, key);
        if (s.step()) out = s.col_text(0);
      },
      "get_view_state('" + key + "')");
  return out;
}

std::string SessionStore::integrity_check() const {
  Db& db = *impl_->db;
  std::string out;
  db.read(
      [&] {
        out.clear();
        Stmt s(db, "PRAGMA integrity_check");
        std::string ic;
        while (s.step()) {
          if (!ic.empty()) ic += '\n';
          ic += s.col_text(0);
        }
        if (ic != "ok") out = ic;
        Stmt fk(db, "PRAGMA foreign_key_check");
        while (fk.step()) {
          if (!out.empty()) out += "\n";
          out += "foreign key: " + fk.col_text(0) + " row " + fk.col_text(1) + " has no parent in " + fk.col_text(2);
        }
      },
      "integrity_check");
  return out.empty() ? "ok" : out;
}

// ---- checking -----------------------------------------------------------------------------------

namespace detail {

void run_problems(Db& db, int64_t run, std::vector<std::string>& out, CheckReport* counts) {
  const std::string r = "run " + std::to_string(run);
  auto strip = [&](const SessionError& e) {
    std::string what = e.what();
    const std::string prefix = db.path() + ": ";
    return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
  };
  {
    Stmt s(db,
           "SELECT status, finished_at, prompt_tokens, n_prompt_tokens, prompt_tokens_checksum, output_tokens, "
           "n_output_tokens, output_tokens_checksum, budget_unit FROM runs WHERE id = ?1");
    s.bind(1, run);
    if (!s.step()) {
      out.push_back(r + " vanished while checking");
      return;
    }
    const auto status = parse_run_status(s.col_text(0));
    if (!status) out.push_back(r + " has unknown status '" + s.col_text(0) + "'");
    if (status && *status != RunStatus::kRunning && s.is_null(1))
      out.push_back(r + " is " + s.col_text(0) + " but has no finished_at");
    if (status == RunStatus::kRunning && !s.is_null(1)) out.push_back(r + " is running but has a finished_at");
    if (!find_budget_unit(s.col_text(8))) out.push_back(r + " has unknown budget unit '" + s.col_text(8) + "'");
    auto tokens = [&](int data, int count, int sum, const char* what) {
      if (s.is_null(data)) return;
      const std::vector<uint8_t> bytes = s.col_blob(data);
      if (!checksum_ok(s, sum, bytes)) {
        out.push_back(std::string(what) + " of " + r + " are damaged (checksum mismatch)");
        return;
      }
      const auto ids = decode_tokens(bytes);
      if (!ids)
        out.push_back(std::string(what) + " of " + r + " are not an int32 array (" + std::to_string(bytes.size()) +
                      " bytes)");
      else if (s.is_null(count) || s.col_int(count) != static_cast<int64_t>(ids->size()))
        out.push_back(r + ": " + what + " holds " + std::to_string(ids->size()) + " tokens but its count column says " +
                      (s.is_null(count) ? std::string("NULL") : std::to_string(s.col_int(count))));
    };
    tokens(2, 3, 4, "prompt_tokens");
    if (status == RunStatus::kComplete && s.is_null(5)) out.push_back(r + " is complete but has no output_tokens");
    tokens(5, 6, 7, "output_tokens");
  }
  std::vector<int64_t> ids;
  {
    Stmt s(db, "SELECT id FROM blobs WHERE run_id = ?1 ORDER BY name, layer, head");
    s.bind(1, run);
    while (s.step()) ids.push_back(s.col_int(0));
  }
  for (int64_t id : ids) {
    Stmt s(db, "SELECT id, name, layer, head, dtype, shape, raw_size, data, checksum FROM blobs WHERE id = ?1");
    s.bind(1, id);
    if (!s.step()) continue;
    if (counts) ++counts->blobs;
    try {
      blob_from(db, s, run);
      if (counts) ++(s.is_null(8) ? counts->blobs_unverified : counts->blobs_verified);
    } catch (const SessionError& e) {
      out.push_back(strip(e));
    }
  }
}

}  // namespace detail

CheckReport SessionStore::check() const {
  Db& db = *impl_->db;
  CheckReport rep;
  auto strip = [&](const SessionError& e) {
    std::string what = e.what();
    const std::string prefix = db.path() + ": ";
    return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
  };
  try {
    rep.integrity = integrity_check();
  } catch (const SessionError& e) {
    rep.integrity = strip(e);
  }
  std::vector<int64_t> runs;
  try {
    db.read(
        [&] {
          runs.clear();
          Stmt s(db, "SELECT id FROM runs ORDER BY id");
          while (s.step()) runs.push_back(s.col_int(0));
        },
        "listing runs");
  } catch (const SessionError& e) {
    rep.problems.push_back(strip(e));
  }
  for (int64_t run : runs) {
    ++rep.runs;
    CheckReport counts;
    std::vector<std::string> problems;
    try {
      db.read(
          [&] {
            counts = CheckReport();
            problems.clear();
            detail::run_problems(db, run, problems, &counts);
          },
          "run " + std::to_string(run));
    } catch (const SessionError& e) {
      problems.push_back(strip(e));  // e.g. a page of the run that SQLite cannot read
    }
    rep.blobs += counts.blobs;
    rep.blobs_verified += counts.blobs_verified;
    rep.blobs_unverified += counts.blobs_unverified;
    rep.problems.insert(rep.problems.end(), problems.begin(), problems.end());
  }
  return rep;
}

}  // namespace kvscope::sessions
