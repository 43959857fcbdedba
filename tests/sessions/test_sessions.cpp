// Tests of kvscope_sessions: schema, migrations from hand-made old layouts, round trips, immutability,
// refusal without modification, crash safety (SIGKILL), concurrent writer processes, merge, sweep keys.
// The raw SQLite API is used here only to build and inspect databases behind the store's back.
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../temp_dir.h"
#include "kvscope/sessions/session_store.h"

using namespace kvscope::sessions;
using kvscope::test::TempDir;

namespace {

// ---- helpers ------------------------------------------------------------------------------------

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// A raw SQLite connection for building or inspecting databases behind the store's back.
class RawDb {
 public:
  explicit RawDb(const std::string& path, int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) {
    if (sqlite3_open_v2(path.c_str(), &h_, flags, nullptr) != SQLITE_OK) throw std::runtime_error("raw open " + path);
    sqlite3_busy_timeout(h_, 5000);
  }
  ~RawDb() { sqlite3_close_v2(h_); }
  /// Runs `sql`; "" on success, else SQLite's message.
  std::string try_exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(h_, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return "";
    std::string msg = err ? err : "error";
    sqlite3_free(err);
    return msg;
  }
  void exec(const std::string& sql) {
    const std::string err = try_exec(sql);
    if (!err.empty()) throw std::runtime_error("raw exec: " + err + " in: " + sql.substr(0, 200));
  }
  /// First column of every row, as text.
  std::vector<std::string> column(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("raw prepare: ") + sqlite3_errmsg(h_));
    std::vector<std::string> out;
    while (sqlite3_step(s) == SQLITE_ROW) {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
      out.push_back(t ? t : "NULL");
    }
    sqlite3_finalize(s);
    return out;
  }
  std::string one(const std::string& sql) {
    auto v = column(sql);
    return v.empty() ? "" : v[0];
  }
  /// Runs `sql` with ?1 bound to `blob`.
  void exec_with_blob(const std::string& sql, const std::vector<uint8_t>& blob) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("raw prepare: ") + sqlite3_errmsg(h_));
    sqlite3_bind_blob(s, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    const int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) throw std::runtime_error(std::string("raw step: ") + sqlite3_errmsg(h_));
  }

 private:
  sqlite3* h_ = nullptr;
};

std::vector<uint8_t> zstd(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 3));
  return out;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

RunInfo sample_info(const std::string& name, std::optional<std::string> key = std::nullopt) {
  RunInfo i;
  i.name = name;
  i.model = {"/models/pycode-16m", "sha256:0123abcd", "llama", 4, 8, 2, 64, "bf16", "cuda:0"};
  i.model.layer_window = {1024, 1024, 0, 1024};  // Gemma-style sliding layers (schema v6)
  i.pipeline.spec = "snapkv:window=64,kernel=5,pool=avg,gqa=mean+adakv:alpha=0.2";
  i.pipeline.stages = {
      {"scoring",
       "snapkv",
       {{"window", ParamType::kInt, "64"},
        {"kernel", ParamType::kInt, "5"},
        {"pool", ParamType::kChoice, "avg"},
        {"gqa", ParamType::kChoice, "mean"}}},
      {"budget",
       "adakv",
       {{"alpha", ParamType::kFloat, "0.2"},
        {"pattern", ParamType::kPath, "/tmp/pattern.json"},
        {"floor", ParamType::kBool, "true"}}},
  };
  i.budget = {BudgetUnit::kStored, 128};
  i.prompt = {"def fib(n):\n    ", {1, 822, 5, 99999, 0, -1}};
  i.env = {"0.1.0", "2.5.1+cu124", "NVIDIA H100 80GB HBM3", "gpu-host-7"};
  i.sweep_key = std::move(key);
  return i;
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const SessionError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A SessionError: ") + e.what();
  }
  return "";
}

// ---- the v1 and v2 layouts, written out by hand ---------------------------------------------------

const char* kV1Layout = R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'complete', 'failed')),
  error TEXT, created_at TEXT NOT NULL, finished_at TEXT,
  model_path TEXT NOT NULL, model_config_hash TEXT NOT NULL, model_type TEXT NOT NULL,
  n_layer INTEGER NOT NULL, n_head INTEGER NOT NULL, n_head_kv INTEGER NOT NULL, head_dim INTEGER NOT NULL,
  dtype TEXT NOT NULL, device TEXT NOT NULL, pipeline_spec TEXT NOT NULL,
  budget_unit TEXT NOT NULL CHECK (budget_unit IN ('compression_ratio', 'stored', 'fetched', 'fraction')),
  budget_value REAL NOT NULL, prompt_text TEXT NOT NULL, prompt_tokens BLOB NOT NULL, n_prompt_tokens INTEGER NOT NULL,
  output_text TEXT, output_tokens BLOB, n_output_tokens INTEGER,
  kvscope_version TEXT NOT NULL, torch_version TEXT NOT NULL, device_name TEXT NOT NULL, hostname TEXT NOT NULL
);
CREATE TABLE pipeline_stages (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, stage_index INTEGER NOT NULL,
  stage TEXT NOT NULL, policy TEXT NOT NULL, PRIMARY KEY (run_id, stage_index)
) WITHOUT ROWID;
CREATE TABLE pipeline_params (
  run_id INTEGER NOT NULL, stage_index INTEGER NOT NULL, param_index INTEGER NOT NULL, key TEXT NOT NULL,
  type TEXT NOT NULL CHECK (type IN ('int', 'float', 'choice', 'bool', 'path')), value TEXT NOT NULL, num REAL,
  PRIMARY KEY (run_id, stage_index, key),
  FOREIGN KEY (run_id, stage_index) REFERENCES pipeline_stages(run_id, stage_index) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE TABLE step_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL, step INTEGER NOT NULL,
  value REAL, PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;
CREATE TABLE summary_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL, value REAL,
  PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE blobs (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL,
  layer INTEGER NOT NULL DEFAULT -1, head INTEGER NOT NULL DEFAULT -1,
  dtype TEXT NOT NULL CHECK (dtype IN ('f32', 'f16', 'bf16', 'i32', 'i64', 'u8')), shape TEXT NOT NULL,
  codec TEXT NOT NULL DEFAULT 'zstd' CHECK (codec IN ('zstd')), data BLOB NOT NULL, UNIQUE (run_id, name, layer, head)
);
CREATE TABLE notes (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, text TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL
);
CREATE INDEX notes_run ON notes(run_id);
CREATE TRIGGER runs_frozen_update BEFORE UPDATE ON runs WHEN OLD.status IN ('complete', 'failed')
BEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;
CREATE TRIGGER runs_frozen_delete BEFORE DELETE ON runs WHEN OLD.status = 'complete'
BEGIN SELECT RAISE(ABORT, 'run is complete and cannot be deleted'); END;
)sql";

std::string v1_triggers() {
  std::string sql;
  for (const std::string t : {"pipeline_stages", "pipeline_params", "step_metrics", "summary_metrics", "blobs"}) {
    const std::string fin = " IN ('complete', 'failed')";
    const std::string o = "(SELECT status FROM runs WHERE id = OLD.run_id)",
                      n = "(SELECT status FROM runs WHERE id = NEW.run_id)";
    const std::string raise = "\nBEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;\n";
    sql += "CREATE TRIGGER " + t + "_frozen_insert BEFORE INSERT ON " + t + " WHEN " + n + fin + raise;
    sql +=
        "CREATE TRIGGER " + t + "_frozen_update BEFORE UPDATE ON " + t + " WHEN " + o + fin + " OR " + n + fin + raise;
    sql += "CREATE TRIGGER " + t + "_frozen_delete BEFORE DELETE ON " + t + " WHEN " + o + " = 'complete'" + raise;
  }
  return sql;
}

const char* kV2Delta = R"sql(
ALTER TABLE runs ADD COLUMN sweep_key TEXT;
ALTER TABLE runs ADD COLUMN writer_pid INTEGER;
ALTER TABLE runs ADD COLUMN writer_host TEXT;
ALTER TABLE runs ADD COLUMN writer_start INTEGER;
ALTER TABLE runs ADD COLUMN heartbeat_at TEXT;
CREATE UNIQUE INDEX runs_sweep_key_complete ON runs(sweep_key) WHERE sweep_key IS NOT NULL AND status = 'complete';
CREATE INDEX runs_sweep_key ON runs(sweep_key) WHERE sweep_key IS NOT NULL;
CREATE TABLE bookmarks (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, label TEXT NOT NULL DEFAULT '',
  step INTEGER NOT NULL DEFAULT -1, layer INTEGER NOT NULL DEFAULT -1, head INTEGER NOT NULL DEFAULT -1,
  token INTEGER NOT NULL DEFAULT -1, created_at TEXT NOT NULL
);
CREATE INDEX bookmarks_run ON bookmarks(run_id);
CREATE TABLE view_state (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at TEXT NOT NULL);
)sql";

const std::vector<float> kOldBlobValues = {0.5f, -1.25f, 3.0f, 0.0f, 7.75f, -0.125f};

