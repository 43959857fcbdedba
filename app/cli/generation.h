#pragma once
// The body shared by `generate` and `run`: load, (compress,) generate, print text or JSON.
#include <string>

#include "model_options.h"

namespace kvscope::cli {

/// Compression options of `run` (absent for `generate`).
struct CompressionOptions {
  std::string pipeline;
  double compression_ratio = -1;  ///< < 0: not given
  double budget = -1;
  std::string budget_unit = "stored";
  std::string reference;  ///< "" | "full"
  std::string db;         ///< session database to record the run in ("" = none)
  std::string capture = "summary";
  std::string pin;  ///< "L:H[,L:H...]": heads whose selections the timeline records per token
  std::string name;

  void add_to(CLI::App& cmd);
  /// Sets the pipeline, budget, reference and capture of `run`. Throws InputError for a bad unit.
  void apply_to(run::RunOptions& run) const;
};

/// Runs the generation described by the options and prints it. Returns the exit code.
/// Throws InputError for bad options or files.
int execute_generation(const ModelOptions& model, const CompressionOptions* compression);

}  // namespace kvscope::cli
