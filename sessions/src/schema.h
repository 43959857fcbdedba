#pragma once
// The schema of a session database and its one migration ladder (v0 -> v1 -> ... -> v5).
// Private to kvscope_sessions; the user-facing description is docs/sessions.md.
#include <cstdint>

#include "sqlite_db.h"

namespace kvscope::sessions::detail {

inline constexpr int32_t kApplicationId = 0x4B565343;  // "KVSC"
inline constexpr int kSchemaVersion = 6;

/// What the header of an existing database says.
struct Header {
  int64_t application_id = 0;
  int64_t user_version = 0;
  int64_t n_schema_objects = 0;  ///< rows of sqlite_schema
};
Header read_header(Db& db);

/// Throws SessionError (naming the file, saying it was left unchanged) unless `h` is a kvscope
/// database of version <= kSchemaVersion or an empty database.
void check_header(const Db& db, const Header& h);
/// The same, naming `path`.
void check_header(const std::string& path, const Header& h);

/// Brings `db` to kSchemaVersion, one BEGIN IMMEDIATE transaction per step; each step re-reads
/// the version inside its transaction, so concurrent openers migrate once.
void migrate(Db& db);

/// Tables that hang off runs(id) through a run_id column, in foreign-key order, and whether
/// they have their own INTEGER PRIMARY KEY `id` (remapped on merge).
struct ChildTable {
  const char* name;
  bool has_id;
};
inline constexpr ChildTable kChildTables[] = {
    {"pipeline_stages", false},
    {"pipeline_params", false},
    {"step_metrics", false},
    {"summary_metrics", false},
    {"blobs", true},
    {"notes", true},
    {"bookmarks", true},
};

}  // namespace kvscope::sessions::detail
