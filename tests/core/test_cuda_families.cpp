// The fused CUDA decode path (kernels/, Engine::fused_decode_layer, DecodeGraph) on every model
// family's features against the LibTorch layers on the CPU in fp32: one random model per family at
// a head size the kernels take (Qwen3's q/k norms at 128, Gemma 2's soft-capping and Gemma 3's
// sandwich norms, GeGLU, scaled embeddings, local/global RoPE at 256, Phi-3's partial rotary at 96,
// Mistral's sliding window at 128 with GQA 4), decoding past the sliding window so the rings wrap.
// The same tokens go through the CPU reference, the eager fused path and the CUDA graph.
// Skipped without a CUDA device or without the kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "../../core/src/ops/cuda_ops.h"
#include "kvscope/core/decode_graph.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "test_support.h"

namespace kvscope {
namespace {

constexpr int64_t kWindow = 16;

/// The tiny-arch config of `family` with kernel-sized heads, a small sliding window and 3 layers.
nlohmann::json family_config(const std::string& family, int64_t head_dim, int64_t n_head, int64_t n_head_kv) {
  nlohmann::json j = test::read_json(test::source_dir() / "assets/models/tiny-archs" / family / "config.json");
  j["head_dim"] = head_dim;
  j["num_attention_heads"] = n_head;
  j["num_key_value_heads"] = n_head_kv;
  j["hidden_size"] = family.rfind("phi3", 0) == 0 ? n_head * head_dim : 256;  // phi3 derives head_dim
  j["intermediate_size"] = 384;
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) j["sliding_window"] = kWindow;
  if (j.contains("query_pre_attn_scalar")) j["query_pre_attn_scalar"] = head_dim;
  return j;
}

/// A random model of `config` in fp32 on the GPU, with norm weights away from 1 (so a norm applied
/// twice, or not at all, shows). Its config.json stays in the temp directory (a few hundred bytes).
Model random_model(const nlohmann::json& config, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvscope_cuda_families_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
  Model m = random_init_model(dir / "config.json", LoadOptions{c10::Device("cuda:0"), at::kFloat, {}}, 11);
  at::manual_seed(12);
  auto perturb = [](at::Tensor& w) {
    if (w.defined()) w = w + at::randn(w.sizes(), w.options()) * 0.2;
  };
  perturb(m.weights.final_norm);
  for (LayerWeights& w : m.weights.layers)
    for (at::Tensor* t : {&w.attn_norm, &w.mlp_norm, &w.q_norm, &w.k_norm, &w.post_attn_norm, &w.post_ffn_norm})
      perturb(*t);
  return m;
}

/// The same weights on `device` in `dtype`; norm weights that are fp32 on the CPU because the loader
/// keeps Gemma's (1 + w) in fp32 stay fp32.
Model to_device(const Model& src, c10::Device device, at::ScalarType dtype) {
  Model m;
  m.config = src.config;
  m.device = device;
  m.dtype = dtype;
  const bool fp32_norms = src.config.norm_plus_one;
  auto w = [&](const at::Tensor& t) { return t.defined() ? t.to(device, dtype) : t; };
  auto norm = [&](const at::Tensor& t) { return t.defined() ? t.to(device, fp32_norms ? at::kFloat : dtype) : t; };
  m.weights.embed = w(src.weights.embed);
  m.weights.final_norm = norm(src.weights.final_norm);
  m.weights.lm_head = src.config.tie_word_embeddings ? m.weights.embed : w(src.weights.lm_head);
  for (const LayerWeights& s : src.weights.layers) {
    LayerWeights l;
    l.attn_norm = norm(s.attn_norm);
    l.w_qkv = w(s.w_qkv);
    l.b_qkv = w(s.b_qkv);
    l.w_o = w(s.w_o);
    l.mlp_norm = norm(s.mlp_norm);
    l.w_gate_up = w(s.w_gate_up);
    l.w_down = w(s.w_down);
    l.q_norm = norm(s.q_norm);
    l.k_norm = norm(s.k_norm);
    l.post_attn_norm = norm(s.post_attn_norm);
    l.post_ffn_norm = norm(s.post_ffn_norm);
    m.weights.layers.push_back(std::move(l));
  }
  return m;
}

struct Family {
  const char* dir;
  int64_t head_dim, n_head, n_head_kv;
};

class CudaFamilies : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaFamilies, FusedDecodeAndGraphMatchTheCpuLayers) {
  const Family f = GetParam();
  const Model cpu = to_device(random_model(family_config(f.dir, f.head_dim, f.n_head, f.n_head_kv), f.dir),
                              c10::Device(c10::kCPU), at::kFloat);
  ASSERT_EQ(cpu.config.unfused_features(), "") << f.dir << ": the fused path must take this family";
  const Model gpu = to_device(cpu, c10::Device("cuda:0"), at::kFloat);
  const Engine ref_engine(cpu), engine(gpu);
  const int64_t n_prompt = 40, steps = 3 * kWindow;  // the rings wrap three times
  std::mt19937 rng(5);
  std::vector<int32_t> ids(n_prompt + steps);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % cpu.config.vocab_size);
  const std::span<const int32_t> prompt(ids.data(), n_prompt);

  KvCache ref_cache = ref_engine.new_cache(n_prompt + steps), eager = engine.new_cache(n_prompt + steps),
          graphed = engine.new_cache(n_prompt + steps);
  const at::Tensor ref0 = ref_engine.prefill(ref_cache, prompt);
  const at::Tensor got0 = engine.prefill(eager, prompt).cpu();
  (void)engine.prefill(graphed, prompt);
  EXPECT_LT((got0 - ref0).abs().max().item<double>(), 1e-3) << f.dir << " prefill";
  for (int64_t l = 0; l < cpu.config.n_layer; ++l)
    if (cpu.config.window(l) > 0)
      EXPECT_EQ(eager.layer(l).capacity[0], kWindow) << f.dir << " layer " << l << ": a ring of its window";
  ASSERT_TRUE(DecodeGraph::supported(engine, graphed, steps)) << f.dir;
  DecodeGraph graph(engine, graphed);
  double worst_eager = 0, worst_graph = 0;
  for (int64_t t = 0; t < steps; ++t) {
    const int32_t tok = ids[static_cast<size_t>(n_prompt + t)];
    const at::Tensor ref = ref_engine.forward(ref_cache, std::span<const int32_t>(&tok, 1));
    const at::Tensor e = engine.forward(eager, std::span<const int32_t>(&tok, 1)).cpu();
    const at::Tensor g = graph.step(tok).cpu();
    worst_eager = std::max(worst_eager, (e - ref).abs().max().item<double>());
    worst_graph = std::max(worst_graph, (g - ref).abs().max().item<double>());
    ASSERT_EQ(e.argmax().item<int64_t>(), ref.argmax().item<int64_t>()) << f.dir << " step " << t;
  }
  EXPECT_LT(worst_eager, 1e-3) << f.dir << ": eager fused decode vs the CPU layers (max |logit diff|)";
  EXPECT_LT(worst_graph, 1e-3) << f.dir << ": CUDA graph vs the CPU layers";
  for (int64_t l = 0; l < cpu.config.n_layer; ++l) {
    const LayerKv &a = ref_cache.layer(l), &b = graphed.layer(l);
    EXPECT_EQ(a.length, b.length) << f.dir << " layer " << l;
    // Same entries at the same rows (the ring's position % window), graph and CPU alike.
    EXPECT_TRUE(at::equal(ref_cache.positions(l), graphed.positions(l).cpu())) << f.dir << " layer " << l;
    EXPECT_LT((ref_cache.keys(l) - graphed.keys(l).cpu()).abs().max().item<double>(), 1e-3) << f.dir << " " << l;
  }
}

