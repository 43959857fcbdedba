#pragma once
// Shared helpers for the core tests: repo paths and golden files.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../temp_dir.h"  // TempDir, remove_tree

namespace kvscope::test {

inline std::filesystem::path source_dir() { return KVSCOPE_SOURCE_DIR; }
inline std::filesystem::path pycode_dir() { return source_dir() / "assets/models/pycode-16m"; }
inline std::filesystem::path stories_dir() { return source_dir() / "assets/models/stories260K"; }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json read_json(const std::filesystem::path& p) { return nlohmann::json::parse(read_text(p)); }

/// Golden files of pycode-16m that carry a prompt (copy_probe.json is a summary table).
inline std::vector<std::filesystem::path> pycode_goldens() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(pycode_dir() / "golden"))
    if (e.path().extension() == ".json" && read_json(e.path()).contains("prompt_file")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvscope::test
