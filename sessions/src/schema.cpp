// The migration ladder. Each step is frozen once released: never edit a step, add the next one
// (and bump kSchemaVersion, docs/sessions.md "Schema history", and a test from the previous
// layout).
#include "schema.h"

#include <cstdio>
#include <string>

#include "codec.h"

namespace kvscope::sessions::detail {

namespace {

// ---- v1: runs, pipeline, metrics, blobs, notes; finished runs immutable -------------------------

constexpr const char* kV1Tables = R"sql(
CREATE TABLE runs (
  id                INTEGER PRIMARY KEY,
  name              TEXT    NOT NULL DEFAULT '',
  status            TEXT    NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'complete', 'failed')),
  error             TEXT,
  created_at        TEXT    NOT NULL,
  finished_at       TEXT,
  model_path        TEXT    NOT NULL,
  model_config_hash TEXT    NOT NULL,
  model_type        TEXT    NOT NULL,
  n_layer           INTEGER NOT NULL,
  n_head            INTEGER NOT NULL,
  n_head_kv         INTEGER NOT NULL,
  head_dim          INTEGER NOT NULL,
  dtype             TEXT    NOT NULL,
  device            TEXT    NOT NULL,
  pipeline_spec     TEXT    NOT NULL,
  budget_unit       TEXT    NOT NULL CHECK (budget_unit IN ('compression_ratio', 'stored', 'fetched', 'fraction')),
  budget_value      REAL    NOT NULL,
  prompt_text       TEXT    NOT NULL,
  prompt_tokens     BLOB    NOT NULL,
  n_prompt_tokens   INTEGER NOT NULL,
  output_text       TEXT,
  output_tokens     BLOB,
  n_output_tokens   INTEGER,
  kvscope_version   TEXT    NOT NULL,
  torch_version     TEXT    NOT NULL,
  device_name       TEXT    NOT NULL,
  hostname          TEXT    NOT NULL
);
CREATE TABLE pipeline_stages (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  stage_index INTEGER NOT NULL,
  stage       TEXT    NOT NULL,
  policy      TEXT    NOT NULL,
  PRIMARY KEY (run_id, stage_index)
) WITHOUT ROWID;
CREATE TABLE pipeline_params (
  run_id      INTEGER NOT NULL,
  stage_index INTEGER NOT NULL,
  param_index INTEGER NOT NULL,
  key         TEXT    NOT NULL,
  type        TEXT    NOT NULL CHECK (type IN ('int', 'float', 'choice', 'bool', 'path')),
  value       TEXT    NOT NULL,
  num         REAL,
  PRIMARY KEY (run_id, stage_index, key),
  FOREIGN KEY (run_id, stage_index) REFERENCES pipeline_stages(run_id, stage_index) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE TABLE step_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT    NOT NULL,
  step   INTEGER NOT NULL,
  value  REAL,
  PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;
CREATE TABLE summary_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT    NOT NULL,
  value  REAL,
  PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE blobs (
  id     INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT    NOT NULL,
  layer  INTEGER NOT NULL DEFAULT -1,
  head   INTEGER NOT NULL DEFAULT -1,
  dtype  TEXT    NOT NULL CHECK (dtype IN ('f32', 'f16', 'bf16', 'i32', 'i64', 'u8')),
  shape  TEXT    NOT NULL,
  codec  TEXT    NOT NULL DEFAULT 'zstd' CHECK (codec IN ('zstd')),
  data   BLOB    NOT NULL,
  UNIQUE (run_id, name, layer, head)
);
CREATE TABLE notes (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  text       TEXT    NOT NULL,
  created_at TEXT    NOT NULL,
  updated_at TEXT    NOT NULL
);
CREATE INDEX notes_run ON notes(run_id);
CREATE TRIGGER runs_frozen_update BEFORE UPDATE ON runs WHEN OLD.status IN ('complete', 'failed')
BEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;
CREATE TRIGGER runs_frozen_delete BEFORE DELETE ON runs WHEN OLD.status = 'complete'
BEGIN SELECT RAISE(ABORT, 'run is complete and cannot be deleted'); END;
)sql";

