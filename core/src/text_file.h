#pragma once
// Reading a whole file into memory with errors that name it (internal to kvscope_core).
#include <filesystem>
#include <string>

namespace kvscope {

/// Why `path` could not be opened: "no such file", "cannot be read", or "cannot be opened: <reason>"
/// (a symlink loop, a component that is not a directory).
std::string missing_file_problem(const std::filesystem::path& path);

/// The bytes of `path`. Throws InputError(path, "no such file" | "cannot be read").
std::string read_text_file(const std::filesystem::path& path);

}  // namespace kvscope
