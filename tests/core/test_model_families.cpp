// The model families beyond Llama against transformers: assets/models/tiny-archs holds one tiny
// random checkpoint per family (weights x3 so forward-pass differences show) with transformers'
// fp32 outputs (golden.json: argmax at every position of 160 ids, the last position's logits, 16
// greedy tokens). CPU fp32 here; the GPU machine runs the same test on CUDA.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "test_support.h"

namespace kvscope {
namespace {

std::filesystem::path tiny_dir() { return test::source_dir() / "assets/models/tiny-archs"; }

class ModelFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelFamily, MatchesTransformers) {
  const auto dir = tiny_dir() / GetParam();
  const nlohmann::json g = test::read_json(dir / "golden.json");
  LoadOptions o;
  if (at::hasCUDA()) o.device = c10::Device(c10::kCUDA);  // the GPU machine runs it there, fp32
  const Model model = load_model(dir, o);
  EXPECT_EQ(model.tokenizer, nullptr) << "no tokenizer files: runs on ids";
  const Engine engine(model);
  const std::vector<int32_t> ids = g["input_ids"].get<std::vector<int32_t>>();
  const int64_t T = static_cast<int64_t>(ids.size());
  KvCache cache = engine.new_cache(T + 16);
  const at::Tensor logits = engine.prefill(cache, ids, 0, /*all_logits=*/true).to(at::kCPU, at::kFloat);  // [T, vocab]
  ASSERT_EQ(logits.size(0), T);
  // Argmax at every position (>= 99%), the last position's logits within 1e-3.
  const auto want_argmax = g["argmax"].get<std::vector<int64_t>>();
  const at::Tensor argmax = logits.argmax(-1);
  int64_t same = 0;
  for (int64_t t = 0; t < T; ++t) same += argmax[t].item<int64_t>() == want_argmax[static_cast<std::size_t>(t)];
  EXPECT_GE(double(same) / double(T), 0.99) << same << " of " << T << " positions";
  const auto want_last = g["last_logits"].get<std::vector<float>>();
  const at::Tensor last = logits[T - 1];
  double max_diff = 0;
  for (std::size_t v = 0; v < want_last.size(); ++v)
    max_diff = std::max(max_diff, std::abs(double(last[static_cast<int64_t>(v)].item<float>()) - want_last[v]));
  EXPECT_LT(max_diff, 1e-3) << "last logits, max abs difference";
  // 16 greedy tokens through the cache.
  std::vector<int32_t> greedy;
  at::Tensor next_logits = last;
  for (int i = 0; i < 16; ++i) {
    const auto tok = static_cast<int32_t>(next_logits.argmax().item<int64_t>());
    greedy.push_back(tok);
    const std::vector<int32_t> one{tok};
    next_logits = engine.forward(cache, one, false).to(at::kCPU, at::kFloat);
  }
  EXPECT_EQ(greedy, g["greedy"].get<std::vector<int32_t>>());
}

// On the GPU machine: the same checkpoints in bf16 keep the argmax at >= 97% of positions (or as
// transformers' own bf16 does).
TEST_P(ModelFamily, Bf16OnCudaKeepsTheArgmax) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device (the GPU machine)";
  const auto dir = tiny_dir() / GetParam();
  const nlohmann::json g = test::read_json(dir / "golden.json");
  LoadOptions o;
  o.device = c10::Device(c10::kCUDA);
  o.dtype = at::kBFloat16;
  const Model model = load_model(dir, o);
  const Engine engine(model);
  const std::vector<int32_t> ids = g["input_ids"].get<std::vector<int32_t>>();
  KvCache cache = engine.new_cache(static_cast<int64_t>(ids.size()));
  const at::Tensor argmax = engine.prefill(cache, ids, 0, true).argmax(-1).to(at::kCPU);
  const auto want = g["argmax"].get<std::vector<int64_t>>();
  int64_t same = 0;
  for (std::size_t t = 0; t < want.size(); ++t) same += argmax[static_cast<int64_t>(t)].item<int64_t>() == want[t];
  const double agree = double(same) / double(want.size());
  // transformers' own bf16 agreement on the same checkpoint (assets/models/tiny-archs/
  // hf_bf16_agreement.json): below 97% for two of these random models, so the bar is 97% or no
  // worse than transformers minus one position.
  const double hf = test::read_json(tiny_dir() / "hf_bf16_agreement.json")[GetParam()].get<double>();
  std::cout << GetParam() << ": bf16 argmax agreement " << agree << " (transformers bf16: " << hf << ")\n";
  EXPECT_GE(agree, std::min(0.97, hf - 1.0 / double(want.size())));
}

