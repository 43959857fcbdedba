#include "error_report.h"

#include <iostream>
#include <string>

#include <c10/util/Exception.h>

#include "kvscope/core/errors.h"
#include "kvscope/sessions/types.h"

namespace kvscope::cli {
namespace {

std::string first_line(const std::string& text) {
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

}  // namespace

int report_error(const std::exception& e) {
  // c10::Error::what() appends "Exception raised from ... (most recent call first):" and 12-33
  // lines of frames; what_without_backtrace() is the message alone.
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::cerr << "kvscope-cli: error: " << first_line(torch_error ? torch_error->what_without_backtrace() : e.what())
            << "\n";
  const bool bad_input =
      dynamic_cast<const InputError*>(&e) != nullptr || dynamic_cast<const sessions::SessionError*>(&e) != nullptr;
  return bad_input ? kExitBadInput : kExitRunFailed;
}

int report_usage_error(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
  std::cerr << "kvscope-cli: error: " << first_line(e.what()) << " (run with --help for usage)\n";
  return kExitBadInput;
}

}  // namespace kvscope::cli
