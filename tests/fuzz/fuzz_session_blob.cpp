// libFuzzer: reading a captured blob (the per-head, per-step statistics the views draw) whose row
// holds anything: the input is "DTYPE\nSHAPE\nRAW_SIZE\n" then the stored bytes (a zstd frame or
// not), written into a real session database with a matching checksum (so decoding, not the
// checksum, is what is fuzzed), then read with load_blob, load_run and check.
// Oracle: SessionError only; a blob that loads holds exactly numel x dtype-size bytes of its
// declared shape, numel is computable without overflow, and check() reports a blob it could not
// decode.
#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "codec.h"
#include "kvscope/sessions/session_store.h"

namespace {

using kvscope::sessions::SessionStore;

/// The database with one (running) run and one blob, made once per process.
const std::string& database() {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string p =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/kvscope_fuzz_blob_" + std::to_string(::getpid()) + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((p + suffix).c_str());
    auto store = SessionStore::open(p);
    kvscope::sessions::RunInfo info;
    info.name = "fuzz";
    const int64_t run = store.begin_run(info);
    kvscope::sessions::Blob b;
    b.name = "attn_mass";
    b.layer = 0;
    b.head = 0;
    b.dtype = kvscope::sessions::DType::kF32;
    b.shape = {2};
    b.data.assign(8, 0);
    store.add_blob(run, b);  // the run stays 'running': a finished run's rows are frozen by a trigger
    return p;
  }();
  return path;
}

std::string_view line(std::string_view& rest) {
  const size_t nl = rest.find('\n');
  std::string_view l = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = database();
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string dtype(line(rest)), shape(line(rest)), raw(line(rest));
  const std::vector<uint8_t> stored(rest.begin(), rest.end());
  {
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) std::abort();
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "UPDATE blobs SET dtype = ?1, shape = ?2, raw_size = ?3, data = ?4, checksum = ?5", -1, &st,
                       nullptr);
    sqlite3_bind_text(st, 1, dtype.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, shape.c_str(), -1, SQLITE_TRANSIENT);
    if (raw == "null")
      sqlite3_bind_null(st, 3);
    else
      sqlite3_bind_int64(st, 3, std::strtoll(raw.c_str(), nullptr, 10));
    sqlite3_bind_blob(st, 4, stored.data(), int(stored.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, int64_t(kvscope::sessions::detail::crc32(stored)));
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (rc != SQLITE_DONE) return 0;  // the schema's CHECK constraints refuse the row: nothing to read
  }
  try {
    auto store = SessionStore::open(path, kvscope::sessions::OpenMode::kReadOnly);
    const auto runs = store.list_runs();
    if (runs.size() != 1) std::abort();
    bool loaded = false;
    try {
      (void)store.load_run(runs[0].id);
      if (const auto b = store.load_blob(runs[0].id, "attn_mass", 0, 0)) {
        loaded = true;
        const int64_t n = b->numel();
        if (n < 0 || n > kvscope::sessions::detail::kMaxBlobElements) std::abort();
        if (b->data.size() != size_t(n) * kvscope::sessions::dtype_size(b->dtype)) std::abort();
      }
    } catch (const kvscope::sessions::SessionError&) {
    }
    const auto report = store.check();
    if (!loaded && report.ok()) std::abort();  // a blob nobody can read must not pass the check
  } catch (const kvscope::sessions::SessionError&) {
  }
  return 0;
}
