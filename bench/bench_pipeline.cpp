// bench_pipeline: what each compression pipeline costs and saves on one model and context, batch 1:
// prefill overhead against the full-cache prefill, decode tokens/s, bytes read per decode step, and
// each decode next to its own roofline = copy bandwidth / (weight bytes + bytes its attention reads).
//
//   bench_pipeline --random-init bench/configs/llama-3.1-8b.json --device cuda --dtype bf16 --context 32768
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "batch_decode.h"
#include "device_timing.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"

namespace {

struct Case {
  std::string label, spec;
  kvscope::BudgetSpec::Unit unit;
  bool named_only = false;  ///< run only when --pipelines names it (H2O: every query's attention at prefill)
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvscope pipeline benchmark"};
  std::string model_path, random_init, device = "cpu", dtype = "bf16", json_out, budgets_arg = "256,1024,4096";
  int64_t context = 4096, steps = 32, batch = 1;
  app.add_option("--model", model_path);
  app.add_option("--random-init", random_init);
  app.add_option("--device", device);
  app.add_option("--dtype", dtype);
  app.add_option("--context", context);
  app.add_option("--budgets", budgets_arg);
  app.add_option("--decode-steps", steps);
  app.add_option("--json", json_out);
  std::string only;
  app.add_option("--pipelines", only, "comma-separated labels to run (default: all but h2o and h2o+decoding)");
  app.add_option("--batch", batch,
                 "also decode this many sequences per step with each pipeline's kept sizes (CUDA; RocketKV and "
                 "Quest build their page summaries over the batch; SPARK runs batch 1 only: its channel stores "
                 "come from one sequence's prefill)")
      ->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);

  const c10::Device dev(device);
  const kvscope::LoadOptions lo{dev, kvscope::parse_dtype(dtype), {}};
  const kvscope::Model model =
      random_init.empty() ? kvscope::load_model(model_path, lo) : kvscope::random_init_model(random_init, lo, 1);
  const kvscope::Engine engine(model);
  kvscope::PolicyRegistry registry;
  kvscope::register_builtin_policies(registry);
  const double bw = kvscope::bench::copy_bandwidth(dev);
  int64_t weight_bytes = model.weights.bytes();
  if (!model.weights.lm_head.is_same(model.weights.embed))
    weight_bytes -= model.weights.embed.numel() * model.weights.embed.element_size();

