#pragma once
// Reading a JSON file with errors that name it (internal to kvscope_core).
#include <filesystem>

#include <nlohmann/json.hpp>

namespace kvscope {

/// Parses `path` as JSON. Throws InputError(path, "no such file" | "not valid JSON: <where>").
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace kvscope