// RocketKV's decode-time selection (HSA) on a model with sliding layers, on the GPU (eager fused and
// CUDA-graph steps): it selects on the global layers while the sliding ones attend densely over their
// rings; with a budget covering the whole history it gives the dense run's tokens.
TEST_P(CudaFamilies, DecodeSelectionRunsOnTheGlobalLayers) {
  const Family f = GetParam();
  const Model gpu = to_device(random_model(family_config(f.dir, f.head_dim, f.n_head, f.n_head_kv), f.dir),
                              c10::Device("cuda:0"), at::kBFloat16);
  const Engine engine(gpu);
  PolicyRegistry registry;
  register_builtin_policies(registry);
  GenerateRequest req;
  std::mt19937 rng(9);
  for (int i = 0; i < 200; ++i) req.prompt_ids.push_back(static_cast<int32_t>(rng() % gpu.config.vocab_size));
  req.max_new_tokens = 3 * kWindow;
  const GenerateResult dense = generate(engine, req);
  const Pipeline hsa(registry, "hsa:stage1=false");
  req.pipeline = &hsa;
  req.budget = {BudgetSpec::Unit::kFetched, 1024};
  EXPECT_EQ(generate(engine, req).output_ids, dense.output_ids) << f.dir;
  req.budget = {BudgetSpec::Unit::kFetched, 64};
  const GenerateResult sparse = generate(engine, req);
  EXPECT_EQ(sparse.output_ids.size(), dense.output_ids.size()) << f.dir;
  bool global = false;
  for (int64_t l = 0; l < gpu.config.n_layer; ++l) global = global || gpu.config.window(l) == 0;
  if (global)  // the global layers read fewer entries than the dense step
    EXPECT_LT(sparse.bytes_read.back(), dense.bytes_read.back()) << f.dir;
  else  // Mistral's window on every layer: nothing to select on
    EXPECT_EQ(sparse.bytes_read.back(), dense.bytes_read.back()) << f.dir;
}

INSTANTIATE_TEST_SUITE_P(Families, CudaFamilies,
                         ::testing::Values(Family{"qwen3-qknorm", 128, 8, 2}, Family{"mistral-sliding", 128, 8, 2},
                                           Family{"gemma2-softcap", 256, 4, 2},
                                           Family{"gemma3-local-global", 256, 4, 1},
                                           Family{"phi3-partial-rotary", 96, 4, 4}, Family{"qwen2-bias", 64, 6, 2}),
                         [](const auto& info) {
                           std::string n = info.param.dir;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace kvscope
