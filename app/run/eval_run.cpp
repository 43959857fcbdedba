#include "eval_run.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "kvscope/core/eval_score.h"
#include "kvscope/core/generate.h"
#include "run_options.h"
#include "session_record.h"

namespace kvscope::run {

std::string_view question_mode_name(QuestionMode mode) {
  return mode == QuestionMode::kAgnostic ? "question-agnostic" : "question-aware";
}

std::vector<float> needle_kept_share(const std::vector<std::vector<std::vector<int64_t>>>& kept,
                                     const std::vector<TextSpan>& needles) {
  std::vector<int64_t> positions;
  for (const TextSpan& s : needles)
    for (int64_t p = s.begin; p < s.end; ++p) positions.push_back(p);
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  if (positions.empty()) return {};
  std::vector<float> shares;
  for (const auto& layer : kept)
    for (const auto& head : layer) {
      int64_t hit = 0;
      for (int64_t p : positions) hit += std::binary_search(head.begin(), head.end(), p);
      shares.push_back(static_cast<float>(hit) / static_cast<float>(positions.size()));
    }
  return shares;
}

namespace {

std::string sample_json(const EvalSample& s, const EvalPrompt& p, QuestionMode mode) {
  nlohmann::ordered_json j;
  j["id"] = s.id;
  j["task"] = s.task;
  j["length"] = s.length;
  j["chat"] = s.chat;
  j["answers"] = s.answers;
  j["metric"] = s.metric;
  j["max_new_tokens"] = s.max_new_tokens;
  j["mode"] = question_mode_name(mode);
  j["question_start"] = p.question_start;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

EvalRunResult run_eval_item(const Engine& engine, const PolicyRegistry& registry, const EvalItem& item,
                            sessions::SessionStore* store, const std::string& name,
                            const std::optional<std::string>& sweep_key, CaptureLevel capture) {
  const Model& model = engine.model();
  const EvalSample& s = *item.sample;
  const EvalPrompt& p = *item.prompt;
  const bool split = item.mode == QuestionMode::kAgnostic && item.pipeline && p.question_start > 0 &&
                     p.question_start < static_cast<int64_t>(p.ids.size());
  RunOptions options;
  options.prompt_ids = split ? std::vector<int32_t>(p.ids.begin(), p.ids.begin() + p.question_start) : p.ids;
  options.budget = item.budget;
  options.max_new_tokens = s.max_new_tokens;
  options.capture = store ? capture : CaptureLevel::kOff;
  GenerateRequest req = make_request(model, item.pipeline, options);
  if (split) req.question_ids.assign(p.ids.begin() + p.question_start, p.ids.end());
  if (split && item.shared) req.shared = item.shared;
  const int64_t needed = positions_needed(req), context = model.config.max_position_embeddings;
  if (needed > context)
    throw InputError("sample '" + s.id + "': the prompt is " + std::to_string(p.ids.size()) + " tokens and " +
                     std::to_string(s.max_new_tokens) + " more may be generated: " + std::to_string(needed) +
                     " > the model's context of " + std::to_string(context) + " tokens");
  EvalRunResult out;
  auto finish = [&](const GenerateResult& res) {
    out.output_ids = res.output_ids;
    out.output = model.tokenizer ? model.tokenizer->decode(res.output_ids) : std::string();
    out.score = score(s.metric, out.output, s.answers);
    out.needle_kept = needle_kept_share(res.kept, p.needle_ids);
  };
  if (!store) {
    finish(generate(engine, req));
    return out;
  }
  out.run_id = store->begin_run(run_info(model, item.pipeline, registry, req, p.text, name, sweep_key));
  try {
    const GenerateResult res = generate(engine, req);
    finish(res);
    // The sample's record goes in before record_results marks the run complete: a run killed
    // between the two is not taken for a finished one when the evaluation resumes.
    store->set_summary(out.run_id, "eval_score", out.score);
    const std::string js = sample_json(s, p, item.mode);
    store->add_blob(out.run_id, sessions::Blob::of<uint8_t>("eval_sample", -1, -1, {int64_t(js.size())},
                                                            std::vector<uint8_t>(js.begin(), js.end())));
    std::vector<int64_t> spans;
    for (const TextSpan& t : p.needle_ids) spans.insert(spans.end(), {t.begin, t.end});
    store->add_blob(out.run_id,
                    sessions::Blob::of<int64_t>("needle_tokens", -1, -1, {int64_t(p.needle_ids.size()), 2}, spans));
    if (!out.needle_kept.empty())
      store->add_blob(out.run_id,
                      sessions::Blob::of<float>("needle_kept", -1, -1, {model.config.n_layer, model.config.n_head_kv},
                                                out.needle_kept));
    record_results(*store, out.run_id, model, req, res);
  } catch (const std::exception& e) {
    store->fail_run(out.run_id, error_message(e));
    throw;
  }
  return out;
}

}  // namespace kvscope::run
