#include "error_report.h"

#include <iostream>
#include <string>

#include "kvscope/core/errors.h"
#include "kvscope/sessions/types.h"
#include "run_options.h"

namespace kvscope::cli {

int report_error(const std::exception& e) {
  // c10::Error::what() appends "Exception raised from ... (most recent call first):" and 7-33
  // lines of frames; run::error_message keeps the message alone.
  std::cerr << "kvscope-cli: error: " << run::error_message(e) << "\n";
  const bool bad_input =
      dynamic_cast<const InputError*>(&e) != nullptr || dynamic_cast<const sessions::SessionError*>(&e) != nullptr;
  return bad_input ? kExitBadInput : kExitRunFailed;
}

int report_usage_error(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
  std::string message = e.what();
  if (const size_t end = message.find('\n'); end != std::string::npos) message.resize(end);
  std::cerr << "kvscope-cli: error: " << message << " (run with --help for usage)\n";
  return kExitBadInput;
}

}  // namespace kvscope::cli