/// A v1 database with one complete run (stages, params, steps, summary, a 2x3 f32 blob, a note)
/// and one run left running by a crashed v1 writer.
void make_v1(const std::string& path, bool corrupt_blob_shape = false) {
  RawDb db(path);
  db.exec("BEGIN");
  db.exec(kV1Layout);
  db.exec(v1_triggers());
  db.exec(R"sql(
INSERT INTO runs (id, name, created_at, model_path, model_config_hash, model_type, n_layer, n_head, n_head_kv, head_dim,
  dtype, device, pipeline_spec, budget_unit, budget_value, prompt_text, prompt_tokens, n_prompt_tokens, kvscope_version,
  torch_version, device_name, hostname)
VALUES (1, 'old run', '2024-05-01T10:00:00.000Z', '/m/stories', 'h1', 'llama2c', 5, 8, 4, 8, 'fp32', 'cpu',
  'snapkv:window=8', 'compression_ratio', 0.5, 'Once upon', X'010000002C010000', 2, '0.0.9', '1.13.1', 'cpu', 'old-host'),
  (2, 'crashed', '2024-05-01T11:00:00.000Z', '/m/stories', 'h1', 'llama2c', 5, 8, 4, 8, 'fp32', 'cpu',
  'tova', 'stored', 16, 'Hi', X'01000000', 1, '0.0.9', '1.13.1', 'cpu', 'old-host');
INSERT INTO pipeline_stages VALUES (1, 0, 'scoring', 'snapkv');
INSERT INTO pipeline_params VALUES (1, 0, 0, 'window', 'int', '8', 8.0);
INSERT INTO step_metrics VALUES (1, 'kl', 0, 0.01), (1, 'kl', 1, 0.02), (1, 'top1', 0, 1.0), (2, 'kl', 0, 0.5);
INSERT INTO summary_metrics VALUES (1, 'mean_kl', 0.015);
INSERT INTO notes (run_id, text, created_at, updated_at) VALUES (1, 'keep this', '2024-05-02T00:00:00.000Z', '2024-05-02T00:00:00.000Z');
)sql");
  db.exec_with_blob(
      std::string(
          "INSERT INTO blobs (run_id, name, layer, head, dtype, shape, data) VALUES (1, 'mass', 2, 3, 'f32', '") +
          (corrupt_blob_shape ? "[2,x]" : "[2, 3]") + "', ?1)",
      zstd(bytes_of(kOldBlobValues)));
  db.exec(R"sql(
UPDATE runs SET status = 'complete', finished_at = '2024-05-01T10:05:00.000Z', output_text = ' there',
  output_tokens = X'07000000', n_output_tokens = 1 WHERE id = 1;
PRAGMA application_id = 1263948611;
PRAGMA user_version = 1;
COMMIT;
)sql");
}

/// A structural fingerprint of a schema: every table's columns, every index and trigger (SQL with
/// whitespace collapsed). Two databases with equal fingerprints have the same schema.
std::string schema_fingerprint(const std::string& path) {
  RawDb db(path, SQLITE_OPEN_READONLY);
  std::ostringstream out;
  for (const std::string& t : db.column("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")) {
    out << "table " << t << ":";
    for (const std::string& c :
         db.column("SELECT name || ' ' || type || ' ' || \"notnull\" || ' ' || ifnull(dflt_value, '-') || "
                   "' ' || pk FROM pragma_table_xinfo('" +
                   t + "')"))
      out << " [" << c << "]";
    out << "\n";
  }
  for (const std::string& s : db.column(
           "SELECT type || ' ' || name || ' ' || ifnull(sql, '') FROM sqlite_schema WHERE type IN ('index', 'trigger') "
           "ORDER BY type, name")) {
    std::string collapsed;
    bool space = false;
    for (char ch : s) {
      if (std::isspace(static_cast<unsigned char>(ch))) {
        space = true;
        continue;
      }
      if (space && !collapsed.empty()) collapsed += ' ';
      space = false;
      collapsed += ch;
    }
    out << collapsed << "\n";
  }
  return out.str();
}

}  // namespace

// ---- schema ---------------------------------------------------------------------------------------

TEST(Sessions, CreatesSchemaWithWalForeignKeysAndIds) {
  TempDir dir;
  const std::string path = dir.file("s.db");
  {
    SessionStore s = SessionStore::open(path);
    EXPECT_EQ(s.schema_version(), SessionStore::kSchemaVersion);
    EXPECT_EQ(s.path(), path);
    EXPECT_EQ(s.integrity_check(), "ok");
    EXPECT_TRUE(s.list_runs().empty());
    // Foreign keys are on: a step of a run that does not exist is refused.
    const std::string err = error_of([&] { s.add_step_metrics(42, 0, {{"kl", 0.1}}); });
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find("no run 42"), std::string::npos) << err;
  }
  RawDb raw(path);
  EXPECT_EQ(raw.one("PRAGMA application_id"), std::to_string(0x4B565343));
  EXPECT_EQ(raw.one("PRAGMA user_version"), std::to_string(SessionStore::kSchemaVersion));
  EXPECT_EQ(raw.one("PRAGMA journal_mode"), "wal");
  const auto tables = raw.column("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name");
  EXPECT_EQ(tables, (std::vector<std::string>{"blobs", "bookmarks", "notes", "pipeline_params", "pipeline_stages",
                                              "runs", "step_metrics", "summary_metrics", "view_state"}));
  EXPECT_EQ(raw.one("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'"), "17");
  // Reopening an up-to-date database changes nothing.
  const std::string before = schema_fingerprint(path);
  SessionStore::open(path);
  EXPECT_EQ(schema_fingerprint(path), before);
}

TEST(Sessions, MigratesHandMadeV1ToCurrent) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  make_v1(path);
  const std::string fresh = dir.file("fresh.db");
  SessionStore::open(fresh);

  SessionStore s = SessionStore::open(path);
  EXPECT_EQ(s.schema_version(), SessionStore::kSchemaVersion);
  EXPECT_EQ(s.integrity_check(), "ok");
  EXPECT_EQ(schema_fingerprint(path), schema_fingerprint(fresh));

  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].status, RunStatus::kComplete);
  EXPECT_FALSE(runs[0].incomplete);
  EXPECT_EQ(runs[0].summary.at("mean_kl"), 0.015);
  EXPECT_EQ(runs[1].status, RunStatus::kRunning);
  EXPECT_TRUE(runs[1].incomplete);  // a v1 run still running has no live writer
  EXPECT_FALSE(runs[0].sweep_key.has_value());

  const RunRecord r = s.load_run(1);
  EXPECT_EQ(r.info.model.model_type, "llama2c");
  EXPECT_EQ(r.info.budget.unit, BudgetUnit::kCompressionRatio);
  EXPECT_EQ(r.info.prompt.tokens, (std::vector<int32_t>{1, 300}));
  EXPECT_EQ(r.outputs.tokens, (std::vector<int32_t>{7}));
  EXPECT_EQ(r.outputs.text, " there");
  ASSERT_EQ(r.info.pipeline.stages.size(), 1u);
  EXPECT_EQ(r.info.pipeline.stages[0].params[0], (StageParam{"window", ParamType::kInt, "8"}));
  EXPECT_EQ(r.step_metrics.size(), 3u);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0].text, "keep this");
  ASSERT_EQ(r.blobs.size(), 1u);
  EXPECT_EQ(r.blobs[0].raw_bytes, 24);  // back-filled by the v2 -> v3 step
  EXPECT_EQ(r.blobs[0].shape, (std::vector<int64_t>{2, 3}));
  const auto blob = s.load_blob(1, "mass", 2, 3);
  ASSERT_TRUE(blob);
  EXPECT_EQ(blob->values<float>(), kOldBlobValues);

  // The blob guard dropped for the back-fill is back.
  RawDb raw(path);
  EXPECT_NE(raw.try_exec("UPDATE blobs SET raw_size = 1"), "");
  // New features work on the migrated file.
  const int64_t id = s.begin_run(sample_info("new", "k1"));
  s.finish_run(id, {});
  EXPECT_EQ(s.find_by_sweep_key("k1"), id);
  EXPECT_GT(s.add_bookmark({0, 1, "peak", 3, 2, 1, 17, ""}), 0);
}

TEST(Sessions, MigratesHandMadeV2ToCurrent) {
  TempDir dir;
  const std::string path = dir.file("v2.db");
  make_v1(path);
  {
    RawDb raw(path);
    raw.exec(kV2Delta);
    raw.exec("PRAGMA user_version = 2");
    raw.exec("INSERT INTO view_state VALUES ('layout', '{\"split\":0.3}', '2024-06-01T00:00:00.000Z')");
  }
  const std::string fresh = dir.file("fresh.db");
  SessionStore::open(fresh);
  SessionStore s = SessionStore::open(path);
  EXPECT_EQ(s.schema_version(), SessionStore::kSchemaVersion);
  EXPECT_EQ(schema_fingerprint(path), schema_fingerprint(fresh));
  EXPECT_EQ(s.load_run(1).blobs.at(0).raw_bytes, 24);
  EXPECT_EQ(s.get_view_state("layout"), "{\"split\":0.3}");
  EXPECT_EQ(s.integrity_check(), "ok");
}

/// The v3 and v4 steps by hand on a v2 file: raw_size back-filled (the blob guard lifted for it, as
/// the v3 step does), then the checksum columns.
const char* kV3V4Delta = R"sql(
DROP TRIGGER blobs_frozen_update;
ALTER TABLE blobs ADD COLUMN raw_size INTEGER;
UPDATE blobs SET raw_size = 24;
CREATE TRIGGER blobs_frozen_update BEFORE UPDATE ON blobs WHEN (SELECT status FROM runs WHERE id = OLD.run_id) IN ('complete', 'failed') OR (SELECT status FROM runs WHERE id = NEW.run_id) IN ('complete', 'failed')
BEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;
ALTER TABLE blobs ADD COLUMN checksum INTEGER;
ALTER TABLE runs ADD COLUMN prompt_tokens_checksum INTEGER;
ALTER TABLE runs ADD COLUMN output_tokens_checksum INTEGER;
PRAGMA user_version = 4;
)sql";

