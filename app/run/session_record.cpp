#include "session_record.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "kvscope/sessions/timeline_blobs.h"
#include "kvscope/sessions/turn_blobs.h"
#include "run_options.h"

namespace kvscope::run {
namespace {

/// Hex hash of the model's shape and source, to tell checkpoints apart.
std::string config_hash(const Model& m) {
  const ModelConfig& c = m.config;
  std::ostringstream os;
  os << c.model_type << c.vocab_size << ':' << c.hidden_size << ':' << c.intermediate_size << ':' << c.n_layer << ':'
     << c.n_head << ':' << c.n_head_kv << ':' << c.head_dim << ':' << c.rope_theta << ':' << c.rms_norm_eps << ':'
     << c.tie_word_embeddings << ':' << c.qkv_bias << ':' << m.weights.bytes();
  std::ostringstream hex;
  hex << std::hex << std::hash<std::string>{}(os.str());
  return hex.str();
}

sessions::Blob f32_blob(const std::string& name, int64_t layer, const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  return sessions::Blob::of<float>(name, layer, -1, c.sizes().vec(),
                                   std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel()));
}

}  // namespace

sessions::PromptInfo recorded_prompt(const RunOptions& options) {
  sessions::PromptInfo p;
  p.text = options.chat ? options.chat->text : options.prompt_text;
  if (options.chat) {
    p.chat_template = options.chat->source;
    p.chat_messages = options.chat->messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  return p;
}

sessions::RunInfo run_info(const Model& model, const Pipeline* pipeline, const PolicyRegistry& registry,
                           const GenerateRequest& req, const std::string& prompt_text, const std::string& name,
                           const std::optional<std::string>& sweep_key) {
  sessions::PromptInfo prompt;
  prompt.text = prompt_text;
  return run_info(model, pipeline, registry, req, prompt, name, sweep_key);
}

sessions::RunInfo run_info(const Model& model, const Pipeline* pipeline, const PolicyRegistry& registry,
                           const GenerateRequest& req, const sessions::PromptInfo& prompt, const std::string& name,
                           const std::optional<std::string>& sweep_key) {
  sessions::RunInfo info;
  info.name = name;
  const ModelConfig& c = model.config;
  info.model = {model.source.string(),   config_hash(model), c.model_type, c.n_layer, c.n_head, c.n_head_kv, c.head_dim,
                dtype_name(model.dtype), model.device.str()};
  info.model.layer_window = c.layer_window;  // sliding layers: never compressed (Budgets says so)
  if (pipeline) {
    info.pipeline.spec = pipeline->canonical();
    for (const auto& p : pipeline->stages()) {
      sessions::PipelineStage st{std::string(stage_key(p->stage())), p->name(), {}};
      const auto& spec = registry.catalog().at(p->name()).params;
      for (const auto& [k, v] : p->params()) {
        auto it = std::find_if(spec.begin(), spec.end(), [&](const ParamSpec& s) { return s.key == k; });
        st.params.push_back({k, it == spec.end() ? ParamType::kChoice : it->type, v});
      }
      info.pipeline.stages.push_back(std::move(st));
    }
    info.budget = {req.budget.unit, req.budget.value};
  } else {
    info.pipeline.spec = "full";
    info.budget = {BudgetUnit::kFraction, 1.0};
  }
  info.prompt = prompt;
  info.prompt.tokens = req.prompt_ids;  // and a question-agnostic run's question after it: the whole prompt
  info.prompt.tokens.insert(info.prompt.tokens.end(), req.question_ids.begin(), req.question_ids.end());
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  info.env = {"0.1.0", TORCH_VERSION, model.device.is_cuda() ? "cuda" : "cpu", host};
  info.sweep_key = sweep_key;
  return info;
}

void record_results(sessions::SessionStore& store, int64_t run, const Model& model, const GenerateRequest& req,
                    const GenerateResult& res) {
  std::vector<sessions::StepMetric> steps;
  // Fidelity entry i belongs to generated token i (generate.h Fidelity); token ids are exact in a double.
  const Fidelity& fid = res.fidelity;
  for (size_t i = 0; i < fid.kl.size(); ++i) {
    steps.push_back({int64_t(i), "kl", fid.kl[i]});
    steps.push_back({int64_t(i), "top1", double(fid.top1[i])});
    if (i < fid.token.size()) steps.push_back({int64_t(i), "token_id", double(fid.token[i])});
    if (i < fid.full_top.size()) steps.push_back({int64_t(i), "full_top_id", double(fid.full_top[i])});
    if (i < fid.p_token.size()) steps.push_back({int64_t(i), "p_token", fid.p_token[i]});
    if (i < fid.p_full_top.size()) steps.push_back({int64_t(i), "p_full_top", fid.p_full_top[i]});
    if (i < fid.p_full_token.size()) steps.push_back({int64_t(i), "p_full_token", fid.p_full_token[i]});
  }
  for (size_t i = 0; i < res.bytes_read.size(); ++i)
    steps.push_back({int64_t(i + 1), "bytes_read", double(res.bytes_read[i])});
  for (size_t i = 0; i < res.selection_recall.size(); ++i)
    steps.push_back({int64_t(i + 1), "selection_recall", res.selection_recall[i]});
  if (!steps.empty()) store.add_step_metrics(run, steps);

  // Kept prompt positions per (layer, KV head), the per-head capture and the timeline: hundreds of
  // blobs, compressed together (SessionStore::add_blobs).
  std::vector<sessions::Blob> blobs;
  for (size_t l = 0; l < res.kept.size(); ++l)
    for (size_t h = 0; h < res.kept[l].size(); ++h) {
      const auto& k = res.kept[l][h];
      blobs.push_back(sessions::Blob::of<int64_t>("kept_positions", int64_t(l), int64_t(h), {int64_t(k.size())}, k));
    }
  for (size_t l = 0; l < res.captures.size(); ++l) {
    const LayerCapture& c = res.captures[l];
    if (c.summary.defined()) blobs.push_back(f32_blob("head_summary", int64_t(l), c.summary));
    if (c.attention.defined()) blobs.push_back(f32_blob("attention", int64_t(l), c.attention));
    if (c.cos_to_mean.defined()) blobs.push_back(f32_blob("cos_to_mean", int64_t(l), c.cos_to_mean));
    if (c.channel_mean.defined()) blobs.push_back(f32_blob("channel_mean", int64_t(l), c.channel_mean));
    if (c.channel_cv.defined()) blobs.push_back(f32_blob("channel_cv", int64_t(l), c.channel_cv));
    if (c.keys_pca.defined()) blobs.push_back(f32_blob("keys_pca", int64_t(l), c.keys_pca));
    if (c.policy_score.defined()) blobs.push_back(f32_blob("policy_score", int64_t(l), c.policy_score));
  }
  if (res.topk_unique.defined()) {
    at::Tensor t = res.topk_unique.contiguous();
    blobs.push_back(
        sessions::Blob::of<int64_t>("topk_unique", -1, -1, t.sizes().vec(),
                                    std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel())));
  }
  for (sessions::Blob& b : sessions::timeline_blobs(res.timeline)) blobs.push_back(std::move(b));
  std::vector<sessions::Turn> turns;
  for (size_t t = 0; t < res.turn_output_ids.size(); ++t) {
    sessions::Turn& turn = turns.emplace_back();
    if (t == 0) {
      turn.input_ids = req.prompt_ids;
      turn.input_ids.insert(turn.input_ids.end(), req.question_ids.begin(), req.question_ids.end());
    } else if (t - 1 < req.follow_up_turns.size()) {
      turn.input_ids = req.follow_up_turns[t - 1];
    }
    turn.output_ids = res.turn_output_ids[t];
  }
  for (sessions::Blob& b : sessions::turn_blobs(turns)) blobs.push_back(std::move(b));
  store.add_blobs(run, blobs);
  if (turns.size() > 1) store.set_summary(run, "n_turns", double(turns.size()));
  auto mean = [](const auto& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  };
  int64_t kept = 0, heads = 0;
  for (const auto& layer : res.kept)
    for (const auto& h : layer) kept += int64_t(h.size()), ++heads;
  store.set_summary(run, "prefill_ms", res.prefill_ms);
  store.set_summary(run, "decode_tokens_per_s", res.decode_tokens_per_s());
  store.set_summary(run, "kv_bytes_live", double(res.cache_bytes_live));
  store.set_summary(run, "kv_bytes_allocated", double(res.cache_bytes_allocated));
  store.set_summary(run, "side_store_bytes", double(res.side_store_bytes));
  store.set_summary(run, "bytes_read_mean", mean(res.bytes_read));
  store.set_summary(run, "n_prompt", double(req.prompt_ids.size() + req.question_ids.size()));
  store.set_summary(run, "kept_per_head_mean", heads ? double(kept) / heads : 0.0);
  if (!res.selection_recall.empty()) store.set_summary(run, "selection_recall_mean", mean(res.selection_recall));
  if (!res.fidelity.kl.empty()) {
    store.set_summary(run, "mean_kl", mean(res.fidelity.kl));
    store.set_summary(run, "top1_agreement", mean(res.fidelity.top1));
  }
  sessions::RunOutputs out;
  out.tokens = res.output_ids;
  if (model.tokenizer)
    out.text = decode_continuation(*model.tokenizer, req.question_ids.empty() ? req.prompt_ids : req.question_ids,
                                   res.output_ids);
  store.finish_run(run, out);
}

}  // namespace kvscope::run

