#include "generation.h"

#include <iostream>
#include <limits>
#include <numeric>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "fault_injection.h"
#include "kvscope/core/budget.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "number_check.h"
#include "run_options.h"
#include "session_record.h"

namespace kvscope::cli {

void CompressionOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--pipeline", pipeline,
                 "Stages: name[:key=value,...][+name[:...]]...  e.g. snapkv:window=64+adakv:alpha=0.2")
      ->required();
  std::string unit_help;
  std::vector<std::string> units;
  for (const auto& u : budget_unit_table()) {
    if (u.unit == BudgetUnit::kCompressionRatio) continue;  // its own flag, --compression-ratio
    units.emplace_back(u.name);
    unit_help += (unit_help.empty() ? "" : " | ") + std::string(u.name) + " (" + std::string(u.help) + ")";
  }
  auto* r = cmd.add_option("--compression-ratio", compression_ratio,
                           std::string(budget_unit_table()[size_t(BudgetUnit::kCompressionRatio)].help))
                ->check(finite_number(0, 1, false, /*hi_open=*/true));
  auto* b = cmd.add_option("--budget", budget,
                           "Budget in --budget-unit (not for a pipeline that uses none, e.g. heads:pattern=...)")
                ->check(finite_number(0, std::numeric_limits<double>::infinity(), /*lo_open=*/true, /*hi_open=*/true));
  r->excludes(b);
  cmd.add_option("--budget-unit", budget_unit, unit_help)->check(CLI::IsMember(units));
  cmd.add_option("--reference", reference, "full: also decode with the full cache and report per-step fidelity")
      ->check(CLI::IsMember({"full"}));
  cmd.add_option("--db", db, "Record the run as a session in this SQLite database (created if missing)");
  cmd.add_option("--capture", capture, "Per-head statistics to record: off | summary | full")
      ->check(CLI::IsMember({"off", "summary", "full"}));
  cmd.add_option("--pin", pin,
                 "L:H[,L:H...]: KV heads (layer:head, 0-based) whose decode-time selections the timeline records "
                 "per token (the others per page), with the exact top-k they are measured against at --capture full");
  cmd.add_option("--name", name, "Name of the recorded session");
}

void CompressionOptions::apply_to(run::RunOptions& run) const {
  run.pipeline = pipeline;
  if (compression_ratio >= 0)
    run.budget = BudgetSpec{BudgetUnit::kCompressionRatio, compression_ratio};
  else if (budget >= 0)
    run.budget = BudgetSpec{parse_budget_unit(budget_unit), budget};
  run.reference_full = reference == "full";
  if (!db.empty()) run.capture = parse_capture_level(capture);
  if (!pin.empty()) run.pinned_heads = run::parse_pinned_heads(pin);
}

int execute_generation(const ModelOptions& opts, const CompressionOptions* comp) {
  PolicyRegistry registry;
  register_builtin_policies(registry);
  run::RunOptions options = opts.run_options();
  if (comp) comp->apply_to(options);
  const std::unique_ptr<Pipeline> pipeline =
      run::make_pipeline(registry, options);  // before the model: a typo costs nothing
  const Model model = opts.load();
  const Engine engine(model);
  GenerateRequest req = run::make_request(model, pipeline.get(), options);
  req.fault_hook = fault_hook_from_environment();

  const bool stream = !opts.json && model.tokenizer;
  std::vector<int32_t> shown = req.prompt_ids;
  auto on_token = [&](int32_t id) {
    if (!stream) return;
    std::cout << decode_continuation(*model.tokenizer, shown, {id}) << std::flush;
    shown.push_back(id);
  };
  int64_t session_id = -1;
  GenerateResult res;
  if (comp && !comp->db.empty()) {
    auto store = sessions::SessionStore::open(comp->db);
    res = run::generate_into_store(store, engine, pipeline.get(), registry, req, run::recorded_prompt(options),
                                   comp->name, std::nullopt, session_id, on_token);
  } else {
    res = generate(engine, req, on_token);
  }
  const auto& kl = res.fidelity.kl;
  if (!opts.json) {
    std::cout << "\n";
    std::cerr << "prefill " << req.prompt_ids.size() << " tokens in " << res.prefill_ms << " ms, decode "
              << res.decode_tokens_per_s() << " tokens/s, KV cache " << res.cache_bytes_live << " bytes";
    if (!kl.empty())
      std::cerr << ", mean KL(full||compressed) " << std::accumulate(kl.begin(), kl.end(), 0.0) / kl.size()
                << ", top-1 agreement "
                << std::accumulate(res.fidelity.top1.begin(), res.fidelity.top1.end(), 0.0) / kl.size();
    std::cerr << "\n";
    if (session_id >= 0) std::cout << "session " << session_id << " recorded in " << comp->db << "\n";
    return 0;
  }
  nlohmann::json j;
  if (session_id >= 0) j["session_id"] = session_id;
  j["input_ids"] = req.prompt_ids;
  if (options.chat) j["chat"] = {{"template", options.chat->source}, {"text", options.chat->text}};
  j["output_ids"] = res.output_ids;
  j["text"] = model.tokenizer ? decode_continuation(*model.tokenizer, req.prompt_ids, res.output_ids) : "";
  j["timings"] = {{"prefill_ms", res.prefill_ms}, {"decode_tokens_per_s", res.decode_tokens_per_s()}};
  if (!opts.turns.empty()) {
    nlohmann::json turns = nlohmann::json::array();
    for (size_t i = 0; i < res.turn_output_ids.size(); ++i)
      turns.push_back({{"input_ids", i == 0 ? req.prompt_ids : req.follow_up_turns[i - 1]},
                       {"output_ids", res.turn_output_ids[i]},
                       {"text", model.tokenizer->decode(res.turn_output_ids[i])}});
    j["turns"] = turns;
  }
  if (opts.dump_last_logits) {
    at::Tensor l = res.last_logits.contiguous();
    j["last_logits"] = std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
  }
  if (comp) {
    j["pipeline"] = pipeline->canonical();
    j["kept"] = res.kept;
    nlohmann::json budgets = nlohmann::json::array();
    for (const auto& layer : res.kept) {
      nlohmann::json row = nlohmann::json::array();
      for (const auto& head : layer) row.push_back(head.size());
      budgets.push_back(row);
    }
    j["budgets"] = budgets;
    j["cache_bytes"] = {{"kv_live", res.cache_bytes_live},
                        {"kv_allocated", res.cache_bytes_allocated},
                        {"side_stores", res.side_store_bytes}};
    j["bytes_read_per_step"] = res.bytes_read;
    if (req.reference_full)
      j["fidelity"] = {
          {"kl", kl},
          {"top1", res.fidelity.top1},
          {"token_id", res.fidelity.token},
          {"full_top_id", res.fidelity.full_top},
          {"p_token", res.fidelity.p_token},
          {"p_full_top", res.fidelity.p_full_top},
          {"p_full_token", res.fidelity.p_full_token},
          {"mean_kl", kl.empty() ? 0.0 : std::accumulate(kl.begin(), kl.end(), 0.0) / kl.size()},
          {"top1_agreement",
           kl.empty() ? 1.0 : std::accumulate(res.fidelity.top1.begin(), res.fidelity.top1.end(), 0.0) / kl.size()}};
  }
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace kvscope::cli