// v5 adds the chat prompt's template source and messages: a v4 file (no such columns) opens, read-only
// (migrated in memory, the file untouched) and read-write, its runs read as plain prompts, and a chat
// prompt round-trips on the migrated file.
TEST(Sessions, MigratesHandMadeV4ToCurrentWithChatPromptColumns) {
  TempDir dir;
  const std::string path = dir.file("v4.db");
  make_v1(path);
  {
    RawDb raw(path);
    raw.exec(kV2Delta);
    raw.exec(kV3V4Delta);
    EXPECT_EQ(raw.one("SELECT count(*) FROM pragma_table_info('runs') WHERE name LIKE 'prompt_chat%'"), "0");
  }
  const std::string before = read_bytes(path);
  {
    SessionStore ro = SessionStore::open(path, OpenMode::kReadOnly);
    const RunRecord r = ro.load_run(1);
    EXPECT_EQ(r.info.prompt.text, "Once upon");
    EXPECT_EQ(r.info.prompt.chat_template, "");
    EXPECT_EQ(r.info.prompt.chat_messages, "");
    EXPECT_EQ(ro.list_runs().at(0).chat_template, "");
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(RawDb(path).one("PRAGMA user_version"), "4");

  const std::string fresh = dir.file("fresh.db");
  SessionStore::open(fresh);
  SessionStore s = SessionStore::open(path);
  EXPECT_EQ(s.schema_version(), SessionStore::kSchemaVersion);
  EXPECT_EQ(schema_fingerprint(path), schema_fingerprint(fresh));
  EXPECT_EQ(s.integrity_check(), "ok");
  EXPECT_EQ(s.load_run(1).info.prompt.chat_template, "");
  EXPECT_EQ(RawDb(path).one("SELECT count(*) FROM runs WHERE prompt_chat_template IS NULL"), "2");

  RunInfo chat = sample_info("chat");
  chat.prompt.text = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  chat.prompt.chat_template = "/models/m/chat_template.jinja";
  chat.prompt.chat_messages = R"([{"role":"user","content":"Hi"}])";
  const int64_t id = s.begin_run(chat);
  s.finish_run(id, {});
  EXPECT_EQ(s.load_run(id).info, chat);
  EXPECT_EQ(s.list_runs().back().chat_template, "/models/m/chat_template.jinja");
  // A plain prompt stores NULL, as rows written before v5 hold.
  const int64_t plain = s.begin_run(sample_info("plain"));
  EXPECT_EQ(RawDb(path).one("SELECT count(*) FROM runs WHERE id = " + std::to_string(plain) +
                            " AND prompt_chat_template IS NULL AND prompt_chat_messages IS NULL"),
            "1");
}

TEST(Sessions, FailedMigrationStepRollsBackToThePreviousVersion) {
  TempDir dir;
  const std::string path = dir.file("bad.db");
  make_v1(path, /*corrupt_blob_shape=*/true);
  const std::string err = error_of([&] { SessionStore::open(path); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("v3"), std::string::npos) << err;
  RawDb raw(path);
  // v1 -> v2 committed, v2 -> v3 rolled back as a whole.
  EXPECT_EQ(raw.one("PRAGMA user_version"), "2");
  EXPECT_EQ(raw.one("SELECT count(*) FROM pragma_table_info('blobs') WHERE name = 'raw_size'"), "0");
  EXPECT_EQ(raw.one("SELECT count(*) FROM sqlite_schema WHERE name = 'blobs_frozen_update'"), "1");
}

// ---- round trip -----------------------------------------------------------------------------------

TEST(Sessions, RoundTripsEveryField) {
  TempDir dir;
  const std::string path = dir.file("rt.db");
  SessionStore s = SessionStore::open(path);
  const RunInfo info = sample_info("snapkv 128", "sweep/a");
  const int64_t id = s.begin_run(info);

  s.add_step_metrics(id, 0, {{"kl", 0.125}, {"top1", 1.0}, {"bytes_read", 1.5e9}});
  s.add_step_metrics(id, 1, {{"kl", std::nan("")}, {"top1", 0.0}, {"bytes_read", INFINITY}});
  s.add_step_metrics(id, std::vector<StepMetric>{{2, "kl", 0.25}, {3, "kl", 0.5}});

  std::vector<Blob> blobs;
  blobs.push_back(Blob::of<float>("attn_mass", 0, 1, {2, 3}, {1.f, -2.f, 0.5f, 3.25f, -0.f, 1e-30f}));
  blobs.push_back(Blob::of<int32_t>("kept", 1, -1, {4}, {0, 7, -3, 2147483647}));
  blobs.push_back(Blob::of<int64_t>("positions", -1, -1, {2, 1}, {int64_t(1) << 40, -5}));
  blobs.push_back(Blob::of<uint8_t>("mask", 3, 0, {5}, {0, 1, 255, 7, 1}));
  blobs.push_back(Blob::of<float>("scalar", -1, -1, {}, {42.f}));
  blobs.push_back(Blob::of<float>("empty", 0, 0, {0, 4}, {}));
  Blob h;  // f16: 1, -2, 1/3, smallest subnormal, inf
  h.name = "keys_f16";
  h.layer = 2;
  h.head = 1;
  h.dtype = DType::kF16;
  h.shape = {5};
  h.data = bytes_of(std::vector<uint16_t>{0x3C00, 0xC000, 0x3555, 0x0001, 0x7C00});
  blobs.push_back(h);
  Blob b = h;  // bf16: 1, -3, 0.5
  b.name = "keys_bf16";
  b.dtype = DType::kBF16;
  b.shape = {3};
  b.data = bytes_of(std::vector<uint16_t>{0x3F80, 0xC040, 0x3F00});
  blobs.push_back(b);
  std::vector<float> big(4096);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 17);
  blobs.push_back(Blob::of<float>("big", 5, 6, {64, 64}, big));
  for (const Blob& x : blobs) s.add_blob(id, x);

  s.set_summary(id, "mean_kl", 0.5);
  s.set_summary(id, "mean_kl", 0.0625);  // overwrite while running
  s.set_summary(id, "top1", 0.75);
  const RunOutputs outputs{{5, 6, 7, 0, 32000}, "    return n"};
  s.finish_run(id, outputs);
  const int64_t note = s.add_note(id, "first look");
  s.update_note(note, "edited after finishing");
  const int64_t bm = s.add_bookmark({0, id, "sink head", 1, 2, 3, 0, ""});
  s.set_view_state("compare", "[1,2]");

  // A fresh store (another connection) reads everything back.
  SessionStore r = SessionStore::open(path);
  const RunRecord rec = r.load_run(id);
  EXPECT_EQ(rec.info, info);
  EXPECT_EQ(rec.outputs, outputs);
  EXPECT_EQ(rec.row.status, RunStatus::kComplete);
  EXPECT_FALSE(rec.row.incomplete);
  EXPECT_EQ(rec.row.name, "snapkv 128");
  EXPECT_FALSE(rec.row.created_at.empty());
  EXPECT_FALSE(rec.row.finished_at.empty());
  EXPECT_LE(rec.row.created_at, rec.row.finished_at);
  EXPECT_EQ(rec.row.summary, (std::map<std::string, double>{{"mean_kl", 0.0625}, {"top1", 0.75}}));
  EXPECT_EQ(rec.writer_pid, static_cast<int64_t>(::getpid()));
  ASSERT_EQ(rec.step_metrics.size(), 8u);
  EXPECT_EQ(rec.step_metrics[0].step, 0);
  EXPECT_EQ(rec.step_metrics[0].name, "bytes_read");
  EXPECT_EQ(rec.step_metrics[0].value, 1.5e9);
  EXPECT_TRUE(std::isnan(rec.step_metrics[4].value));  // step 1 "kl": NaN round-trips
  EXPECT_EQ(rec.step_metrics[3].value, INFINITY);
  const auto kl = r.load_step_metric(id, "kl");
  ASSERT_EQ(kl.size(), 4u);
  EXPECT_EQ(kl[0].value, 0.125);
  EXPECT_EQ(kl[3].step, 3);
  EXPECT_EQ(kl[3].value, 0.5);

  ASSERT_EQ(rec.blobs.size(), blobs.size());
  for (const Blob& x : blobs) {
    const auto got = r.load_blob(id, x.name, x.layer, x.head);
    ASSERT_TRUE(got) << x.name;
    EXPECT_EQ(*got, x) << x.name;
    const auto all = r.load_blobs(id, x.name);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0], x);
  }
  const auto big_info =
      std::find_if(rec.blobs.begin(), rec.blobs.end(), [](const BlobInfo& i) { return i.name == "big"; });
  EXPECT_EQ(big_info->raw_bytes, 4096 * 4);
  EXPECT_LT(big_info->stored_bytes, big_info->raw_bytes / 4);  // zstd did compress
  EXPECT_EQ(r.load_blob(id, "keys_f16", 2, 1)->to_f32(),
            (std::vector<float>{1.f, -2.f, 0.333251953125f, 5.9604644775390625e-8f, INFINITY}));
  EXPECT_EQ(r.load_blob(id, "keys_bf16", 2, 1)->to_f32(), (std::vector<float>{1.f, -3.f, 0.5f}));
  EXPECT_EQ(r.load_blob(id, "mask", 3, 0)->to_f32(), (std::vector<float>{0, 1, 255, 7, 1}));
  EXPECT_FALSE(r.load_blob(id, "attn_mass", 9, 9));

  ASSERT_EQ(rec.notes.size(), 1u);
  EXPECT_EQ(rec.notes[0].text, "edited after finishing");
  ASSERT_EQ(rec.bookmarks.size(), 1u);
  EXPECT_EQ(rec.bookmarks[0].id, bm);
  EXPECT_EQ(rec.bookmarks[0].label, "sink head");
  EXPECT_EQ(rec.bookmarks[0].token, 0);
  EXPECT_EQ(r.get_view_state("compare"), "[1,2]");
  EXPECT_FALSE(r.get_view_state("nothing"));

  const auto rows = r.list_runs();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, id);
  EXPECT_EQ(rows[0].model_path, "/models/pycode-16m");
  EXPECT_EQ(rows[0].pipeline_spec, info.pipeline.spec);
  EXPECT_EQ(rows[0].budget, info.budget);
  EXPECT_EQ(rows[0].sweep_key, "sweep/a");
  EXPECT_EQ(rows[0].summary.at("top1"), 0.75);

  // Typed params are queryable as numbers.
  RawDb raw(path);
  EXPECT_EQ(raw.one("SELECT num FROM pipeline_params WHERE key = 'window'"), "64.0");
  EXPECT_EQ(raw.one("SELECT num FROM pipeline_params WHERE key = 'floor'"), "1.0");
  EXPECT_EQ(raw.one("SELECT ifnull(num, 'NULL') FROM pipeline_params WHERE key = 'pool'"), "NULL");

  r.delete_note(note);
  r.delete_bookmark(bm);
  EXPECT_TRUE(r.list_notes(id).empty());
  EXPECT_TRUE(r.list_bookmarks().empty());
}

