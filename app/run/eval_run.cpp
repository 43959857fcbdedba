#include "eval_run.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kvscope/core/attention.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/eval_score.h"
#include "kvscope/core/generate.h"
#include "run_options.h"
#include "session_record.h"

namespace kvscope::run {

std::string_view question_mode_name(QuestionMode mode) {
  return mode == QuestionMode::kAgnostic ? "question-agnostic" : "question-aware";
}

std::vector<int32_t> compressed_prompt(const EvalPrompt& p, QuestionMode mode) {
  const bool split =
      mode == QuestionMode::kAgnostic && p.question_start > 0 && p.question_start < static_cast<int64_t>(p.ids.size());
  return split ? std::vector<int32_t>(p.ids.begin(), p.ids.begin() + p.question_start) : p.ids;
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

std::vector<float> needle_attention_share(const Engine& engine, const std::vector<int32_t>& ids, int64_t first_query,
                                          const std::vector<TextSpan>& needles) {
  const ModelConfig& c = engine.model().config;
  const auto n = static_cast<int64_t>(ids.size());
  if (n == 0) throw InputError("needle attention: no tokens");
  std::vector<float> mask(static_cast<size_t>(n), 0.0f);
  bool any = false;
  for (const TextSpan& s : needles) {
    any = any || s.end > s.begin;
    for (int64_t p = std::max<int64_t>(s.begin, 0); p < std::min(s.end, n); ++p) mask[static_cast<size_t>(p)] = 1;
  }
  if (!any) return {};
  first_query = std::clamp<int64_t>(first_query, 0, n - 1);
  const int64_t W = n - first_query, H = c.n_head, Hkv = c.n_head_kv, G = H / Hkv;
  const at::Tensor needle = at::tensor(mask).to(engine.model().device);  // fp32 [n]
  at::Tensor total = at::zeros({c.n_layer, Hkv}, needle.options());      // needle mass sums
  // The engine's attention (gqa_attention, with the layer's scale, softcap and window) of the
  // window's queries in fp32, with the needle indicator as every value channel: each output channel
  // is the query head's attention mass on the needle.
  const LayerObserver observe = [&](const LayerEvent& ev) {
    const at::Tensor keys = ev.cache.keys(ev.layer).to(at::kFloat);  // [Hkv, n, D]: a fresh cache, positions 0..n-1
    const at::Tensor values = needle.view({1, n, 1}).expand_as(keys);
    const AttentionShape shape{c.attn_scale, c.attn_softcap, c.window(ev.layer)};
    const at::Tensor o =
        gqa_attention(ev.q.narrow(0, first_query, W).to(at::kFloat).reshape({W, H, keys.size(2)}), keys, values, shape);
    // [W, H * D] -> channel 0 of each query head, summed over the window and the GQA group: [Hkv]
    total[ev.layer].copy_(o.view({W, Hkv, G, -1}).select(3, 0).sum(at::IntArrayRef{0, 2}));
  };
  KvCache cache = engine.new_cache(n);
  engine.prefill(cache, ids, /*chunk=*/0, /*all_logits=*/false, observe);
  const at::Tensor mean = (total / static_cast<double>(G * W)).clamp(0, 1).contiguous().cpu();
  return {mean.data_ptr<float>(), mean.data_ptr<float>() + mean.numel()};
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string sample_json(const EvalSample& s, const EvalPrompt& p, QuestionMode mode) {
  nlohmann::ordered_json j;
  j["id"] = s.id;
  j["task"] = s.task;
  j["length"] = s.length;
  j["chat"] = s.chat;
  j["answers"] = s.answers;
  j["metric"] = s.metric;
  if (!s.all_classes.empty()) j["all_classes"] = s.all_classes;
  if (s.first_line) j["first_line"] = true;
  j["max_new_tokens"] = s.max_new_tokens;
  if (!s.turns.empty()) {
    j["turns"] = nlohmann::ordered_json::array();
    for (const EvalTurn& t : s.turns) j["turns"].push_back({{"question", t.question}, {"answers", t.answers}});
  }
  j["mode"] = question_mode_name(mode);
  j["question_start"] = p.question_start;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

/// A text (JSON) as a u8 blob of the run.
sessions::Blob text_blob(const std::string& name, const std::string& text) {
  return sessions::Blob::of<uint8_t>(name, -1, -1, {static_cast<int64_t>(text.size())},
                                     std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

EvalRunResult run_eval_item(const Engine& engine, const PolicyRegistry& registry, const EvalItem& item,
                            sessions::SessionStore* store, const std::string& name,
                            const std::optional<std::string>& sweep_key, CaptureLevel capture) {
  const Model& model = engine.model();
  const EvalSample& s = *item.sample;
  const EvalPrompt& p = *item.prompt;
  // Question-agnostic with a pipeline: the context is compressed, the question follows.
  std::vector<int32_t> compressed = item.pipeline ? compressed_prompt(p, item.mode) : p.ids;
  const bool split = compressed.size() < p.ids.size();
  RunOptions options;
  options.prompt_ids = std::move(compressed);
  options.budget = item.budget;
  options.max_new_tokens = s.max_new_tokens;
  options.capture = store ? capture : CaptureLevel::kOff;
  GenerateRequest req = make_request(model, item.pipeline, options);
  req.follow_up_turns = p.turn_ids;
  if (split) req.question_ids.assign(p.ids.begin() + p.question_start, p.ids.end());
  if (item.pipeline && item.shared) req.shared = item.shared;
  const int64_t needed = positions_needed(req), context = model.config.max_position_embeddings;
  if (needed > context)
    throw InputError("sample '" + s.id + "': the prompt is " + std::to_string(p.ids.size()) + " tokens" +
                     (p.turn_ids.empty() ? "" : " (" + std::to_string(p.turn_ids.size() + 1) + " turns)") + " and " +
                     std::to_string(s.max_new_tokens) + " more may be generated" +
                     (p.turn_ids.empty() ? "" : " per turn") + ": " + std::to_string(needed) +
                     " > the model's context of " + std::to_string(context) + " tokens");
  EvalRunResult out;
  auto finish = [&](const GenerateResult& res) {
    out.output_ids = res.output_ids;
    out.output = model.tokenizer ? model.tokenizer->decode(res.output_ids) : std::string();
    out.score = score(s, out.output);
    out.needle_kept = needle_kept_share(res.kept, p.needle_ids);
    if (s.turns.empty()) return;
    // Each later turn scored against its own answers; a turn generation never reached scores 0.
    out.turn_outputs = {out.output};
    out.turn_scores = {out.score};
    for (size_t t = 0; t < s.turns.size(); ++t) {
      const size_t r = t + 1;
      const std::string text = r < res.turn_output_ids.size() && model.tokenizer
                                   ? model.tokenizer->decode(res.turn_output_ids[r])
                                   : std::string();
      out.turn_outputs.push_back(text);
      out.turn_scores.push_back(r < res.turn_output_ids.size()
                                    ? score(s.metric, text, s.turns[t].answers, s.all_classes, s.first_line)
                                    : 0.0);
    }
    double sum = 0;
    for (double v : out.turn_scores) sum += v;
    out.score = sum / static_cast<double>(out.turn_scores.size());
  };
  auto run_generate = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    GenerateResult res = generate(engine, req);
    out.timing.generate_ms = ms_since(t0);
    out.timing.prefill_ms = res.prefill_ms;
    out.timing.decode_ms = res.decode_ms;
    return res;
  };
  if (!store) {
    finish(run_generate());
    return out;
  }
  const auto t_record = std::chrono::steady_clock::now();
  out.run_id = store->begin_run(run_info(model, item.pipeline, registry, req, p.text, name, sweep_key));
  try {
    const GenerateResult res = run_generate();
    finish(res);
    // The sample's record goes in before record_results marks the run complete: a run killed
    // between the two is not taken for a finished one when the evaluation resumes.
    store->set_summary(out.run_id, "eval_score", out.score);
    std::vector<sessions::Blob> blobs;
    if (!out.turn_scores.empty()) {  // every turn's output and score (docs/eval.md)
      nlohmann::json turns = nlohmann::json::array();
      for (size_t t = 0; t < out.turn_scores.size(); ++t)
        turns.push_back({{"output", out.turn_outputs[t]}, {"score", out.turn_scores[t]}});
      blobs.push_back(text_blob("eval_turns", turns.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    }
    blobs.push_back(text_blob("eval_sample", sample_json(s, p, item.mode)));
    std::vector<int64_t> spans;
    for (const TextSpan& t : p.needle_ids) spans.insert(spans.end(), {t.begin, t.end});
    blobs.push_back(sessions::Blob::of<int64_t>("needle_tokens", -1, -1, {int64_t(p.needle_ids.size()), 2}, spans));
    if (!out.needle_kept.empty())
      blobs.push_back(sessions::Blob::of<float>("needle_kept", -1, -1, {model.config.n_layer, model.config.n_head_kv},
                                                out.needle_kept));
    if (!item.pipeline && !p.needle_ids.empty()) {
      // The full cache's attention to the needle from the question and answer steps: one more
      // forward, of the prompt and the output (the full cache is the same in either question mode).
      std::vector<int32_t> ids = p.ids;
      ids.insert(ids.end(), res.output_ids.begin(), res.output_ids.end());
      out.needle_attention = needle_attention_share(engine, ids, p.question_start, p.needle_ids);
      if (!out.needle_attention.empty())
        blobs.push_back(sessions::Blob::of<float>(
            "needle_attention", -1, -1, {model.config.n_layer, model.config.n_head_kv}, out.needle_attention));
    }
    store->add_blobs(out.run_id, blobs);
    record_results(*store, out.run_id, model, req, res);
    out.timing.record_ms = ms_since(t_record) - out.timing.generate_ms;
  } catch (const std::exception& e) {
    store->fail_run(out.run_id, error_message(e));
    throw;
  }
  return out;
}

}  // namespace kvscope::run
