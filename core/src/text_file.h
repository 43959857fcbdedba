#pragma once
// Reading a whole file into memory with errors that name it (internal to kvscope_core).
#include <filesystem>
#include <string>

namespace kvscope {

/// The bytes of `path`. Throws InputError(path, "no such file" | "cannot be read").
std::string read_text_file(const std::filesystem::path& path);

}  // namespace kvscope
