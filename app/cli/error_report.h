#pragma once
// How kvscope-cli reports what ends it: one line on stderr and an exit code (README "CLI" lists them).
#include <exception>

#include <CLI/CLI.hpp>

namespace kvscope::cli {

/// Exit codes of kvscope-cli.
enum ExitCode : int {
  kExitSuccess = 0,
  kExitRunFailed = 1,  ///< a run failed: out of memory, a LibTorch error, a failed sweep item
  kExitBadInput = 2,   ///< bad input: a usage error, an option value, a file, a session database
};

/// Prints "kvscope-cli: error: <one line>" for `e` and returns its exit code: kExitBadInput for
/// InputError and SessionError, kExitRunFailed otherwise. A LibTorch error (c10::Error) prints its
/// message without the C++ stack trace its what() carries; any message prints its first line only.
int report_error(const std::exception& e);

/// A command-line usage error from CLI11 as one line with kExitBadInput (CLI11's own codes are
/// 105-114); --help and --version print as CLI11 does and return kExitSuccess.
int report_usage_error(const CLI::App& app, const CLI::ParseError& e);

}  // namespace kvscope::cli
