#pragma once
// Error types thrown by kvscope_core. Every message names the file (or input) and what is wrong.
#include <filesystem>
#include <stdexcept>
#include <string>

namespace kvscope {

/// A user-supplied file or string is malformed, missing or inconsistent. what() = "<path>: <problem>".
class InputError : public std::runtime_error {
 public:
  InputError(const std::filesystem::path& file, const std::string& problem)
      : std::runtime_error(file.string() + ": " + problem) {}
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

/// The device (GPU or host) ran out of memory during a run. what() says in which phase, how large
/// the work was, and what to try instead (a smaller budget, chunked prefill, fewer new tokens).
/// Nothing is kept of the failed run; the model and engine stay usable.
class ResourceError : public std::runtime_error {
 public:
  explicit ResourceError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kvscope
