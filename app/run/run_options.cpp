#include "run_options.h"

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"

namespace kvscope::run {

BosMode parse_bos_mode(std::string_view text) {
  if (text == "auto") return BosMode::kAuto;
  if (text == "always") return BosMode::kAlways;
  if (text == "never") return BosMode::kNever;
  throw InputError("--bos: '" + std::string(text) + "' is not auto, always or never");
}

LoadOptions load_options(const std::string& device, const std::string& dtype, const std::string& tokenizer) {
  std::optional<c10::Device> dev;
  try {
    dev.emplace(device);
  } catch (const c10::Error&) {
    throw InputError("--device: '" + device + "' is not a device (cpu, cuda or cuda:i)");
  }
  if (dev->is_cuda() && !at::hasCUDA())
    throw InputError("--device " + device + ": this build of kvscope has no CUDA (LibTorch is CPU-only)");
  return LoadOptions{*dev, parse_dtype(dtype), tokenizer};
}

std::unique_ptr<Pipeline> make_pipeline(const PolicyRegistry& registry, const RunOptions& options) {
  if (options.pipeline.empty()) {
    if (options.budget) throw InputError("a budget was given without a pipeline: the full cache takes no budget");
    return nullptr;
  }
  auto pipeline = std::make_unique<Pipeline>(registry, options.pipeline);
  if (pipeline->uses_budget() && !options.budget)
    throw InputError("pipeline '" + options.pipeline + "' needs a budget: give --compression-ratio R or --budget N");
  if (!pipeline->uses_budget() && options.budget)
    throw InputError("pipeline '" + options.pipeline +
                     "' uses no budget (its stages keep what their own settings say): the budget would be unused; "
                     "drop --compression-ratio / --budget");
  if (options.budget) options.budget->validate();
  return pipeline;
}

GenerateRequest make_request(const Model& model, const Pipeline* pipeline, const RunOptions& options) {
  GenerateRequest req;
  if (model.tokenizer)
    req.prompt_ids = prompt_ids(model, options.prompt_text, options.bos);
  else
    req.prompt_ids.assign(1, model.config.bos_token_id >= 0 ? model.config.bos_token_id : 0);
  if (!options.follow_up_turns.empty() && !model.tokenizer)
    throw InputError(model.source, "the model has no tokenizer: cannot encode the follow-up turns");
  for (const auto& t : options.follow_up_turns) req.follow_up_turns.push_back(model.tokenizer->encode(t));
  req.max_new_tokens = options.max_new_tokens;
  req.sampling = options.sampling;
  req.stop_ids = model.stop_token_ids;
  req.prefill_chunk = options.prefill_chunk;
  req.pipeline = pipeline;
  if (pipeline && options.budget) req.budget = *options.budget;
  req.reference_full = options.reference_full && pipeline != nullptr;
  req.capture = options.capture;
  req.capture_window = options.capture_window;
  return req;
}

}  // namespace kvscope::run
