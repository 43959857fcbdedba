#pragma once
// Running the kvscope-cli binary from tests.
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <sys/wait.h>

namespace kvscope::test {

struct CliResult {
  int exit_code;
  std::string out;
};

/// Runs kvscope-cli with `args` (shell-quoted by the caller); stdout, plus stderr if `merge`.
inline CliResult run_cli(const std::string& args, bool merge = false) {
  const std::string cmd = std::string(KVSCOPE_CLI) + " " + args + (merge ? " 2>&1" : " 2>/dev/null");
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// Runs kvscope-cli with `args`; its stderr alone (stdout is discarded).
inline CliResult run_cli_stderr(const std::string& args) {
  return run_cli(args + " 2>&1 >/dev/null #", false);  // '#' comments out run_cli's own redirection
}

inline std::string quote(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

}  // namespace kvscope::test
