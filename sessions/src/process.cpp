#include "process.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace kvscope::sessions::detail {

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

int64_t self_pid() { return static_cast<int64_t>(::getpid()); }

namespace {
/// State letter and start ticks from /proc/PID/stat; false when the file cannot be read.
bool read_stat(int64_t pid, char& state, int64_t& start) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // Fields after the name start at number 3 (state); starttime is number 22.
  for (int n = 3; n <= 22 && rest >> field; ++n) {
    if (n == 3) state = field.empty() ? '?' : field[0];
    if (n == 22) {
      start = std::stoll(field);
      return true;
    }
  }
  return false;
}
}  // namespace

int64_t process_start_ticks(int64_t pid) {
  char state = '?';
  int64_t start = -1;
  return read_stat(pid, state, start) ? start : -1;
}

std::optional<bool> writer_alive(int64_t pid, const std::string& host, int64_t start) {
  if (pid <= 0) return false;
  if (host != local_hostname()) return std::nullopt;
  char state = '?';
  int64_t ticks = -1;
  if (read_stat(pid, state, ticks)) {
    if (state == 'Z' || state == 'X') return false;
    return start < 0 || ticks == start;
  }
  static const bool have_proc = [] {
    std::ifstream in("/proc/self/stat");
    return static_cast<bool>(in);
  }();
  if (have_proc) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace kvscope::sessions::detail
