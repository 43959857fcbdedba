// kvscope-cli run: generate under a compression pipeline (kept sets, budgets, cache bytes, fidelity).
#include "commands.h"
#include "generation.h"

namespace kvscope::cli {

Runner add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate under a KV-cache compression pipeline");
  auto opts = std::make_shared<ModelOptions>();
  auto comp = std::make_shared<CompressionOptions>();
  opts->add_to(*cmd);
  comp->add_to(*cmd);
  return [opts, comp]() { return execute_generation(*opts, comp.get()); };
}

}  // namespace kvscope::cli