/// Insert/update/delete guards of one child table (v1 text; used by v1 only).
std::string v1_child_triggers(const std::string& t) {
  const std::string finished = " IN ('complete', 'failed')";
  auto status_of = [](const std::string& which) { return "(SELECT status FROM runs WHERE id = " + which + ".run_id)"; };
  std::string sql;
  sql += "CREATE TRIGGER " + t + "_frozen_insert BEFORE INSERT ON " + t + " WHEN " + status_of("NEW") + finished +
         "\nBEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;\n";
  sql += "CREATE TRIGGER " + t + "_frozen_update BEFORE UPDATE ON " + t + " WHEN " + status_of("OLD") + finished +
         " OR " + status_of("NEW") + finished + "\nBEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;\n";
  sql += "CREATE TRIGGER " + t + "_frozen_delete BEFORE DELETE ON " + t + " WHEN " + status_of("OLD") +
         " = 'complete'\nBEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;\n";
  return sql;
}

void step_v0_to_v1(Db& db) {
  db.exec(kV1Tables);
  for (const char* t : {"pipeline_stages", "pipeline_params", "step_metrics", "summary_metrics", "blobs"})
    db.exec(v1_child_triggers(t));
  db.exec("PRAGMA application_id = " + std::to_string(kApplicationId));
}

// ---- v2: sweep keys, writer identity (crash detection), bookmarks, view state -------------------

constexpr const char* kV2 = R"sql(
ALTER TABLE runs ADD COLUMN sweep_key TEXT;
ALTER TABLE runs ADD COLUMN writer_pid INTEGER;
ALTER TABLE runs ADD COLUMN writer_host TEXT;
ALTER TABLE runs ADD COLUMN writer_start INTEGER;
ALTER TABLE runs ADD COLUMN heartbeat_at TEXT;
CREATE UNIQUE INDEX runs_sweep_key_complete ON runs(sweep_key) WHERE sweep_key IS NOT NULL AND status = 'complete';
CREATE INDEX runs_sweep_key ON runs(sweep_key) WHERE sweep_key IS NOT NULL;
CREATE TABLE bookmarks (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  label      TEXT    NOT NULL DEFAULT '',
  step       INTEGER NOT NULL DEFAULT -1,
  layer      INTEGER NOT NULL DEFAULT -1,
  head       INTEGER NOT NULL DEFAULT -1,
  token      INTEGER NOT NULL DEFAULT -1,
  created_at TEXT    NOT NULL
);
CREATE INDEX bookmarks_run ON bookmarks(run_id);
CREATE TABLE view_state (
  key        TEXT PRIMARY KEY,
  value      TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
)sql";

void step_v1_to_v2(Db& db) { db.exec(kV2); }

// ---- v3: blobs.raw_size (uncompressed bytes), back-filled for existing rows ----------------------

void step_v2_to_v3(Db& db) {
  db.exec("ALTER TABLE blobs ADD COLUMN raw_size INTEGER");
  // Back-filling touches blobs of finished runs: lift their update guard for this transaction.
  db.exec("DROP TRIGGER blobs_frozen_update");
  {
    Stmt sel(db, "SELECT id, dtype, shape FROM blobs");
    Stmt upd(db, "UPDATE blobs SET raw_size = ?1 WHERE id = ?2");
    while (sel.step()) {
      const int64_t id = sel.col_int(0);
      const std::string dtype_text = sel.col_text(1);
      const auto dtype = parse_dtype(dtype_text);
      const auto shape = parse_shape(sel.col_text(2));
      if (!dtype || !shape)
        throw SessionError(db.path(), "migrating to v3: blob " + std::to_string(id) + " has a bad dtype '" +
                                          dtype_text + "' or shape '" + sel.col_text(2) + "'");
      int64_t numel = 1;
      for (int64_t d : *shape) numel *= d;
      upd.reset();
      upd.bind(1, numel * static_cast<int64_t>(dtype_size(*dtype))).bind(2, id).run();
    }
  }
  db.exec(R"sql(
CREATE TRIGGER blobs_frozen_update BEFORE UPDATE ON blobs WHEN (SELECT status FROM runs WHERE id = OLD.run_id) IN ('complete', 'failed') OR (SELECT status FROM runs WHERE id = NEW.run_id) IN ('complete', 'failed')
BEGIN SELECT RAISE(ABORT, 'run is finished and immutable'); END;
)sql");
}