  std::mt19937 rng(0);
  std::vector<int32_t> ids(context);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % model.config.vocab_size);
  auto run = [&](const kvscope::Pipeline* p, kvscope::BudgetSpec b,
                 kvscope::CaptureLevel capture = kvscope::CaptureLevel::kOff) {
    kvscope::GenerateRequest req;
    req.capture = capture;
    req.prompt_ids = ids;
    req.max_new_tokens = steps;
    req.pipeline = p;
    req.budget = b;
    return kvscope::generate(engine, req);
  };
  run(nullptr, {});  // warm-up
  const auto full = run(nullptr, {});
  const double full_prefill = full.prefill_ms;
  std::printf(
      "context %lld, copy bandwidth %.0f GB/s, weights %.2f GB; full cache: prefill %.1f ms, decode %.1f tok/s\n",
      (long long)context, bw / 1e9, weight_bytes / 1e9, full_prefill, full.decode_tokens_per_s());
  std::printf("%-20s %7s %12s %14s %12s %14s %8s %6s\n", "pipeline", "budget", "prefill ms", "prefill ovh %",
              "decode tok/s", "bytes/step MB", "% roof", "step");
  nlohmann::json rows = nlohmann::json::array();
  auto report = [&](const std::string& label, int64_t budget, const kvscope::GenerateResult& r) {
    const double bytes =
        r.bytes_read.empty() ? 0 : std::accumulate(r.bytes_read.begin(), r.bytes_read.end(), 0.0) / r.bytes_read.size();
    const double roof = bw / (weight_bytes + bytes), tps = r.decode_tokens_per_s();
    const double ovh = 100.0 * (r.prefill_ms - full_prefill) / full_prefill;
    std::printf("%-20s %7lld %12.1f %14.1f %12.1f %14.1f %7.1f%% %6s\n", label.c_str(), (long long)budget, r.prefill_ms,
                ovh, tps, bytes / 1e6, 100 * tps / roof, r.decode_graph ? "graph" : "eager");
    rows.push_back({{"pipeline", label},
                    {"budget", budget},
                    {"prefill_ms", r.prefill_ms},
                    {"prefill_overhead_pct", ovh},
                    {"decode_tokens_per_s", tps},
                    {"bytes_read_per_step", bytes},
                    {"roofline_tokens_per_s", roof},
                    {"decode_graph", r.decode_graph}});
  };
  report("full", context, full);
  // Batch rows: `batch` sequences with this run's kept sizes per (layer, KV head), random K/V
  // (batch_decode.h); roofline = weights once + every sequence's K/V.
  auto report_batch = [&](const std::string& label, int64_t budget, const kvscope::GenerateResult& r,
                          kvscope::DecodeAttentionPolicy* policy = nullptr) {
    if (batch <= 1) return;
    const auto& c = model.config;
    std::vector<std::vector<int64_t>> lengths(c.n_layer, std::vector<int64_t>(c.n_head_kv, context));
    for (size_t l = 0; l < r.kept.size() && l < lengths.size(); ++l)
      for (size_t h = 0; h < r.kept[l].size() && h < lengths[l].size(); ++h)
        lengths[l][h] = static_cast<int64_t>(r.kept[l][h].size());
    kvscope::bench::BatchDecode b;
    try {
      b = kvscope::bench::time_batched_decode(engine, lengths, batch, steps, policy);
    } catch (const std::exception& e) {  // e.g. eight full 128K caches do not fit: say so, go on
      const std::string what = e.what();
      std::printf("%-20s %7lld  skipped: %s\n", (label + " x" + std::to_string(batch)).c_str(), (long long)budget,
                  what.substr(0, what.find('\n')).c_str());
      return;
    }
    const double roof = batch * bw / (weight_bytes + b.kv_bytes_per_step);
    const std::string name = label + " x" + std::to_string(batch);
    std::printf("%-20s %7lld %12s %14s %12.1f %14.1f %7.1f%%\n", name.c_str(), (long long)budget, "-", "-",
                b.tokens_per_s, b.kv_bytes_per_step / 1e6, 100 * b.tokens_per_s / roof);
    rows.push_back({{"pipeline", label},
                    {"budget", budget},
                    {"batch", batch},
                    {"decode_tokens_per_s", b.tokens_per_s},
                    {"bytes_read_per_step", b.kv_bytes_per_step},
                    {"roofline_tokens_per_s", roof}});
  };
  report_batch("full", context, full);
  const std::vector<Case> cases = {
      {"snapkv", "snapkv", kvscope::BudgetSpec::Unit::kStored},
      {"ada-snapkv", "ada-snapkv", kvscope::BudgetSpec::Unit::kStored},
      {"keydiff", "keydiff", kvscope::BudgetSpec::Unit::kStored},
      {"rocketkv", "rocketkv", kvscope::BudgetSpec::Unit::kFetched},
      {"quest", "quest", kvscope::BudgetSpec::Unit::kFetched},
      {"rocketkv+spark", "rocketkv+spark", kvscope::BudgetSpec::Unit::kFetched},
      {"quest+spark", "spark+quest", kvscope::BudgetSpec::Unit::kFetched},
      {"spark", "snapkv+spark", kvscope::BudgetSpec::Unit::kStored},
      {"spark-0.8", "snapkv+spark:ratio=0.8", kvscope::BudgetSpec::Unit::kStored},
      {"think", "snapkv+think", kvscope::BudgetSpec::Unit::kStored},
      {"spark+values", "snapkv+spark:value_ratio=0.5", kvscope::BudgetSpec::Unit::kStored},
      // Eviction while decoding (S6) next to the same scorer's prefill-only eviction.
      {"tova", "tova", kvscope::BudgetSpec::Unit::kStored},
      {"tova+decoding", "tova+decoding", kvscope::BudgetSpec::Unit::kStored},
      {"keydiff+decoding", "keydiff+decoding", kvscope::BudgetSpec::Unit::kStored},
      {"streamingllm", "streamingllm", kvscope::BudgetSpec::Unit::kStored},
      {"streamingllm+decoding", "streamingllm+decoding", kvscope::BudgetSpec::Unit::kStored},
      {"h2o", "h2o", kvscope::BudgetSpec::Unit::kStored, true},
      {"h2o+decoding", "h2o+decoding", kvscope::BudgetSpec::Unit::kStored, true},
      // kvpress DecodingPress: back to the budget every 32 steps (two graphs: with and without).
      {"tova+decoding/32", "tova+decoding:interval=32", kvscope::BudgetSpec::Unit::kStored},
  };
  const auto wanted = [&](const std::string& label) {
    return only.empty() || ("," + only + ",").find("," + label + ",") != std::string::npos;
  };
  {  // warm-up of the scoring kernels / LibTorch ops the cases use (first calls load modules)
    const kvscope::Pipeline p(registry, "snapkv");
    run(&p, {kvscope::BudgetSpec::Unit::kStored, 256});
  }
  std::stringstream ss(budgets_arg);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int64_t budget = std::stoll(item);
    for (const auto& c : cases) {
      if (!wanted(c.label) || (c.named_only && only.empty())) continue;
      const kvscope::Pipeline p(registry, c.spec);
      const kvscope::GenerateResult r = run(&p, {c.unit, double(budget)});
      report(c.label, budget, r);
      // Page selection (RocketKV, Quest) builds its summaries from the batch's cache; SPARK's
      // channel stores belong to the batch-1 prefill's heads.
      if (!p.decode_attention())
        report_batch(c.label, budget, r);
      else if (c.unit == kvscope::BudgetSpec::Unit::kFetched)
        report_batch(c.label, budget, r, p.decode_attention());
    }
  }
  // Capture cost (issue 4: summary must be cheap enough to leave on): SnapKV at 1024 with capture.
  if (wanted("capture")) {
    const kvscope::Pipeline p(registry, "snapkv");
    report("snapkv+cap:summary", 1024,
           run(&p, {kvscope::BudgetSpec::Unit::kStored, 1024}, kvscope::CaptureLevel::kSummary));
    report("snapkv+cap:full", 1024, run(&p, {kvscope::BudgetSpec::Unit::kStored, 1024}, kvscope::CaptureLevel::kFull));
  }
  if (!json_out.empty()) std::ofstream(json_out) << rows.dump(1) << "\n";
  return 0;
}
