// kvscope-cli generate: run a model on a prompt with the full cache.
#include <iostream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "model_options.h"

namespace kvscope::cli {

Runner add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate from a prompt with the full KV cache");
  auto opts = std::make_shared<ModelOptions>();
  opts->add_to(*cmd);
  return [opts]() {
    const Model model = opts->load();
    const Engine engine(model);
    GenerateRequest req;
    if (model.tokenizer) req.prompt_ids = prompt_ids(model, opts->prompt_text(), opts->bos_mode());
    else req.prompt_ids.assign(1, model.config.bos_token_id >= 0 ? model.config.bos_token_id : 0);
    req.max_new_tokens = opts->max_new_tokens;
    req.sampling = opts->sampling();
    req.stop_ids = model.stop_token_ids;
    req.prefill_chunk = opts->prefill_chunk;
    const bool stream = !opts->json && model.tokenizer;
    std::vector<int32_t> shown = req.prompt_ids;
    const GenerateResult res = generate(engine, req, [&](int32_t id) {
      if (!stream) return;
      std::cout << decode_continuation(*model.tokenizer, shown, {id}) << std::flush;
      shown.push_back(id);
    });
    const std::string text = model.tokenizer ? decode_continuation(*model.tokenizer, req.prompt_ids, res.output_ids) : "";
    if (!opts->json) {
      std::cout << "\n";
      std::cerr << "prefill " << req.prompt_ids.size() << " tokens in " << res.prefill_ms << " ms, decode "
                << res.decode_tokens_per_s() << " tokens/s\n";
      return 0;
    }
    nlohmann::json j;
    j["input_ids"] = req.prompt_ids;
    j["output_ids"] = res.output_ids;
    j["text"] = text;
    j["timings"] = {{"prefill_ms", res.prefill_ms}, {"decode_tokens_per_s", res.decode_tokens_per_s()}};
    if (opts->dump_last_logits) {
      at::Tensor l = res.last_logits.contiguous();
      j["last_logits"] = std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  };
}

}  // namespace kvscope::cli
