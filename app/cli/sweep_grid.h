#pragma once
// A sweep grid (TOML, format in README "Sessions, sweeps"): parsed and checked once, before any run.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::cli {

struct Grid {
  std::vector<std::string> models, prompts, pipelines;  ///< model and prompt paths resolved against the grid's folder
  std::string budget_unit = "ratio";
  std::vector<double> budgets;
  int64_t max_new_tokens = 32;
  std::string bos = "auto", device = "cpu", dtype = "fp32", capture = "summary";
  bool reference_full = true;
  bool allow_beyond_context = false;  ///< runs may go past a model's context (--allow-beyond-context)
};

/// Reads and parses the grid file. Throws InputError(file, ...) if it cannot be read, is not TOML,
/// or a key is missing, empty, of the wrong type or out of range.
Grid parse_grid(const std::filesystem::path& file);

/// The same from the file's text; relative paths resolve against `file`'s folder, errors name `file`.
Grid parse_grid_text(std::string_view text, const std::filesystem::path& file);

}  // namespace kvscope::cli