INSTANTIATE_TEST_SUITE_P(TinyArchs, ModelFamily,
                         ::testing::Values("llama-llama3-rope", "mistral-sliding", "qwen2-bias", "qwen3-qknorm",
                                           "gemma2-softcap", "gemma3-local-global", "phi3-partial-rotary"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Sliding-window layers are never compressed (kvpress's rule for Gemma 3); the global layers are.
// A decode-time selection stage selects on the global layers only.
TEST(ModelFamilyPipelines, SlidingLayersAreNeverCompressed) {
  const Model model = load_model(tiny_dir() / "gemma3-local-global", LoadOptions{});
  const Engine engine(model);
  PolicyRegistry registry;
  register_builtin_policies(registry);
  const nlohmann::json g = test::read_json(tiny_dir() / "gemma3-local-global/golden.json");
  GenerateRequest req;
  req.prompt_ids = g["input_ids"].get<std::vector<int32_t>>();
  req.max_new_tokens = 2;
  req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.5};
  const Pipeline snap(registry, "snapkv:window=8");
  req.pipeline = &snap;
  const GenerateResult res = generate(engine, req);
  const auto n = static_cast<int64_t>(req.prompt_ids.size());
  for (std::size_t l = 0; l < res.kept.size(); ++l) {
    const int64_t window = model.config.window(static_cast<int64_t>(l));
    for (const auto& head : res.kept[l]) {
      // A sliding layer keeps exactly its window (the last `window` positions), a global one half.
      ASSERT_EQ(static_cast<int64_t>(head.size()), window > 0 ? std::min(n, window) : n / 2) << "layer " << l;
      if (window > 0) EXPECT_EQ(*std::min_element(head.begin(), head.end()), n - window) << "layer " << l;
    }
  }
  // RocketKV's decode-time selection (HSA) runs on the global layers; the sliding ones attend densely
  // over their ring, so with a budget of the whole history it reproduces the dense run's tokens.
  const Pipeline rocket(registry, "hsa:stage1=false");
  req.pipeline = &rocket;
  req.budget = {BudgetSpec::Unit::kFetched, 4096};
  req.max_new_tokens = 8;
  req.capture = CaptureLevel::kSummary;
  const GenerateResult sparse = generate(engine, req);
  GenerateRequest dense_req = req;
  dense_req.pipeline = nullptr;
  const GenerateResult dense = generate(engine, dense_req);
  EXPECT_EQ(sparse.output_ids, dense.output_ids);
  ASSERT_EQ(sparse.bytes_read.size(), 7u) << "one per decode step after the prefill's token";
  for (std::size_t l = 0; l < sparse.kept.size(); ++l) {
    const int64_t window = model.config.window(static_cast<int64_t>(l));
    for (const auto& head : sparse.kept[l])
      EXPECT_EQ(static_cast<int64_t>(head.size()), window > 0 ? std::min(n, window) : n) << "layer " << l;
  }
  // A budget below the history: the global layers read fewer entries than the dense step.
  req.budget = {BudgetSpec::Unit::kFetched, 32};
  const GenerateResult small = generate(engine, req);
  ASSERT_EQ(small.output_ids.size(), 8u);
  EXPECT_LT(small.bytes_read.back(), dense.bytes_read.back());
}

TEST(ModelFamilyPipelines, SlidingLayersDecodeThroughARingOfTheirWindow) {
  const Model model = load_model(tiny_dir() / "mistral-sliding", LoadOptions{});
  const Engine engine(model);
  const int64_t W = model.config.window(0), n_prompt = 100, steps = 2 * W + 5, n_turn = 20;
  ASSERT_EQ(W, 48);
  std::vector<int32_t> ids(static_cast<std::size_t>(n_prompt + steps + n_turn));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % model.config.vocab_size);
  KvCache whole = engine.new_cache(static_cast<int64_t>(ids.size()));
  const at::Tensor want = engine.forward(whole, ids, /*all_logits=*/true);  // [T, vocab]
  KvCache cache = engine.new_cache(n_prompt + steps + n_turn);
  at::Tensor got = engine.prefill(cache, std::span<const int32_t>(ids.data(), n_prompt), /*chunk=*/32);
  double worst = (got - want[n_prompt - 1]).abs().max().item<double>();
  for (int64_t l = 0; l < model.config.n_layer; ++l) {
    EXPECT_EQ(cache.layer(l).capacity[0], W) << "layer " << l << ": the prompt's keys past the window are freed";
    EXPECT_TRUE(cache.layer(l).ringed);
  }
  for (int64_t t = n_prompt; t < n_prompt + steps; ++t) {
    got = engine.forward(cache, std::span<const int32_t>(&ids[static_cast<std::size_t>(t)], 1));
    worst = std::max(worst, (got - want[t]).abs().max().item<double>());
    // Position p sits at row p % W of every head.
    const at::Tensor pos = cache.positions(0).select(0, 0);
    EXPECT_EQ(pos[t % W].item<int64_t>(), t);
    EXPECT_EQ(cache.layer(0).length[0], std::min(t + 1, W));
  }
  const int64_t t0 = n_prompt + steps;
  const at::Tensor turn =
      engine.prefill(cache, std::span<const int32_t>(&ids[static_cast<std::size_t>(t0)], n_turn), 0, true);
  worst = std::max(worst, (turn - want.narrow(0, t0, n_turn)).abs().max().item<double>());
  EXPECT_LT(worst, 1e-4) << "max |logit diff| against the whole sequence in one prefill";
  EXPECT_EQ(cache.layer(0).length[0], W);
  EXPECT_EQ(cache.positions(0).min().item<int64_t>(), t0 + n_turn - W);
  EXPECT_THROW(cache.retain(0, std::vector<at::Tensor>(2, at::arange(4)), 1), std::logic_error)
      << "a sliding layer is never compressed";
}

TEST(ModelFamilyConfig, ParsesEachFamilysStructure) {
  const ModelConfig gemma3 = parse_hf_config(tiny_dir() / "gemma3-local-global/config.json");
  EXPECT_EQ(gemma3.layer_window, (std::vector<int64_t>{48, 48, 0, 48}));
  EXPECT_EQ(gemma3.layer_rope_theta, (std::vector<double>{1e4, 1e4, 1e6, 1e4}));
  EXPECT_TRUE(gemma3.qk_norm && gemma3.sandwich_norms && gemma3.norm_plus_one);
  EXPECT_DOUBLE_EQ(gemma3.attn_scale, 1.0 / std::sqrt(32.0));
  EXPECT_EQ(gemma3.attn_softcap, 0.0) << "null soft-capping means none";
  const ModelConfig gemma2 = parse_hf_config(tiny_dir() / "gemma2-softcap/config.json");
  EXPECT_EQ(gemma2.attn_softcap, 50.0);
  EXPECT_EQ(gemma2.final_softcap, 30.0);
  EXPECT_EQ(gemma2.activation, GatedActivation::kGeluTanh);
  EXPECT_EQ(parse_hf_config(tiny_dir() / "phi3-partial-rotary/config.json").rope_dim(), 12);  // 16 x 0.75
  EXPECT_EQ(parse_hf_config(tiny_dir() / "mistral-sliding/config.json").layer_window,
            (std::vector<int64_t>{48, 48, 48}));
  const ModelConfig qwen3 = parse_hf_config(tiny_dir() / "qwen3-qknorm/config.json");
  EXPECT_TRUE(qwen3.layer_window.empty()) << "use_sliding_window false";
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.unfused_features(), "head_dim 32") << "q/k norms are fused; the tiny head size is not";
  EXPECT_EQ(gemma3.unfused_features(), "head_dim 32") << "the decode kernels take 64, 96, 128, 256";
  EXPECT_EQ(parse_hf_config(tiny_dir() / "llama-llama3-rope/config.json").unfused_features(), "head_dim 16");
}

