// bench_engine: prefill and decode throughput of the engine, printed next to the decode roofline =
// measured device copy bandwidth / (weight bytes + KV bytes read per step) x tokens per step.
//
//   bench_engine --random-init bench/configs/llama-3.1-8b.json --device cuda --dtype bf16 --contexts 4096,32768
//   bench_engine --model assets/models/pycode-16m --device cuda --dtype bf16 --contexts 512,3500
//   bench_engine ... --batch 8   (B sequences per step, CUDA only: decode alone, their caches
//                                 filled with random K/V of the context length; prefill not run)
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "batch_decode.h"
#include "device_timing.h"
#include "kvscope/core/decode_graph.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/model.h"

namespace {

using Clock = std::chrono::steady_clock;

using kvscope::bench::copy_bandwidth;
using kvscope::bench::sync;

/// Decode of `batch` sequences per step at context `ctx` (batch_decode.h): tokens/s of all
/// sequences; the roofline counts the weights once and every sequence's K/V.
nlohmann::json batched_decode(const kvscope::Engine& engine, int64_t ctx, int64_t batch, int64_t steps,
                              int64_t weight_bytes, double bw) {
  const auto& c = engine.model().config;
  const std::vector<std::vector<int64_t>> lengths(c.n_layer, std::vector<int64_t>(c.n_head_kv, ctx));
  const kvscope::bench::BatchDecode r = kvscope::bench::time_batched_decode(engine, lengths, batch, steps);
  const double bytes = weight_bytes + r.kv_bytes_per_step, roof = batch * bw / bytes;
  std::printf("%8lld %14s %14.1f %14.1f %12.3g %7.1f%%\n", (long long)ctx, "-", r.tokens_per_s, roof, bytes,
              100 * r.tokens_per_s / roof);
  return {{"context", ctx},
          {"batch", batch},
          {"decode_tokens_per_s", r.tokens_per_s},
          {"roofline_tokens_per_s", roof},
          {"bytes_per_step", bytes},
          {"copy_bandwidth_Bps", bw}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvscope engine benchmark"};
  std::string model_path, random_init, device = "cpu", dtype = "bf16", contexts_arg = "4096", json_out;
  int64_t decode_steps = 64, prefill_chunk = 0, batch = 1;
  app.add_option("--model", model_path);
  app.add_option("--random-init", random_init);
  app.add_option("--device", device);
  app.add_option("--dtype", dtype);
  app.add_option("--contexts", contexts_arg, "comma-separated prompt lengths");
  app.add_option("--decode-steps", decode_steps);
  app.add_option("--prefill-chunk", prefill_chunk);
  app.add_option("--json", json_out, "also write the results to this JSON file");
  app.add_option("--batch", batch, "sequences decoded per step (> 1: CUDA graph, random caches)")
      ->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);

  const c10::Device dev(device);
  const kvscope::LoadOptions lo{dev, kvscope::parse_dtype(dtype), {}};
  const kvscope::Model model =
      random_init.empty() ? kvscope::load_model(model_path, lo) : kvscope::random_init_model(random_init, lo, 1);
  const kvscope::Engine engine(model);
  const auto& c = model.config;
  const double bw = copy_bandwidth(dev);
  // Bytes one decode step must read: every weight once, except the embedding table (one row)
  // when it is not also the output head.
  int64_t weight_bytes = model.weights.bytes();
  if (!model.weights.lm_head.is_same(model.weights.embed))
    weight_bytes -= model.weights.embed.numel() * model.weights.embed.element_size();
  const int64_t itemsize = model.weights.embed.element_size();

  std::printf("model %s  device %s  dtype %s  copy bandwidth %.0f GB/s  weights read/token %.2f GB\n",
              (random_init.empty() ? model_path : random_init).c_str(), device.c_str(), dtype.c_str(), bw / 1e9,
              weight_bytes / 1e9);
  std::printf("batch %lld\n%8s %14s %14s %14s %12s %8s\n", (long long)batch, "context", "prefill tok/s", "decode tok/s",
              "roofline tok/s", "bytes/step", "% roof");
  nlohmann::json results = nlohmann::json::array();
  std::mt19937 rng(0);
  std::string item;
  std::stringstream ss(contexts_arg);
  while (std::getline(ss, item, ',')) {
    const int64_t ctx = std::stoll(item);
    if (batch > 1) {
      results.push_back(batched_decode(engine, ctx, batch, decode_steps, weight_bytes, bw));
      continue;
    }
    std::vector<int32_t> ids(ctx);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % c.vocab_size);
    // Warm-up prefill of the same length (kernel selection, allocator growth), then the measured one.
    {
      kvscope::KvCache warm = engine.new_cache(ctx);
      sync(engine.prefill(warm, ids, prefill_chunk));
    }
    kvscope::KvCache cache = engine.new_cache(ctx + decode_steps + 8);
    auto t0 = Clock::now();
    at::Tensor logits = engine.prefill(cache, ids, prefill_chunk);
    sync(logits);
    const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    int32_t tok = static_cast<int32_t>(logits.argmax().item<int64_t>());
    // Decode as generate() does: one CUDA graph per step where supported, else the eager path.
    std::unique_ptr<kvscope::DecodeGraph> graph;
    if (kvscope::DecodeGraph::supported(engine, cache, decode_steps + 3))
      graph = std::make_unique<kvscope::DecodeGraph>(engine, cache);
    auto step = [&](int32_t t) {
      const at::Tensor lg = graph ? graph->step(t) : engine.forward(cache, std::span<const int32_t>(&t, 1));
      return static_cast<int32_t>(lg.argmax().item<int64_t>());
    };
    for (int i = 0; i < 3; ++i) tok = step(tok);
    t0 = Clock::now();
    for (int64_t i = 0; i < decode_steps; ++i) tok = step(tok);
    const double decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double mean_ctx = ctx + 3 + decode_steps / 2.0;
    const double kv_bytes = 2.0 * c.n_layer * c.n_head_kv * c.head_dim * itemsize * mean_ctx;
    const double bytes = weight_bytes + kv_bytes;
    const double roof = bw / bytes, dec = decode_steps / decode_s;
    std::printf("%8lld %14.0f %14.1f %14.1f %12.3g %7.1f%%\n", (long long)ctx, ctx / prefill_s, dec, roof, bytes,
                100 * dec / roof);
    results.push_back({{"context", ctx},
                       {"batch", 1},
                       {"prefill_tokens_per_s", ctx / prefill_s},
                       {"decode_tokens_per_s", dec},
                       {"roofline_tokens_per_s", roof},
                       {"bytes_per_token", bytes},
                       {"copy_bandwidth_Bps", bw}});
  }
  if (!json_out.empty()) std::ofstream(json_out) << results.dump(1) << "\n";
  return 0;
}
