// bench_capture: what observing a run costs. For each context and pipeline (SnapKV at 1,024 stored,
// RocketKV and Quest at 1,024 fetched; batch 1), capture off / summary / full: prefill ms and
// overhead against capture off, decode tokens/s and overhead, whether decode replayed a CUDA graph,
// and the session bytes of the run's timeline (zstd, as stored), also per 1,000 decode steps.
//
//   bench_capture --random-init bench/configs/llama-3.1-8b.json --device cuda --dtype bf16 \
//     --contexts 8192,32768,131072 --decode-steps 64 --json capture.json
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/sessions/session_store.h"
#include "kvscope/sessions/timeline_blobs.h"

namespace {

struct Case {
  std::string label, spec;
  kvscope::BudgetSpec::Unit unit;
};

/// Stored (zstd) and raw bytes of `t`'s blobs, written into a scratch session: total, and the part
/// that grows with the decode steps (selection bitmaps and offsets, recall).
struct TimelineBytes {
  double stored = 0, raw = 0, stored_per_step = 0;
};

TimelineBytes timeline_bytes(const kvscope::Timeline& t, const std::string& db) {
  namespace ss = kvscope::sessions;
  std::filesystem::remove(db);
  auto store = ss::SessionStore::open(db);
  ss::RunInfo info;
  info.model = {"bench", "0", "llama", t.n_layer, t.n_head_kv, t.n_head_kv, 1, "bf16", "cuda"};
  info.pipeline.spec = "bench";
  const int64_t run = store.begin_run(info);
  for (const auto& b : ss::timeline_blobs(t)) store.add_blob(run, b);
  TimelineBytes out;
  for (const auto& b : store.load_run(run).blobs) {
    out.stored += double(b.stored_bytes);
    out.raw += double(b.raw_bytes);
    const bool per_step = b.name.rfind("timeline.pages", 0) == 0 || b.name.rfind("timeline.tokens", 0) == 0 ||
                          b.name.rfind("timeline.exact", 0) == 0 || b.name == "timeline.recall";
    if (per_step && t.n_steps > 0) out.stored_per_step += double(b.stored_bytes) / double(t.n_steps);
  }
  std::filesystem::remove(db);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvscope capture-cost benchmark"};
  std::string model_path, random_init, device = "cpu", dtype = "bf16", json_out, contexts_arg = "8192,32768";
  int64_t steps = 64, budget = 1024;
  app.add_option("--model", model_path);
  app.add_option("--random-init", random_init);
  app.add_option("--device", device);
  app.add_option("--dtype", dtype);
  app.add_option("--contexts", contexts_arg);
  app.add_option("--budget", budget, "SnapKV stored / RocketKV and Quest fetched entries");
  app.add_option("--decode-steps", steps);
  app.add_option("--json", json_out);
  std::string only, levels_arg = "off,summary,full";
  app.add_option("--pipelines", only, "comma-separated labels to run (default: snapkv,rocketkv,quest)");
  app.add_option("--levels", levels_arg, "capture levels to time, off first (default: off,summary,full)");
  bool live = false;
  app.add_flag("--live", live,
               "also publish live snapshots as the GUI's Run view does (GenerateRequest::on_progress, a no-op "
               "receiver): their cost is then part of every row");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
  std::vector<kvscope::CaptureLevel> levels;
  {
    std::stringstream ls(levels_arg);
    std::string l;
    while (std::getline(ls, l, ',')) levels.push_back(kvscope::parse_capture_level(l));
  }

  const c10::Device dev(device);
  const kvscope::LoadOptions lo{dev, kvscope::parse_dtype(dtype), {}};
  const kvscope::Model model =
      random_init.empty() ? kvscope::load_model(model_path, lo) : kvscope::random_init_model(random_init, lo, 1);
  const kvscope::Engine engine(model);
  kvscope::PolicyRegistry registry;
  kvscope::register_builtin_policies(registry);
  const std::string scratch =
      (std::filesystem::temp_directory_path() / ("kvscope_bench_capture_" + std::to_string(::getpid()) + ".db"))
          .string();
  const std::vector<Case> cases = {{"snapkv", "snapkv", kvscope::BudgetSpec::Unit::kStored},
                                   {"rocketkv", "rocketkv", kvscope::BudgetSpec::Unit::kFetched},
                                   {"quest", "quest", kvscope::BudgetSpec::Unit::kFetched}};
  const auto wanted = [&](const std::string& label) {
    return only.empty() || ("," + only + ",").find("," + label + ",") != std::string::npos;
  };
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-9s %7s %-8s %11s %8s %10s %8s %6s %12s %12s\n", "pipeline", "context", "capture", "prefill ms",
              "ovh %", "decode t/s", "ovh %", "graph", "timeline MB", "MB/1k steps");
  std::stringstream cs(contexts_arg);
  std::string item;
  while (std::getline(cs, item, ',')) {
    const int64_t context = std::stoll(item);
    std::mt19937 rng(0);
    std::vector<int32_t> ids(context);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % model.config.vocab_size);
    for (const Case& c : cases) {
      if (!wanted(c.label)) continue;
      const kvscope::Pipeline p(registry, c.spec);
      auto run = [&](kvscope::CaptureLevel level) {
        kvscope::GenerateRequest req;
        req.prompt_ids = ids;
        req.max_new_tokens = steps + 1;  // steps decode forward passes
        req.pipeline = &p;
        req.budget = {c.unit, double(budget)};
        req.capture = level;
        if (live) req.on_progress = [](const kvscope::GenerateProgress&) {};
        return kvscope::generate(engine, req);
      };
      for (auto level : levels) run(level);  // warm-up of each path (kernels, allocator, first-use initialisation)
      double base_prefill = 0, base_decode = 0;
      for (auto level : levels) {
        const kvscope::GenerateResult r = run(level);
        const char* name = level == kvscope::CaptureLevel::kOff       ? "off"
                           : level == kvscope::CaptureLevel::kSummary ? "summary"
                                                                      : "full";
        if (level == kvscope::CaptureLevel::kOff) {
          base_prefill = r.prefill_ms;
          base_decode = r.decode_tokens_per_s();
        }
        const double p_ovh = 100.0 * (r.prefill_ms - base_prefill) / base_prefill;
        const double d_ovh = 100.0 * (base_decode - r.decode_tokens_per_s()) / base_decode;
        TimelineBytes tb;
        if (!r.timeline.empty()) tb = timeline_bytes(r.timeline, scratch);
        const double per_1k = tb.stored + tb.stored_per_step * (1000.0 - double(r.timeline.n_steps));
        std::printf("%-9s %7lld %-8s %11.1f %8.1f %10.1f %8.1f %6s %12.2f %12.2f\n", c.label.c_str(),
                    (long long)context, name, r.prefill_ms, p_ovh, r.decode_tokens_per_s(), d_ovh,
                    r.decode_graph ? "yes" : "no", tb.stored / 1e6, per_1k / 1e6);
        rows.push_back({{"pipeline", c.label},
                        {"context", context},
                        {"capture", name},
                        {"prefill_ms", r.prefill_ms},
                        {"prefill_overhead_pct", p_ovh},
                        {"decode_tokens_per_s", r.decode_tokens_per_s()},
                        {"decode_overhead_pct", d_ovh},
                        {"decode_graph", r.decode_graph},
                        {"decode_steps", r.decode_steps},
                        {"timeline_stored_bytes", tb.stored},
                        {"timeline_raw_bytes", tb.raw},
                        {"timeline_stored_bytes_per_1000_steps", per_1k}});
      }
    }
  }
  if (!json_out.empty()) std::ofstream(json_out) << rows.dump(1) << "\n";
  return 0;
}