TEST(Sessions, RejectsBadInputWithClearErrors) {
  TempDir dir;
  const std::string path = dir.file("bad.db");
  SessionStore s = SessionStore::open(path);
  RunInfo bad = sample_info("x");
  bad.pipeline.stages[0].params[0].value = "sixty";
  std::string err = error_of([&] { s.begin_run(bad); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("'window'"), std::string::npos) << err;
  EXPECT_TRUE(s.list_runs().empty());

  const int64_t id = s.begin_run(sample_info("x"));
  Blob wrong = Blob::of<float>("w", 0, 0, {3}, {1.f, 2.f});
  err = error_of([&] { s.add_blob(id, wrong); });
  EXPECT_NE(err.find("do not fit shape [3]"), std::string::npos) << err;
  s.add_blob(id, Blob::of<float>("w", 0, 0, {2}, {1.f, 2.f}));
  err = error_of([&] { s.add_blob(id, Blob::of<float>("w", 0, 0, {2}, {1.f, 2.f})); });
  EXPECT_NE(err.find("UNIQUE"), std::string::npos) << err;
  s.add_step_metrics(id, 0, {{"kl", 1}});
  err = error_of([&] { s.add_step_metrics(id, 0, {{"kl", 2}}); });
  EXPECT_NE(err.find("step 0"), std::string::npos) << err;
  err = error_of([&] { s.add_step_metrics(id, std::vector<StepMetric>{{1, "kl", 1}, {0, "kl", 2}}); });
  EXPECT_NE(err.find("step 0 'kl'"), std::string::npos) << err;
  EXPECT_EQ(s.load_step_metric(id, "kl").size(), 1u);  // the batch rolled back as a whole
  err = error_of([&] { s.load_run(999); });
  EXPECT_NE(err.find(path + ": load_run(999): no run 999"), std::string::npos) << err;
  err = error_of([&] { SessionStore::open(dir.file("")); });
  EXPECT_NE(err.find("directory"), std::string::npos) << err;
  err = error_of([&] { SessionStore::open(dir.file("missing/sub/x.db")); });
  EXPECT_NE(err.find("missing/sub/x.db: cannot open"), std::string::npos) << err;
}

TEST(Sessions, AddBlobsStoresABatchOnThreadsAllOrNone) {
  TempDir dir;
  const std::string path = dir.file("batch.db");
  SessionStore s = SessionStore::open(path);
  const int64_t id = s.begin_run(sample_info("x"));
  // A run's per-head records: blobs of different sizes and dtypes, more than the threads.
  std::vector<Blob> blobs;
  for (int64_t l = 0; l < 5; ++l)
    for (int64_t h = 0; h < 3; ++h) {
      std::vector<int64_t> kept;
      for (int64_t p = 0; p < 100 * (l + 1) + h; p += 1 + (p % 3)) kept.push_back(p);
      blobs.push_back(Blob::of<int64_t>("kept_positions", l, h, {int64_t(kept.size())}, kept));
    }
  blobs.push_back(Blob::of<float>("head_summary", 2, -1, {2, 2}, {0.5f, -1.f, 3.f, 7.f}));
  blobs.push_back(Blob::of<int32_t>("empty", -1, -1, {0}, {}));
  s.add_blobs(id, blobs, 4);
  for (const Blob& b : blobs) {
    const std::optional<Blob> got = s.load_blob(id, b.name, b.layer, b.head);
    ASSERT_TRUE(got) << b.name << " " << b.layer << " " << b.head;
    EXPECT_EQ(got->dtype, b.dtype);
    EXPECT_EQ(got->shape, b.shape);
    EXPECT_EQ(got->data, b.data) << b.name << " " << b.layer << " " << b.head;
  }
  EXPECT_EQ(s.load_blobs(id, "kept_positions").size(), 15u);

  // A bad blob anywhere in the batch: an error naming it, and none of the batch stored.
  std::vector<Blob> bad = {Blob::of<float>("a", 0, 0, {1}, {1.f}), Blob::of<float>("w", 1, 2, {3}, {1.f, 2.f}),
                           Blob::of<float>("c", 0, 0, {1}, {1.f})};
  std::string err = error_of([&] { s.add_blobs(id, bad); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("'w' layer 1 head 2: 8 bytes do not fit shape [3]"), std::string::npos) << err;
  err = error_of([&] { s.add_blobs(id, std::vector<Blob>{bad[0], bad[2], bad[0]}); });
  EXPECT_NE(err.find("'a' layer 0 head 0: given twice"), std::string::npos) << err;
  // One already stored: the database refuses it and the batch rolls back as a whole.
  err = error_of([&] { s.add_blobs(id, std::vector<Blob>{bad[0], blobs[3]}); });
  EXPECT_NE(err.find("UNIQUE"), std::string::npos) << err;
  EXPECT_FALSE(s.load_blob(id, "a", 0, 0));
  EXPECT_FALSE(s.load_blob(id, "c", 0, 0));
  s.add_blobs(id, {});  // nothing to store: no error
  s.finish_run(id, RunOutputs{{1}, "x"});
  err = error_of([&] { s.add_blobs(id, std::vector<Blob>{bad[0]}); });
  EXPECT_NE(err.find("immutable"), std::string::npos) << err;
}

// ---- immutability ---------------------------------------------------------------------------------

TEST(Sessions, FinishedRunsAreImmutable) {
  TempDir dir;
  const std::string path = dir.file("imm.db");
  SessionStore s = SessionStore::open(path);
  const int64_t done = s.begin_run(sample_info("done"));
  s.add_step_metrics(done, 0, {{"kl", 0.1}});
  s.add_blob(done, Blob::of<float>("b", 0, 0, {1}, {1.f}));
  s.set_summary(done, "kl", 0.1);
  s.finish_run(done, {{1}, "a"});
  const int64_t failed = s.begin_run(sample_info("failed"));
  s.fail_run(failed, "CUDA out of memory");

  for (int64_t run : {done, failed}) {
    EXPECT_NE(error_of([&] { s.add_step_metrics(run, 1, {{"kl", 0.2}}); }).find("immutable"), std::string::npos);
    EXPECT_NE(error_of([&] { s.set_summary(run, "kl", 9); }).find("immutable"), std::string::npos);
    EXPECT_NE(error_of([&] { s.add_blob(run, Blob::of<float>("c", 0, 0, {1}, {1.f})); }).find("immutable"),
              std::string::npos);
    EXPECT_NE(error_of([&] { s.finish_run(run, {}); }).find("immutable"), std::string::npos);
    EXPECT_NE(error_of([&] { s.fail_run(run, "again"); }).find("immutable"), std::string::npos);
  }
  EXPECT_EQ(s.load_run(failed).row.error, "CUDA out of memory");

  // The database itself refuses, whoever writes (triggers).
  RawDb raw(path);
  raw.exec("PRAGMA foreign_keys = ON");
  const std::string d = std::to_string(done);
  for (const std::string& sql :
       {"UPDATE runs SET name = 'x' WHERE id = " + d, "UPDATE runs SET status = 'running' WHERE id = " + d,
        "UPDATE step_metrics SET value = 9 WHERE run_id = " + d, "DELETE FROM step_metrics WHERE run_id = " + d,
        "INSERT INTO step_metrics VALUES (" + d + ", 'kl', 5, 1.0)",
        "UPDATE summary_metrics SET value = 9 WHERE run_id = " + d, "UPDATE blobs SET layer = 4 WHERE run_id = " + d,
        "DELETE FROM blobs WHERE run_id = " + d, "UPDATE pipeline_params SET value = '1' WHERE run_id = " + d,
        "DELETE FROM pipeline_stages WHERE run_id = " + d,
        "UPDATE runs SET name = 'x' WHERE id = " + std::to_string(failed)}) {
    const std::string err = raw.try_exec(sql);
    EXPECT_NE(err.find("immutable"), std::string::npos) << sql << " -> " << (err.empty() ? "succeeded" : err);
  }
  EXPECT_NE(raw.try_exec("DELETE FROM runs WHERE id = " + d).find("cannot be deleted"), std::string::npos);
  EXPECT_EQ(s.load_run(done).step_metrics.size(), 1u);

  // Notes and bookmarks stay editable; failed runs may be deleted, complete ones not.
  const int64_t n = s.add_note(done, "n");
  s.update_note(n, "m");
  EXPECT_NE(error_of([&] { s.delete_run(done); }).find("cannot be deleted"), std::string::npos);
  s.delete_run(failed);
  EXPECT_EQ(s.list_runs().size(), 1u);
  EXPECT_EQ(s.integrity_check(), "ok");
}

// ---- refusing foreign or newer databases without touching them --------------------------------------

TEST(Sessions, RefusesOtherApplicationIdLeavingFileByteIdentical) {
  TempDir dir;
  const std::string path = dir.file("other.db");
  {
    RawDb raw(path);
    raw.exec("PRAGMA application_id = 305419896; CREATE TABLE t (x); INSERT INTO t VALUES (1);");
  }
  const std::string before = read_bytes(path);
  for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
    const std::string err = error_of([&] { SessionStore::open(path, mode); });
    EXPECT_NE(err.find(path + ": not a kvscope session database"), std::string::npos) << err;
    EXPECT_NE(err.find("0x12345678"), std::string::npos) << err;
    EXPECT_NE(err.find("left unchanged"), std::string::npos) << err;
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(exists(path + "-wal"));
  EXPECT_FALSE(exists(path + "-journal"));

  // A SQLite file of someone else without any application_id, and a file that is not SQLite.
  const std::string plain = dir.file("plain.db");
  { RawDb(plain).exec("CREATE TABLE t (x)"); }
  const std::string plain_before = read_bytes(plain);
  EXPECT_NE(error_of([&] { SessionStore::open(plain); }).find("application_id 0x00000000"), std::string::npos);
  EXPECT_EQ(read_bytes(plain), plain_before);
  const std::string text = dir.file("notes.txt");
  std::ofstream(text) << "this is not a database, just some text that is long enough to look like a header....\n";
  const std::string text_before = read_bytes(text);
  const std::string err = error_of([&] { SessionStore::open(text); });
  EXPECT_NE(err.find(text + ":"), std::string::npos) << err;
  EXPECT_NE(err.find("not a SQLite database"), std::string::npos) << err;
  EXPECT_EQ(read_bytes(text), text_before);
}

TEST(Sessions, RefusesNewerSchemaLeavingFileByteIdentical) {
  TempDir dir;
  const std::string path = dir.file("newer.db");
  {
    SessionStore s = SessionStore::open(path);
    s.finish_run(s.begin_run(sample_info("a")), {});
  }
  {
    RawDb raw(path);
    raw.exec("PRAGMA user_version = 99");
    raw.exec("PRAGMA journal_mode = DELETE");  // fold the WAL in so the main file is the whole database
  }
  const std::string before = read_bytes(path);
  for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
    const std::string err = error_of([&] { SessionStore::open(path, mode); });
    EXPECT_NE(err.find(path + ": session schema version 99 is newer"), std::string::npos) << err;
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(exists(path + "-wal"));
}

TEST(Sessions, ReadOnlyOpenNeverWritesAndMigratesOldFilesInMemory) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  make_v1(path);
  const std::string before = read_bytes(path);
  {
    SessionStore s = SessionStore::open(path, OpenMode::kReadOnly);
    EXPECT_EQ(s.schema_version(), SessionStore::kSchemaVersion);
    EXPECT_EQ(s.load_run(1).blobs.at(0).raw_bytes, 24);
    EXPECT_NE(error_of([&] { s.begin_run(sample_info("x")); }).find("read-only"), std::string::npos);
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(RawDb(path).one("PRAGMA user_version"), "1");
  EXPECT_NE(error_of([&] { SessionStore::open(dir.file("none.db"), OpenMode::kReadOnly); }).find("no such"),
            std::string::npos);
}

// ---- crash safety -----------------------------------------------------------------------------------

TEST(Sessions, SigkillMidRunLeavesDatabaseOpenableAndRunIncomplete) {
  TempDir dir;
  const std::string path = dir.file("crash.db");
  int64_t first = 0;
  {
    SessionStore s = SessionStore::open(path);
    first = s.begin_run(sample_info("before the crash"));
    for (int step = 0; step < 10; ++step) s.add_step_metrics(first, step, {{"kl", step * 0.1}});
    s.add_blob(first, Blob::of<float>("b", 0, 0, {3}, {1.f, 2.f, 3.f}));
    s.set_summary(first, "mean_kl", 0.45);
    s.finish_run(first, {{9, 8}, "ok"});
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      SessionStore s = SessionStore::open(path);
      const int64_t run = s.begin_run(sample_info("killed"));
      std::vector<float> payload(16384, 0.5f);
      for (int64_t step = 0;; ++step) {
        s.add_step_metrics(run, step, {{"kl", 0.01 * static_cast<double>(step)}, {"bytes_read", 1e6}});
        if (step % 10 == 0) s.add_blob(run, Blob::of<float>("attn", static_cast<int64_t>(step), 0, {16384}, payload));
        if (step == 20) (void)!::write(ready[1], "x", 1);
      }
    } catch (...) {
    }
    ::_exit(3);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::usleep(100 * 1000);  // let it write more, mid-transaction at some point
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child exited on its own: " << status;

  SessionStore s = SessionStore::open(path);
  EXPECT_EQ(s.integrity_check(), "ok");
  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, first);
  EXPECT_EQ(runs[0].status, RunStatus::kComplete);
  EXPECT_FALSE(runs[0].incomplete);
  EXPECT_EQ(runs[0].summary.at("mean_kl"), 0.45);
  const RunRecord r0 = s.load_run(first);
  EXPECT_EQ(r0.step_metrics.size(), 10u);
  EXPECT_EQ(r0.outputs.tokens, (std::vector<int32_t>{9, 8}));
  EXPECT_EQ(s.load_blob(first, "b", 0, 0)->values<float>(), (std::vector<float>{1.f, 2.f, 3.f}));

  EXPECT_EQ(runs[1].name, "killed");
  EXPECT_EQ(runs[1].status, RunStatus::kRunning);
  EXPECT_TRUE(runs[1].incomplete);
  const RunRecord r1 = s.load_run(runs[1].id);
  EXPECT_GE(r1.step_metrics.size(), 42u);  // steps 0..20 at least, two metrics each
  EXPECT_EQ(r1.writer_pid, static_cast<int64_t>(child));
  for (const BlobInfo& b : r1.blobs) EXPECT_EQ(s.load_blob(r1.row.id, b.name, b.layer, b.head)->numel(), 16384);
  // The interrupted run can be marked failed, or deleted, explicitly.
  s.fail_run(runs[1].id, "interrupted");
  EXPECT_EQ(s.load_run(runs[1].id).row.status, RunStatus::kFailed);
  // A run this process is writing is not incomplete.
  const int64_t live = s.begin_run(sample_info("live"));
  EXPECT_FALSE(s.list_runs().back().incomplete);
  EXPECT_EQ(s.list_runs().back().id, live);
}

// ---- concurrency ------------------------------------------------------------------------------------

TEST(Sessions, TwoWriterProcessesBothSucceed) {
  TempDir dir;
  const std::string path = dir.file("shared.db");  // created by whichever child gets there first
  constexpr int kRuns = 50;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      (void)!::read(go[0], &c, 1);  // returns 0 when the parent closes its end: both start together
      int code = 0;
      try {
        SessionStore s = SessionStore::open(path);
        for (int i = 0; i < kRuns; ++i) {
          const int64_t run = s.begin_run(sample_info("w" + std::to_string(w) + "-" + std::to_string(i),
                                                      "w" + std::to_string(w) + "/" + std::to_string(i)));
          for (int step = 0; step < 3; ++step) s.add_step_metrics(run, step, {{"kl", 0.1 * step}, {"top1", 1}});
          s.add_blob(run, Blob::of<int32_t>("kept", 0, 0, {3}, {w, i, 7}));
          s.set_summary(run, "writer", w);
          s.finish_run(run, {{w, i}, "done"});
        }
      } catch (const std::exception& e) {
        fprintf(stderr, "writer %d: %s\n", w, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed, status " << status;
  }
  SessionStore s = SessionStore::open(path);
  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 2u * kRuns);
  std::set<std::string> keys;
  for (const RunRow& r : runs) {
    EXPECT_EQ(r.status, RunStatus::kComplete);
    keys.insert(*r.sweep_key);
  }
  EXPECT_EQ(keys.size(), 2u * kRuns);
  for (int w = 0; w < 2; ++w) {
    const auto id = s.find_by_sweep_key("w" + std::to_string(w) + "/49");
    ASSERT_TRUE(id);
    const RunRecord r = s.load_run(*id);
    EXPECT_EQ(r.step_metrics.size(), 6u);
    EXPECT_EQ(s.load_blob(*id, "kept", 0, 0)->values<int32_t>(), (std::vector<int32_t>{w, 49, 7}));
  }
  EXPECT_EQ(s.integrity_check(), "ok");
}

// ---- merge and sweep keys -----------------------------------------------------------------------------

TEST(Sessions, MergesShardsRemappingIdsAndDeduplicatingSweepKeys) {
  TempDir dir;
  const std::string a = dir.file("a.db"), b = dir.file("b.db"), old = dir.file("old.db"), out = dir.file("out.db");
  {
    SessionStore s = SessionStore::open(a);
    const int64_t r1 = s.begin_run(sample_info("a-k1", "k1"));
    s.add_step_metrics(r1, 0, {{"kl", 0.1}});
    s.add_blob(r1, Blob::of<float>("mass", 1, 2, {2}, {0.25f, 0.75f}));
    s.set_summary(r1, "mean_kl", 0.1);
    s.finish_run(r1, {{3}, "x"});
    s.add_note(r1, "from a");
    s.add_bookmark({0, r1, "here", 0, 1, 2, 3, ""});
    s.fail_run(s.begin_run(sample_info("a-k2 failed", "k2")), "oom");  // dropped: b completes k2
    s.fail_run(s.begin_run(sample_info("a-k4 failed", "k4")), "oom");  // kept: nobody completes k4
    s.finish_run(s.begin_run(sample_info("a-nokey")), {});
  }
  {
    SessionStore s = SessionStore::open(b);
    s.finish_run(s.begin_run(sample_info("b-k1 duplicate", "k1")), {});
    // Make b's ids collide with a's and differ in order.
    const int64_t r2 = s.begin_run(sample_info("b-k2", "k2"));
    s.add_step_metrics(r2, 0, {{"kl", 0.2}});
    s.finish_run(r2, {{4}, "y"});
    s.begin_run(sample_info("b-k3 left running", "k3"));  // this process is alive: a running run
  }
  make_v1(old);  // an input of an older schema is migrated in memory, not on disk
  const std::string a_before = read_bytes(a), old_before = read_bytes(old);

  const MergeReport rep = SessionStore::merge(out, {a, b, old});
  EXPECT_EQ(rep.runs_copied, 3 + 2 + 2);  // a: k1, k4 (failed), nokey; b: k2, k3; old: 2 runs
  EXPECT_EQ(rep.runs_skipped, 2);         // b's k1 (a completed it first), a's failed k2 (b completed it)
  EXPECT_EQ(read_bytes(a), a_before);
  EXPECT_EQ(read_bytes(old), old_before);

  SessionStore s = SessionStore::open(out);
  EXPECT_EQ(s.integrity_check(), "ok");
  const auto runs = s.list_runs();
  ASSERT_EQ(runs.size(), 7u);
  std::vector<std::string> names;
  for (const RunRow& r : runs) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a-k1", "a-k4 failed", "a-nokey", "b-k2", "b-k3 left running", "old run",
                                             "crashed"}));
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].id, static_cast<int64_t>(i + 1));
  const auto k1 = s.find_by_sweep_key("k1");
  ASSERT_TRUE(k1);
  const RunRecord r1 = s.load_run(*k1);
  EXPECT_EQ(r1.row.name, "a-k1");
  EXPECT_EQ(r1.info, sample_info("a-k1", "k1"));
  EXPECT_EQ(r1.step_metrics.size(), 1u);
  EXPECT_EQ(r1.row.summary.at("mean_kl"), 0.1);
  EXPECT_EQ(s.load_blob(*k1, "mass", 1, 2)->values<float>(), (std::vector<float>{0.25f, 0.75f}));
  ASSERT_EQ(r1.notes.size(), 1u);
  EXPECT_EQ(r1.notes[0].text, "from a");
  ASSERT_EQ(r1.bookmarks.size(), 1u);
  EXPECT_EQ(r1.bookmarks[0].token, 3);
  EXPECT_EQ(s.load_run(*s.find_by_sweep_key("k2")).row.name, "b-k2");
  EXPECT_EQ(runs[1].status, RunStatus::kFailed);
  EXPECT_EQ(runs[1].error, "oom");
  EXPECT_EQ(runs[4].status, RunStatus::kRunning);
  EXPECT_EQ(s.load_run(6).blobs.at(0).raw_bytes, 24);
  // Merged runs stay immutable.
  EXPECT_NE(error_of([&] { s.set_summary(*k1, "x", 1); }).find("immutable"), std::string::npos);

  // Merging again skips every keyed run already complete, and refuses the output as an input.
  const MergeReport again = SessionStore::merge(out, {b});
  EXPECT_EQ(again.runs_skipped, 2);  // k1, k2
  EXPECT_EQ(again.runs_copied, 1);   // k3 is not complete anywhere: kept as evidence
  EXPECT_NE(error_of([&] { SessionStore::merge(out, {out}); }).find("same file as the output"), std::string::npos);
}

