#include "kvscope/core/generate.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"

namespace kvscope {
namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(const Engine& engine, const GenerateRequest& req, const std::function<void(int32_t)>& on_token) {
  if (req.prompt_ids.empty()) throw InputError("the prompt is empty (give text or use --bos always)");
  GenerateResult res;
  Sampler sampler(req.sampling);
  KvCache cache = engine.new_cache(static_cast<int64_t>(req.prompt_ids.size()) + std::max<int64_t>(req.max_new_tokens, 1));
  auto is_stop = [&](int32_t id) { return std::find(req.stop_ids.begin(), req.stop_ids.end(), id) != req.stop_ids.end(); };

  auto t0 = std::chrono::steady_clock::now();
  at::Tensor logits = engine.prefill(cache, req.prompt_ids, req.prefill_chunk);
  res.last_logits = logits.to(at::kCPU);  // also synchronises the device before the clock stops
  res.prefill_ms = ms_since(t0);
  if (req.max_new_tokens <= 0) return res;

  int32_t next = sampler.next(res.last_logits);
  t0 = std::chrono::steady_clock::now();
  while (!is_stop(next)) {
    res.output_ids.push_back(next);
    if (on_token) on_token(next);
    if (static_cast<int64_t>(res.output_ids.size()) >= req.max_new_tokens) break;
    const int32_t tok[1] = {next};
    logits = engine.forward(cache, tok);
    ++res.decode_steps;
    next = sampler.next(logits);  // reads the result back: the step is complete
  }
  res.decode_ms = ms_since(t0);
  return res;
}

std::vector<int32_t> prompt_ids(const Model& model, const std::string& text, BosMode bos) {
  if (!model.tokenizer) throw InputError(model.source, "this model has no tokenizer");
  std::vector<int32_t> ids;
  const bool add = bos == BosMode::kAlways || (bos == BosMode::kAuto && model.add_bos);
  if (add) {
    if (model.config.bos_token_id < 0) throw InputError(model.source, "--bos always: the model defines no bos_token_id");
    ids.push_back(model.config.bos_token_id);
  }
  const auto body = model.tokenizer->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  if (ids.empty()) throw InputError("the prompt is empty (give text or use --bos always)");
  return ids;
}

std::string decode_continuation(const Tokenizer& tok, const std::vector<int32_t>& context_ids,
                                const std::vector<int32_t>& new_ids) {
  std::vector<int32_t> all = context_ids;
  all.insert(all.end(), new_ids.begin(), new_ids.end());
  const std::string whole = tok.decode(all), prefix = tok.decode(context_ids);
  if (whole.compare(0, prefix.size(), prefix) == 0) return whole.substr(prefix.size());
  return tok.decode(new_ids);
}

}  // namespace kvscope
