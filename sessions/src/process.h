#pragma once
// Who writes a run, and whether that writer still lives (crash detection for list_runs).
// Private to kvscope_sessions.
#include <cstdint>
#include <optional>
#include <string>

namespace kvscope::sessions::detail {

/// This machine's host name ("" if unknown).
std::string local_hostname();
/// This process's pid.
int64_t self_pid();
/// Start time of process `pid` in clock ticks after boot (/proc/PID/stat field 22), or -1.
int64_t process_start_ticks(int64_t pid);

/// Whether the writer (pid, host, start ticks; start -1 = unknown) is alive: nullopt when it ran
/// on another host (cannot tell). A zombie, or a pid since reused by another process, is dead.
std::optional<bool> writer_alive(int64_t pid, const std::string& host, int64_t start);

}  // namespace kvscope::sessions::detail