TEST(Sessions, SweepKeyLookupFindsCompleteRunsOnly) {
  TempDir dir;
  SessionStore s = SessionStore::open(dir.file("sweep.db"));
  EXPECT_FALSE(s.find_by_sweep_key("snapkv/b128/p0"));
  const int64_t a = s.begin_run(sample_info("attempt 1", "snapkv/b128/p0"));
  EXPECT_FALSE(s.find_by_sweep_key("snapkv/b128/p0"));  // running does not count
  s.fail_run(a, "oom");
  EXPECT_FALSE(s.find_by_sweep_key("snapkv/b128/p0"));  // failed does not count
  const int64_t b = s.begin_run(sample_info("attempt 2", "snapkv/b128/p0"));
  const int64_t c = s.begin_run(sample_info("racing attempt", "snapkv/b128/p0"));
  s.finish_run(b, {});
  EXPECT_EQ(s.find_by_sweep_key("snapkv/b128/p0"), b);
  // Only one complete run per key.
  EXPECT_NE(error_of([&] { s.finish_run(c, {}); }).find("completed first by run " + std::to_string(b)),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.begin_run(sample_info("again", "snapkv/b128/p0")); }).find("already has complete run"),
            std::string::npos);
  s.fail_run(c, "duplicate");
  EXPECT_FALSE(s.find_by_sweep_key("snapkv/b128/p1"));
  // Runs without a key never collide.
  s.finish_run(s.begin_run(sample_info("free 1")), {});
  s.finish_run(s.begin_run(sample_info("free 2")), {});
  EXPECT_EQ(s.list_runs().size(), 5u);
}

