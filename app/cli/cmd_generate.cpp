// kvscope-cli generate: run a model on a prompt with the full cache.
#include "commands.h"
#include "generation.h"

namespace kvscope::cli {

Runner add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate from a prompt with the full KV cache");
  auto opts = std::make_shared<ModelOptions>();
  opts->add_to(*cmd);
  return [opts]() { return execute_generation(*opts, nullptr); };
}

}  // namespace kvscope::cli
