// libFuzzer: opening a session database (SQLite file format, application_id, user_version,
// migration ladder, schema checks), read-only then read-write, and reading what it lists.
// Oracle: bad files throw SessionError only, and a refused file is left byte-identical.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "kvscope/sessions/session_store.h"

namespace {

std::string scratch_path() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/kvscope_fuzz_session_" + std::to_string(::getpid()) + ".db";
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void remove_db(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

/// Opens `path` in `mode` and reads every listed run. A refusal at open must leave the file as it was.
void open_and_read(const std::string& path, kvscope::sessions::OpenMode mode, const std::string& before) {
  bool opened = false;
  try {
    auto store = kvscope::sessions::SessionStore::open(path, mode);
    opened = true;
    for (const auto& row : store.list_runs()) (void)store.load_run(row.id);
  } catch (const kvscope::sessions::SessionError&) {
    if (!opened && read_all(path) != before) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = scratch_path();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  remove_db(path);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  open_and_read(path, kvscope::sessions::OpenMode::kReadOnly, bytes);
  if (read_all(path) != bytes) std::abort();  // read-only never writes the file
  open_and_read(path, kvscope::sessions::OpenMode::kReadWrite, bytes);
  remove_db(path);
  return 0;
}