namespace kvscope::run {

GenerateResult generate_into_store(sessions::SessionStore& store, const Engine& engine, const Pipeline* pipeline,
                                   const PolicyRegistry& registry, const GenerateRequest& req,
                                   const std::string& prompt_text, const std::string& name,
                                   const std::optional<std::string>& sweep_key, int64_t& run_id,
                                   const std::function<void(int32_t)>& on_token) {
  sessions::PromptInfo prompt;
  prompt.text = prompt_text;
  return generate_into_store(store, engine, pipeline, registry, req, prompt, name, sweep_key, run_id, on_token);
}

GenerateResult generate_into_store(sessions::SessionStore& store, const Engine& engine, const Pipeline* pipeline,
                                   const PolicyRegistry& registry, const GenerateRequest& req,
                                   const sessions::PromptInfo& prompt, const std::string& name,
                                   const std::optional<std::string>& sweep_key, int64_t& run_id,
                                   const std::function<void(int32_t)>& on_token) {
  run_id = store.begin_run(run_info(engine.model(), pipeline, registry, req, prompt, name, sweep_key));
  // A run allowed past the model's context (--allow-beyond-context; make_request refuses it
  // otherwise) says so, so its numbers are not read as those of an ordinary run.
  const int64_t beyond = positions_needed(req) - engine.model().config.max_position_embeddings;
  if (beyond > 0) store.set_summary(run_id, "beyond_context_tokens", double(beyond));
  try {
    GenerateResult res = generate(engine, req, on_token);
    record_results(store, run_id, engine.model(), req, res);
    return res;
  } catch (const std::exception& e) {
    store.fail_run(run_id, error_message(e));  // one line: no LibTorch stack trace in the database
    throw;
  }
}

}  // namespace kvscope::run
