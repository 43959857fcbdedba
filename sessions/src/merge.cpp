// SessionStore::merge: copy the runs of shard databases (e.g. one per GPU of a sweep) into one.
#include <sys/stat.h>

#include <set>
#include <utility>

#include "kvscope/sessions/session_store.h"
#include "schema.h"
#include "store_impl.h"

namespace kvscope::sessions {

using detail::Db;
using detail::Stmt;

namespace {

/// Column names of `table` in `db`, in declaration order.
std::vector<std::string> columns(Db& db, const std::string& table) {
  std::vector<std::string> out;
  Stmt s(db, "SELECT name FROM pragma_table_info(?1)");
  s.bind(1, table);
  while (s.step()) out.push_back(s.col_text(0));
  if (out.empty()) throw SessionError(db.path(), "no table " + table);
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep, const std::string& each = "") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + (each.empty() ? "\"" + v[i] + "\"" : each);
  return out;
}

/// Copies the rows of `table` with run_id = `from` in `src` to `dst` under run_id = `to`; the
/// table's own `id` (if any) is left to `dst`.
void copy_rows(Db& src, Db& dst, const std::string& table, bool has_id, int64_t from, int64_t to) {
  std::vector<std::string> cols;
  for (const std::string& c : columns(dst, table))
    if (!(has_id && c == "id")) cols.push_back(c);
  // Rows with their own id keep their relative order (notes oldest first, ...).
  Stmt sel(src,
           "SELECT " + join(cols, ", ") + " FROM \"" + table + "\" WHERE run_id = ?1" + (has_id ? " ORDER BY id" : ""));
  sel.bind(1, from);
  Stmt ins(dst, "INSERT INTO \"" + table + "\" (" + join(cols, ", ") + ") VALUES (" + join(cols, ", ", "?") + ")");
  while (sel.step()) {
    ins.reset();
    for (size_t c = 0; c < cols.size(); ++c) {
      const int i = static_cast<int>(c);
      if (cols[c] == "run_id")
        ins.bind(i + 1, to);
      else
        ins.bind_value(i + 1, sel.col_value(i));
    }
    ins.run();
  }
}

/// Copies run `from` of `src` with all its rows into `dst`; returns the new id. The run is
/// inserted as running (so the immutability triggers let its rows in) and given its status last.
int64_t copy_run(Db& src, Db& dst, int64_t from, const std::string& status) {
  std::vector<std::string> cols;
  for (const std::string& c : columns(dst, "runs"))
    if (c != "id") cols.push_back(c);
  Stmt sel(src, "SELECT " + join(cols, ", ") + " FROM runs WHERE id = ?1");
  sel.bind(1, from);
  if (!sel.step()) throw SessionError(src.path(), "run " + std::to_string(from) + " vanished during merge");
  Stmt ins(dst, "INSERT INTO runs (" + join(cols, ", ") + ") VALUES (" + join(cols, ", ", "?") + ")");
  for (size_t c = 0; c < cols.size(); ++c) {
    const int i = static_cast<int>(c);
    if (cols[c] == "status")
      ins.bind(i + 1, "running");
    else
      ins.bind_value(i + 1, sel.col_value(i));
  }
  ins.run();
  const int64_t to = sqlite3_last_insert_rowid(dst.handle());
  for (const auto& t : detail::kChildTables) copy_rows(src, dst, t.name, t.has_id, from, to);
  if (status != "running") Stmt(dst, "UPDATE runs SET status = ?1 WHERE id = ?2").bind(1, status).bind(2, to).run();
  return to;
}

std::set<std::string> complete_keys(Db& db) {
  std::set<std::string> out;
  Stmt s(db, "SELECT sweep_key FROM runs WHERE status = 'complete' AND sweep_key IS NOT NULL");
  while (s.step()) out.insert(s.col_text(0));
  return out;
}

std::pair<dev_t, ino_t> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

}  // namespace

MergeReport SessionStore::merge(const std::string& out_path, const std::vector<std::string>& inputs) {
  // Inputs first (all checked before the output is created or touched).
  std::vector<SessionStore> ins;
  std::set<std::pair<dev_t, ino_t>> seen;
  if (const auto out_id = file_id(out_path); out_id != std::pair<dev_t, ino_t>{0, 0}) seen.insert(out_id);
  for (const std::string& p : inputs) {
    const auto id = file_id(p);
    if (id != std::pair<dev_t, ino_t>{0, 0} && !seen.insert(id).second)
      throw SessionError(p, "merge: given twice, or the same file as the output " + out_path);
    ins.push_back(open(p, OpenMode::kReadOnly));
  }
  SessionStore out = open(out_path);

  MergeReport report;
  Db& dst = *out.impl_->db;
  // Each input is read inside one transaction: a consistent snapshot even if a sweep still writes it.
  for (SessionStore& in : ins) in.impl_->db->exec("BEGIN");
  try {
    std::set<std::string> anywhere;  // keys some database already completed
    for (SessionStore& in : ins) anywhere.merge(complete_keys(*in.impl_->db));
    dst.write_tx(
        [&] {
          report = MergeReport();
          std::set<std::string> done = complete_keys(dst);
          anywhere.insert(done.begin(), done.end());
          for (SessionStore& in : ins) {
            Db& src = *in.impl_->db;
            struct Src {
              int64_t id;
              std::string status;
              std::optional<std::string> key;
            };
            std::vector<Src> runs;
            {
              Stmt s(src, "SELECT id, status, sweep_key FROM runs ORDER BY id");
              while (s.step()) runs.push_back({s.col_int(0), s.col_text(1), s.col_opt_text(2)});
            }
            for (const Src& r : runs) {
              if (r.key) {
                const bool complete = r.status == "complete";
                if ((complete && done.count(*r.key)) || (!complete && anywhere.count(*r.key))) {
                  ++report.runs_skipped;
                  continue;
                }
                if (complete) done.insert(*r.key);
              }
              // Damaged rows are not copied: the merged file would carry them under new ids.
              std::vector<std::string> problems;
              detail::run_problems(src, r.id, problems);
              if (!problems.empty())
                throw SessionError(src.path(),
                                   problems.front() +
                                       (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)"
                                                            : std::string()) +
                                       "; nothing was merged (`kvscope-cli check " + src.path() +
                                       "` lists what is damaged)");
              copy_run(src, dst, r.id, r.status);
              ++report.runs_copied;
            }
          }
        },
        "merge");
  } catch (...) {
    for (SessionStore& in : ins) in.impl_->db->rollback();
    throw;
  }
  for (SessionStore& in : ins) in.impl_->db->rollback();
  return report;
}

}  // namespace kvscope::sessions