// ---- stored data that is checked: checksums, the open-time check, read-only files -----------------

namespace {

/// CRC-32 as zlib.crc32, written out bit by bit (independent of the store's table-driven one).
uint32_t reference_crc32(const std::vector<uint8_t>& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

std::vector<uint8_t> raw_blob(const std::string& path, const std::string& sql) {
  sqlite3* h = nullptr;
  sqlite3_open_v2(path.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  std::vector<uint8_t> out;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
    const auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(s, 0));
    out.assign(p, p + sqlite3_column_bytes(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close_v2(h);
  return out;
}

/// Flips `n` bytes of `stored` (a blob value as stored) where they lie in the file at `path`, as
/// a bad disk sector or a stray write would: the database file is edited, not SQL. The file must
/// be checkpointed (no -wal). Returns false when no contiguous run of `n` of them is found.
bool damage_in_file(const std::string& path, const std::vector<uint8_t>& stored, size_t n) {
  std::string bytes = read_bytes(path);
  for (size_t k = stored.size() / 4; k + n <= stored.size(); k += 16) {
    const std::string needle(reinterpret_cast<const char*>(stored.data() + k), n);
    const size_t at = bytes.find(needle);
    if (at == std::string::npos || bytes.find(needle, at + 1) != std::string::npos) continue;
    for (size_t i = 0; i < n; ++i) bytes[at + i] = static_cast<char>(bytes[at + i] ^ 0x5A);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return true;
  }
  return false;
}

/// Values that zstd cannot compress (it stores them as a raw block: damage to them decodes).
std::vector<float> noise(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed;
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / 16777216.0f;
  }
  return v;
}

/// A database with run 1 (complete) holding an incompressible 'attention' blob of layer 3 and a
/// small 'kept' blob, closed (checkpointed) on return.
void make_run_with_attention(const std::string& path) {
  SessionStore s = SessionStore::open(path);
  const int64_t id = s.begin_run(sample_info("probe"));
  s.add_blob(id, Blob::of<float>("attention", 3, -1, {4, 1024}, noise(4096, 7)));
  s.add_blob(id, Blob::of<int64_t>("kept", 0, 1, {3}, {0, 5, 9}));
  s.add_step_metrics(id, 0, {{"kl", 0.5}});
  s.finish_run(id, {{7, 8}, "ok"});
}

}  // namespace

TEST(SessionChecks, BlobsAndTokenArraysAreStoredWithChecksumsAZstdReaderVerifies) {
  EXPECT_EQ(reference_crc32({'1', '2', '3', '4', '5', '6', '7', '8', '9'}), 0xCBF43926u);
  TempDir dir;
  const std::string path = dir.file("c.db");
  make_run_with_attention(path);
  for (const std::string& name : {"attention", "kept"}) {
    const auto frame = raw_blob(path, "SELECT data FROM blobs WHERE name = '" + name + "'");
    ASSERT_FALSE(frame.empty());
    EXPECT_EQ(RawDb(path, SQLITE_OPEN_READONLY).one("SELECT checksum FROM blobs WHERE name = '" + name + "'"),
              std::to_string(reference_crc32(frame)))
        << name;
    // Frame_Header_Descriptor (after the 4-byte magic), bit 2: Content_Checksum_flag. Any zstd
    // decoder verifies the content against it.
    ASSERT_GT(frame.size(), 5u);
    EXPECT_EQ(frame[4] & 0x04, 0x04) << name;
  }
  RawDb raw(path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.one("SELECT prompt_tokens_checksum FROM runs"),
            std::to_string(reference_crc32(bytes_of(sample_info("x").prompt.tokens))));
  EXPECT_EQ(raw.one("SELECT output_tokens_checksum FROM runs"),
            std::to_string(reference_crc32(bytes_of(std::vector<int32_t>{7, 8}))));
}

TEST(SessionChecks, CorruptBytesInsideABlobFailItsReadNamingTheBlobAndCheckFindsThem) {
  TempDir dir;
  const std::string path = dir.file("damaged.db");
  make_run_with_attention(path);
  const auto frame = raw_blob(path, "SELECT data FROM blobs WHERE name = 'attention'");
  ASSERT_TRUE(damage_in_file(path, frame, 256));

  SessionStore s = SessionStore::open(path, OpenMode::kReadOnly);
  for (const std::string& err :
       {error_of([&] { s.load_blobs(1, "attention"); }), error_of([&] { s.load_blob(1, "attention", 3, -1); })}) {
    EXPECT_EQ(err.rfind(path + ": ", 0), 0u) << err;
    EXPECT_NE(err.find("blob 'attention' layer 3 of run 1 is damaged (checksum mismatch)"), std::string::npos) << err;
  }
  // The rest of the run reads as before.
  EXPECT_EQ(s.load_blob(1, "kept", 0, 1)->values<int64_t>(), (std::vector<int64_t>{0, 5, 9}));
  EXPECT_EQ(s.load_run(1).outputs.tokens, (std::vector<int32_t>{7, 8}));

  const CheckReport rep = s.check();
  EXPECT_FALSE(rep.ok());
  EXPECT_EQ(rep.integrity, "ok");  // SQLite's own structures are intact: only a checksum can tell
  EXPECT_EQ(rep.runs, 1);
  EXPECT_EQ(rep.blobs, 2);
  EXPECT_EQ(rep.blobs_verified, 1);
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0], "blob 'attention' layer 3 of run 1 is damaged (checksum mismatch)");