TEST(ModelFamilyConfig, BadConfigsNameTheFileAndTheField) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvscope_families_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& text) {
    const auto p = dir / "config.json";
    std::ofstream(p) << text;
    return p;
  };
  auto message = [&](const std::string& text) {
    try {
      parse_hf_config(write(text));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string base = R"("vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, )"
                           R"("num_attention_heads": 4, "num_key_value_heads": 2)";
  EXPECT_NE(message("{\"model_type\": \"falcon\", " + base + "}").find("unknown model_type 'falcon'"),
            std::string::npos);
  EXPECT_NE(message("{\"model_type\": \"gemma3\", " + base + "}").find("text_config"), std::string::npos);
  EXPECT_NE(message(R"({"model_type": "gemma2", "vocab_size": 512, "hidden_size": 64})").find("intermediate_size"),
            std::string::npos);
  EXPECT_NE(message("{\"model_type\": \"gemma2\", " + base + ", \"layer_types\": [\"full_attention\"]}")
                .find("layer_types has 1 entries for 2 layers"),
            std::string::npos);
  EXPECT_NE(message("{\"model_type\": \"gemma2\", " + base + "}").find("sliding_window is missing"), std::string::npos);
  EXPECT_NE(message("{\"model_type\": \"phi3\", " + base + ", \"partial_rotary_factor\": 0.1875}").find("rotary"),
            std::string::npos);
  const std::string m = message("{\"model_type\": \"falcon\", " + base + "}");
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
  test::remove_tree(dir);
}

}  // namespace
}  // namespace kvscope