// ---- v4: checksums of stored bytes (blob frames, token arrays); NULL on rows written before -------

constexpr const char* kV4 = R"sql(
ALTER TABLE blobs ADD COLUMN checksum INTEGER;
ALTER TABLE runs ADD COLUMN prompt_tokens_checksum INTEGER;
ALTER TABLE runs ADD COLUMN output_tokens_checksum INTEGER;
)sql";

void step_v3_to_v4(Db& db) { db.exec(kV4); }

// ---- v5: chat prompts: the template's source and the messages; NULL for other prompts ------------

constexpr const char* kV5 = R"sql(
ALTER TABLE runs ADD COLUMN prompt_chat_template TEXT;
ALTER TABLE runs ADD COLUMN prompt_chat_messages TEXT;
)sql";

void step_v4_to_v5(Db& db) { db.exec(kV5); }

// ---- v6: the model's sliding-window layers (comma-separated window per layer); NULL: none -------

constexpr const char* kV6 = R"sql(
ALTER TABLE runs ADD COLUMN model_layer_windows TEXT;
)sql";

void step_v5_to_v6(Db& db) { db.exec(kV6); }

using Step = void (*)(Db&);
constexpr Step kSteps[] = {step_v0_to_v1, step_v1_to_v2, step_v2_to_v3, step_v3_to_v4, step_v4_to_v5, step_v5_to_v6};
static_assert(sizeof(kSteps) / sizeof(kSteps[0]) == kSchemaVersion, "one step per version");

std::string hex32(int64_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v & 0xffffffff));
  return buf;
}

}  // namespace

Header read_header(Db& db) {
  Header h;
  h.application_id = db.query_int("PRAGMA application_id");
  h.user_version = db.query_int("PRAGMA user_version");
  h.n_schema_objects = db.query_int("SELECT count(*) FROM sqlite_schema");
  return h;
}

void check_header(const Db& db, const Header& h) { check_header(db.path(), h); }

void check_header(const std::string& path, const Header& h) {
  const bool empty = h.application_id == 0 && h.user_version == 0 && h.n_schema_objects == 0;
  if (empty) return;
  if (h.application_id != kApplicationId)
    throw SessionError(path, "not a kvscope session database (application_id " + hex32(h.application_id) +
                                 ", expected " + hex32(kApplicationId) + " 'KVSC'); left unchanged");
  if (h.user_version > kSchemaVersion)
    throw SessionError(path, "session schema version " + std::to_string(h.user_version) +
                                 " is newer than this kvscope supports (" + std::to_string(kSchemaVersion) +
                                 "); use a newer kvscope. Left unchanged");
  if (h.user_version < 0)
    throw SessionError(path, "bad session schema version " + std::to_string(h.user_version) + "; left unchanged");
}

void migrate(Db& db) {
  for (int target = 1; target <= kSchemaVersion; ++target) {
    db.write_tx(
        [&] {
          const Header h = read_header(db);
          check_header(db, h);  // re-checked inside the lock: another process may have written
          if (h.user_version >= target) return;
          if (h.user_version != target - 1)
            throw SessionError(db.path(),
                               "schema version " + std::to_string(h.user_version) + " changed during migration");
          kSteps[target - 1](db);
          db.exec("PRAGMA user_version = " + std::to_string(target));
        },
        "migrating session schema to v" + std::to_string(target));
  }
}

}  // namespace kvscope::sessions::detail