  // merge does not carry the damage into another file.
  const std::string out = dir.file("merged.db");
  const std::string err = error_of([&] { SessionStore::merge(out, {path}); });
  EXPECT_NE(err.find("blob 'attention' layer 3 of run 1 is damaged"), std::string::npos) << err;
  EXPECT_NE(err.find("nothing was merged"), std::string::npos) << err;
  EXPECT_TRUE(SessionStore::open(out, OpenMode::kReadOnly).list_runs().empty());
}

TEST(SessionChecks, AShapeBeyondAnyTensorIsRefusedNotMultipliedPastInt64) {
  // [2^32, 2^32, 4] x f32: numel wrapped past int64 (undefined behaviour) and the byte size the
  // reader compared raw_size with came out as a small number. Found while writing fuzz_session_blob.
  TempDir dir;
  const std::string path = dir.file("s.db");
  SessionStore s = SessionStore::open(path);
  const int64_t id = s.begin_run(sample_info("r"));
  s.add_blob(id, Blob::of<float>("attention", 0, -1, {4}, noise(4, 1)));
  RawDb raw(path);
  for (const char* shape : {"[4294967296,4294967296,4]", "[9223372036854775807,2]", "[281474976710657]"}) {
    raw.exec(std::string("UPDATE blobs SET shape = '") + shape + "', raw_size = NULL");
    const std::string err = error_of([&] { s.load_blobs(id, "attention"); });
    EXPECT_NE(err.find(std::string("bad shape '") + shape + "'"), std::string::npos) << err;
    EXPECT_FALSE(s.check().ok());
  }
  raw.exec("UPDATE blobs SET shape = '[2,2]', raw_size = 16");  // 2^48 elements and below still read
  EXPECT_EQ(s.load_blobs(id, "attention").at(0).numel(), 4);
}

TEST(SessionChecks, AFrameClaimingMoreThanItHoldsFailsWithoutAllocatingWhatItClaims) {
  // A 38-byte row (fuzz_session_blob, 2026-11-26): shape [204, 222063333] x f32 and a zstd frame
  // header claiming those 181 GB. The reader allocated the claimed size before decoding (an
  // out-of-memory abort); now it decodes in 1 MiB steps and the frame's 4 bytes end it.
  TempDir dir;
  const std::string path = dir.file("f.db");
  SessionStore s = SessionStore::open(path);
  const int64_t id = s.begin_run(sample_info("r"));
  s.add_blob(id, Blob::of<float>("attention", 0, -1, {4}, noise(4, 1)));
  const uint64_t claimed = uint64_t(204) * 222063333 * 4;
  std::vector<uint8_t> frame = {0x28, 0xB5, 0x2F, 0xFD, 0xE0};  // magic; single segment, 8-byte content size
  for (int i = 0; i < 8; ++i) frame.push_back(uint8_t(claimed >> (8 * i)));
  for (uint8_t b : {0x21, 0x00, 0x00, 1, 2, 3, 4}) frame.push_back(b);  // one raw last block of 4 bytes
  RawDb raw(path);
  raw.exec("UPDATE blobs SET shape = '[204,222063333]', raw_size = NULL, checksum = NULL");
  raw.exec_with_blob("UPDATE blobs SET data = ?1", frame);
  const std::string err = error_of([&] { s.load_blobs(id, "attention"); });
  EXPECT_NE(err.find("blob 'attention' layer 0 of run 1 is damaged (zstd: "), std::string::npos) << err;
  // And a frame that does not record its size (kvscope always records it) is refused.
  raw.exec_with_blob("UPDATE blobs SET data = ?1",
                     std::vector<uint8_t>{0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00, 0x21, 0x00, 0x00, 1, 2, 3, 4});
  EXPECT_NE(error_of([&] { s.load_blobs(id, "attention"); }).find("zstd frame does not record its size"),
            std::string::npos);
}

TEST(SessionChecks, ZstdFrameChecksumCatchesDamageWhereTheChecksumColumnIsMissing) {
  // A blob of a running run edited behind the store's back (triggers let running runs change):
  // with its checksum column the CRC catches it, without one (rows written before v4) the zstd
  // frame's own content checksum does.
  TempDir dir;
  const std::string path = dir.file("z.db");
  SessionStore s = SessionStore::open(path);
  const int64_t id = s.begin_run(sample_info("r"));
  s.add_blob(id, Blob::of<float>("attention", 0, -1, {512}, noise(512, 3)));
  auto frame = raw_blob(path, "SELECT data FROM blobs");
  for (size_t i = 100; i < 120; ++i) frame[i] ^= 0xFF;  // inside the raw block, past the frame header
  RawDb raw(path);
  raw.exec_with_blob("UPDATE blobs SET data = ?1", frame);
  std::string err = error_of([&] { s.load_blobs(id, "attention"); });
  EXPECT_NE(err.find("blob 'attention' layer 0 of run 1 is damaged (checksum mismatch)"), std::string::npos) << err;
  raw.exec("UPDATE blobs SET checksum = NULL");
  err = error_of([&] { s.load_blobs(id, "attention"); });
  EXPECT_NE(err.find("blob 'attention' layer 0 of run 1 is damaged (checksum mismatch)"), std::string::npos) << err;
  const CheckReport rep = s.check();
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.blobs_verified + rep.blobs_unverified, 0);
}

TEST(SessionChecks, DamagedTokenArraysAndInconsistentRunsAreFound) {
  TempDir dir;
  const std::string path = dir.file("t.db");
  {
    SessionStore s = SessionStore::open(path);
    s.begin_run(sample_info("running"));
    s.finish_run(s.begin_run(sample_info("done")), {{4, 5, 6}, "x"});
  }
  {
    RawDb raw(path);
    raw.exec("UPDATE runs SET prompt_tokens = X'0200000003000000' WHERE id = 1");  // running: allowed
    raw.exec("DROP TRIGGER runs_frozen_update");
    raw.exec("UPDATE runs SET n_output_tokens = 2 WHERE id = 2");
  }
  SessionStore s = SessionStore::open(path, OpenMode::kReadOnly);
  const std::string err = error_of([&] { s.load_run(1); });
  EXPECT_NE(err.find(path + ": load_run(1): prompt_tokens of run 1 are damaged (checksum mismatch)"), std::string::npos)
      << err;
  const CheckReport rep = s.check();
  ASSERT_EQ(rep.problems.size(), 2u);
  EXPECT_EQ(rep.problems[0], "prompt_tokens of run 1 are damaged (checksum mismatch)");
  EXPECT_EQ(rep.problems[1], "run 2: output_tokens holds 3 tokens but its count column says 2");
}

TEST(SessionChecks, OldBlobsWithoutChecksumsStillReadAndCheckAsUnverified) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  make_v1(path);
  SessionStore s = SessionStore::open(path);  // migrated to v4: old rows keep a NULL checksum
  EXPECT_EQ(RawDb(path, SQLITE_OPEN_READONLY).one("SELECT ifnull(checksum, 'NULL') FROM blobs"), "NULL");
  EXPECT_EQ(s.load_blob(1, "mass", 2, 3)->values<float>(), kOldBlobValues);
  const CheckReport rep = s.check();
  EXPECT_TRUE(rep.ok()) << (rep.problems.empty() ? rep.integrity : rep.problems[0]);
  EXPECT_EQ(rep.blobs, 1);
  EXPECT_EQ(rep.blobs_unverified, 1);
  // New blobs of the migrated file carry checksums.
  const int64_t id = s.begin_run(sample_info("new"));
  s.add_blob(id, Blob::of<float>("b", 0, 0, {1}, {1.f}));
  EXPECT_EQ(s.check().blobs_verified, 1);
}

