#pragma once
// Text for a POSIX shell command line (the Slurm scripts of sweep and eval).
#include <string>

namespace kvscope::cli {

/// `text` in single quotes for a POSIX shell (a ' inside becomes '\''), safe for any bytes.
std::string shell_quote(const std::string& text);

}  // namespace kvscope::cli
