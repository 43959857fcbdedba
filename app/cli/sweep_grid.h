#pragma once
// A sweep grid (TOML, format in README "Sessions, sweeps"): parsed and checked once, before any run.
// Torch-free (the fuzz build compiles this file alone with the parsers).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {
class PolicyCatalog;
}

namespace kvscope::cli {

struct Grid {
  std::filesystem::path file;  ///< the grid file, as given
  /// Model and prompt paths: relative ones resolved against the grid's folder, then made canonical
  /// and absolute (symbolic links and `..` resolved; the file need not exist yet).
  std::vector<std::string> models, prompts;
  std::vector<std::string> pipelines;  ///< SPECs as written
  /// Later user turns of every run, in order (as `run --turn`): each is prefilled onto the same
  /// cache after the previous turn's generation, and the pipeline compresses again. Empty: one turn.
  std::vector<std::string> turns;
  /// Model and prompt paths as sweep keys before format 2 held them: the grid's folder as given on
  /// the command line (often relative to the working directory) / path, lexically normal.
  std::vector<std::string> legacy_models, legacy_prompts;
  std::string budget_unit = "ratio";  ///< as written (a name or alias of budget_unit_table())
  std::vector<double> budgets;
  int64_t max_new_tokens = 32;
  std::string bos = "auto", device = "cpu", dtype = "fp32", capture = "summary";
  std::string pin;  ///< "L:H,...": heads whose selections the timeline records per token ("" = none)
  bool reference_full = true;
  bool allow_beyond_context = false;        ///< runs may go past a model's context (--allow-beyond-context)
  bool allow_prompts_outside_grid = false;  ///< prompts may lie outside the grid's folder
  /// The line (1-based) each value was written on: models[i] on model_lines[i], and so on.
  std::vector<int64_t> model_lines, prompt_lines, pipeline_lines, budget_lines;
  std::map<std::string, int64_t> key_lines;  ///< line of each key given: "device", "budget.unit", ...

  /// "FILE:LINE" (or "FILE" for line 0), the first argument of an InputError about that line.
  std::string where(int64_t line) const;
  /// where() of a top-level key ("device") or [budget] key ("budget.unit"); the file if not given.
  std::string where(const std::string& key) const;
};

/// Reads and parses the grid file. Throws InputError(file, ...) if it cannot be read or is not
/// TOML, and InputError("FILE:LINE", ...) for an unknown key, or a key missing, empty, of the wrong
/// type or out of range (budgets against their unit's range), or a prompt outside the grid's
/// folder without `allow_prompts_outside_grid = true`. With `messages_file` (sweep --messages: one
/// conversation, the prompt of every run) the grid has no `prompts` (refused if it has) and the
/// file, made canonical and absolute, is its one prompt.
Grid parse_grid(const std::filesystem::path& file, const std::string& messages_file = {});

/// The same from the file's text; relative paths resolve against `file`'s folder, errors name `file`.
Grid parse_grid_text(std::string_view text, const std::filesystem::path& file, const std::string& messages_file = {});

/// One pipeline of a grid, checked against the policy catalogue.
struct GridPipeline {
  /// Canonical SPEC (every parameter written out, head-pattern and other path parameters resolved
  /// against the grid's folder and made canonical and absolute): what runs, and what the key holds.
  std::string spec;
  bool uses_budget = true;  ///< false: one run per model and prompt, not one per budget value
};

/// Every pipeline of `g` resolved with `catalog`. Throws InputError("FILE:LINE", "pipeline '...':
/// ...") for the first that is not valid.
std::vector<GridPipeline> resolve_grid_pipelines(const Grid& g, const PolicyCatalog& catalog);

/// Number of runs of the grid: models x prompts x (pipelines that use a budget x budgets + the
/// others), computed without expanding it; UINT64_MAX if that does not fit in 64 bits.
uint64_t grid_run_count(const Grid& g, const std::vector<GridPipeline>& pipelines);

/// Throws InputError("FILE:LINE", ...) for the first model that does not exist, or prompt that is
/// not a readable regular file.
void check_grid_files(const Grid& g);

}  // namespace kvscope::cli