TEST(SessionChecks, AStructurallyDamagedFileIsRefusedForWritingAndReadOnlyForViewing) {
  TempDir dir;
  const std::string path = dir.file("broken.db");
  {
    SessionStore s = SessionStore::open(path);
    const int64_t id = s.begin_run(sample_info("r"));
    std::vector<StepMetric> rows;
    for (int i = 0; i < 3000; ++i) rows.push_back({i, "kl", i * 0.001});
    s.add_step_metrics(id, rows);
    s.finish_run(id, {});
  }
  int64_t page = 0, page_size = 0;
  {
    RawDb raw(path, SQLITE_OPEN_READONLY);
    page = std::stoll(raw.one("SELECT rootpage FROM sqlite_schema WHERE name = 'step_metrics'"));
    page_size = std::stoll(raw.one("PRAGMA page_size"));
  }
  {
    // Garbage over the step_metrics b-tree's root page (an interior page with 3000 rows).
    std::string bytes = read_bytes(path);
    ASSERT_GE(bytes.size(), static_cast<size_t>(page * page_size));
    for (int64_t i = 8; i < page_size; ++i) bytes[static_cast<size_t>((page - 1) * page_size + i)] = '\x5A';
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  const std::string before = read_bytes(path);
  const std::string err = error_of([&] { SessionStore::open(path); });
  EXPECT_EQ(err.rfind(path + ": is damaged (PRAGMA quick_check: ", 0), 0u) << err;
  EXPECT_NE(err.find("refusing to write to it"), std::string::npos) << err;
  EXPECT_EQ(read_bytes(path), before);

  SessionStore view = SessionStore::open(path, OpenMode::kView);
  EXPECT_FALSE(view.writable());
  EXPECT_NE(view.read_only_reason().find("is damaged"), std::string::npos) << view.read_only_reason();
  EXPECT_EQ(view.list_runs().size(), 1u);  // what is intact still reads
  const CheckReport rep = view.check();
  EXPECT_FALSE(rep.ok());
  EXPECT_NE(rep.integrity, "ok");
}

TEST(SessionChecks, ViewingRefusesAnEmptyFileAndNeverWritesASchemaIntoIt) {
  TempDir dir;
  const std::string empty = dir.file("empty.db");
  std::ofstream(empty).close();
  const std::string err = error_of([&] { SessionStore::open(empty, OpenMode::kView); });
  EXPECT_EQ(err.rfind(empty + ": is an empty file (0 bytes), not a session database", 0), 0u) << err;
  EXPECT_EQ(read_bytes(empty), "");
  EXPECT_FALSE(exists(empty + "-wal"));
  EXPECT_FALSE(exists(empty + "-shm"));
  // An empty SQLite database (no session schema) is refused too, and a missing file.
  const std::string bare = dir.file("bare.db");
  { RawDb(bare).exec("PRAGMA user_version = 0"); }
  EXPECT_NE(error_of([&] { SessionStore::open(bare, OpenMode::kView); }).find("no session schema"), std::string::npos);
  EXPECT_EQ(RawDb(bare, SQLITE_OPEN_READONLY).one("SELECT count(*) FROM sqlite_schema"), "0");
  EXPECT_NE(error_of([&] { SessionStore::open(dir.file("none.db"), OpenMode::kView); }).find("no such"),
            std::string::npos);
  EXPECT_FALSE(exists(dir.file("none.db")));
  // A good database opens writable; the writing open still initialises an existing empty file.
  const std::string good = dir.file("good.db");
  make_run_with_attention(good);
  SessionStore v = SessionStore::open(good, OpenMode::kView);
  EXPECT_TRUE(v.writable());
  EXPECT_GT(v.add_note(1, "n"), 0);
  EXPECT_EQ(SessionStore::open(empty).schema_version(), SessionStore::kSchemaVersion);
}

namespace {

/// Runs `fn` in a child process without root's permission override (as user nobody when this
/// process is root; file permissions are then enforced). `fn` returns "" on success or what
/// went wrong. Returns the child's answer, or "SKIP: ..." when privileges cannot be dropped.
template <class Fn>
std::string as_unprivileged(Fn&& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string answer;
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      answer = "SKIP: cannot drop root privileges (setuid)";
    else
      answer = fn();
    if (::write(fds[1], answer.data(), answer.size()) < 0) _exit(3);
    _exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) out += " (child exited abnormally)";
  return out;
}

std::string expect_contains(const std::string& text, const std::string& part, const char* what) {
  return text.find(part) == std::string::npos ? std::string(what) + ": expected '" + part + "' in: " + text + "\n" : "";
}

}  // namespace

TEST(SessionChecks, ADatabaseInAReadOnlyDirectoryCanBeInspectedButNotWritten) {
  TempDir dir;
  const std::string ro = dir.file("ro");
  const std::string path = ro + "/s.db";
  ::mkdir(ro.c_str(), 0755);
  make_run_with_attention(path);
  // A copy of a database whose writer is still open (its -wal holds the last run) in a second
  // read-only directory, once with and once without the -shm file.
  const std::string live = dir.file("live"), live_noshm = dir.file("live_noshm");
  ::mkdir(live.c_str(), 0755);
  ::mkdir(live_noshm.c_str(), 0755);
  {
    SessionStore w = SessionStore::open(dir.file("w.db"));
    w.finish_run(w.begin_run(sample_info("in the wal")), {});
    for (const char* ext : {"", "-wal", "-shm"}) {
      std::ofstream(live + "/s.db" + ext, std::ios::binary) << read_bytes(dir.file("w.db") + ext);
      if (std::string(ext) != "-shm")
        std::ofstream(live_noshm + "/s.db" + ext, std::ios::binary) << read_bytes(dir.file("w.db") + ext);
    }
  }
  ::chmod(path.c_str(), 0666);  // the file itself writable: the directory is what stops writers
  for (const std::string& f :
       {live + "/s.db", live + "/s.db-wal", live + "/s.db-shm", live_noshm + "/s.db", live_noshm + "/s.db-wal"})
    ::chmod(f.c_str(), 0644);
  for (const std::string& d : {ro, live, live_noshm}) ::chmod(d.c_str(), 0555);
  ::chmod(dir.file("").c_str(), 0755);
  const std::string before = read_bytes(path);

  const std::string answer = as_unprivileged([&]() -> std::string {
    std::string bad;
    try {
      SessionStore s = SessionStore::open(path, OpenMode::kReadOnly);
      if (s.list_runs().size() != 1) bad += "read-only open: expected 1 run\n";
      if (s.load_blobs(1, "attention").size() != 1) bad += "read-only open: blob not read\n";
      if (!s.check().ok()) bad += "check of a good database in a read-only directory failed\n";
      SessionStore v = SessionStore::open(path, OpenMode::kView);
      if (v.writable()) bad += "kView: writable in a read-only directory\n";
      bad += expect_contains(v.read_only_reason(), "is not writable", "kView reason");
      SessionStore l = SessionStore::open(live + "/s.db", OpenMode::kReadOnly);
      if (l.list_runs().size() != 1) bad += "read-only open with -wal and -shm: the run in the WAL is missing\n";
    } catch (const std::exception& e) {
      bad += std::string("reading threw: ") + e.what() + "\n";
    }
    try {
      SessionStore::open(path);
      bad += "a writing open of a database in a read-only directory succeeded\n";
    } catch (const SessionError& e) {
      bad += expect_contains(e.what(), path + ": cannot write: its directory " + ro + " is not writable", "write");
    }
    try {
      SessionStore::open(live_noshm + "/s.db", OpenMode::kReadOnly);
      bad += "a -wal without -shm in a read-only directory opened (its WAL content would be missed)\n";
    } catch (const SessionError& e) {
      bad += expect_contains(e.what(), live_noshm + "/s.db: cannot be read where it is", "wal without shm");
    }
    try {
      SessionStore::open(ro + "/new.db");
      bad += "creating a database in a read-only directory succeeded\n";
    } catch (const SessionError& e) {
      bad += expect_contains(e.what(), ro + "/new.db: cannot open", "create");
    }
    return bad;
  });
  for (const std::string& d : {ro, live, live_noshm}) ::chmod(d.c_str(), 0755);
  if (answer.rfind("SKIP", 0) == 0) GTEST_SKIP() << answer;
  EXPECT_EQ(answer, "");
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(exists(path + "-wal"));
  EXPECT_FALSE(exists(path + "-shm"));
}

TEST(SessionChecks, AReadOnlyFileIsReadButWritingItIsRefusedInOneLine) {
  TempDir dir;
  const std::string path = dir.file("ro.db");
  make_run_with_attention(path);
  ::chmod(path.c_str(), 0444);
  ::chmod(dir.file("").c_str(), 0777);
  const std::string answer = as_unprivileged([&]() -> std::string {
    std::string bad;
    try {
      if (SessionStore::open(path, OpenMode::kReadOnly).list_runs().size() != 1) bad += "read-only open: no run\n";
      if (SessionStore::open(path, OpenMode::kView).writable()) bad += "kView of a read-only file is writable\n";
    } catch (const std::exception& e) {
      bad += std::string("reading threw: ") + e.what() + "\n";
    }
    try {
      SessionStore::open(path);
      bad += "a writing open of a read-only file succeeded\n";
    } catch (const SessionError& e) {
      bad += expect_contains(e.what(), path + ": cannot write: Permission denied", "write");
      if (std::string(e.what()).find('\n') != std::string::npos) bad += "message has more than one line\n";
    }
    return bad;
  });
  ::chmod(dir.file("").c_str(), 0700);
  if (answer.rfind("SKIP", 0) == 0) GTEST_SKIP() << answer;
  EXPECT_EQ(answer, "");
}
