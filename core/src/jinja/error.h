#pragma once
// The Jinja renderer's error: a message and the template line it belongs to (jinja/ internal;
// Template turns it into kvscope's one-line InputError naming the file and line).
#include <stdexcept>
#include <string>

namespace kvscope::jinja {

/// A syntax error, an unsupported construct or a failure while rendering. line 0: not known yet
/// (the node being evaluated fills it in as the error passes through it).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int line = 0) : std::runtime_error(message), line(line) {}
  int line;
};

}  // namespace kvscope::jinja
