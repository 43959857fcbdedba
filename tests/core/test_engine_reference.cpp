// The engine against an independent, deliberately naive LibTorch fp32 reference of the Llama
// forward (HF modeling_llama semantics), on tiny random checkpoints written as safetensors:
// qwen2 q/k/v bias, untied head, llama3 and linear RoPE scaling, both RoPE layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/model.h"
#include "kvscope/core/rope.h"
#include "test_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

/// Writes named fp32 tensors as a .safetensors file.
void write_safetensors(const fs::path& path, const std::map<std::string, at::Tensor>& tensors) {
  nlohmann::json header;
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t n = t.numel() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.sizes().vec()}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string h = header.dump();
  const uint64_t len = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), h.size());
  for (const auto& [name, t] : tensors) {
    at::Tensor c = t.contiguous();
    out.write(reinterpret_cast<const char*>(c.data_ptr<float>()), c.numel() * 4);
  }
}

struct Tiny {
  nlohmann::json config;
  std::map<std::string, at::Tensor> w;
};

Tiny make_tiny(const std::string& model_type, bool tied, nlohmann::json rope_scaling) {
  Tiny t;
  const int64_t V = 97, Hd = 48, I = 80, L = 2, H = 6, Hkv = 2, D = 16;
  t.config = {{"model_type", model_type},    {"vocab_size", V},
              {"hidden_size", Hd},           {"intermediate_size", I},
              {"num_hidden_layers", L},      {"num_attention_heads", H},
              {"num_key_value_heads", Hkv},  {"head_dim", D},
              {"rms_norm_eps", 1e-6},        {"rope_theta", 500.0},
              {"tie_word_embeddings", tied}, {"bos_token_id", 1},
              {"eos_token_id", 2},           {"max_position_embeddings", 256}};
  if (!rope_scaling.is_null()) t.config["rope_scaling"] = rope_scaling;
  at::manual_seed(7);
  auto r = [](std::vector<int64_t> s, double scale = 0.2) { return at::randn(s) * scale; };
  t.w["model.embed_tokens.weight"] = r({V, Hd}, 1.0);
  t.w["model.norm.weight"] = 1 + r({Hd}, 0.1);
  if (!tied) t.w["lm_head.weight"] = r({V, Hd});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.w[p + "input_layernorm.weight"] = 1 + r({Hd}, 0.1);
    t.w[p + "post_attention_layernorm.weight"] = 1 + r({Hd}, 0.1);
    t.w[p + "self_attn.q_proj.weight"] = r({H * D, Hd});
    t.w[p + "self_attn.k_proj.weight"] = r({Hkv * D, Hd});
    t.w[p + "self_attn.v_proj.weight"] = r({Hkv * D, Hd});
    t.w[p + "self_attn.o_proj.weight"] = r({Hd, H * D});
    if (model_type == "qwen2") {
      t.w[p + "self_attn.q_proj.bias"] = r({H * D});
      t.w[p + "self_attn.k_proj.bias"] = r({Hkv * D});
      t.w[p + "self_attn.v_proj.bias"] = r({Hkv * D});
    }
    t.w[p + "mlp.gate_proj.weight"] = r({I, Hd});
    t.w[p + "mlp.up_proj.weight"] = r({I, Hd});
    t.w[p + "mlp.down_proj.weight"] = r({Hd, I});
  }
  return t;
}

/// Naive reference: HF LlamaModel forward with eager attention (repeat_kv, full causal mask).
at::Tensor reference_logits(const Tiny& t, const std::vector<int64_t>& ids, const at::Tensor& inv_freq) {
  const auto& c = t.config;
  const int64_t H = c["num_attention_heads"], Hkv = c["num_key_value_heads"], D = c["head_dim"];
  const int64_t T = ids.size();
  const double eps = c["rms_norm_eps"];
  auto W = [&](const std::string& n) { return t.w.at(n).to(at::kDouble); };
  auto norm = [&](const at::Tensor& x, const at::Tensor& w) { return w * x / at::sqrt(x.pow(2).mean(-1, true) + eps); };
  at::Tensor pos = at::arange(T, at::kDouble);
  at::Tensor freqs = at::outer(pos, inv_freq.to(at::kDouble));
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  at::Tensor cos = emb.cos(), sin = emb.sin();
  auto rot = [&](const at::Tensor& x) {  // x [heads, T, D]
    at::Tensor rh = at::cat({-x.narrow(-1, D / 2, D / 2), x.narrow(-1, 0, D / 2)}, -1);
    return x * cos + rh * sin;
  };
  at::Tensor x = W("model.embed_tokens.weight").index_select(0, at::tensor(ids));
  for (int64_t l = 0; l < int64_t(c["num_hidden_layers"]); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = norm(x, W(p + "input_layernorm.weight"));
    auto proj = [&](const std::string& n) {
      at::Tensor y = at::matmul(h, W(p + "self_attn." + n + "_proj.weight").t());
      if (t.w.count(p + "self_attn." + n + "_proj.bias")) y = y + W(p + "self_attn." + n + "_proj.bias");
      return y;
    };
    at::Tensor q = rot(proj("q").view({T, H, D}).transpose(0, 1));
    at::Tensor k = rot(proj("k").view({T, Hkv, D}).transpose(0, 1)).repeat_interleave(H / Hkv, 0);
    at::Tensor v = proj("v").view({T, Hkv, D}).transpose(0, 1).repeat_interleave(H / Hkv, 0);
    at::Tensor s = at::matmul(q, k.transpose(1, 2)) / std::sqrt(double(D));
    s = s.masked_fill(at::ones({T, T}, at::kBool).triu(1), -INFINITY);
    at::Tensor o = at::matmul(at::softmax(s, -1), v).transpose(0, 1).reshape({T, H * D});
    x = x + at::matmul(o, W(p + "self_attn.o_proj.weight").t());
    h = norm(x, W(p + "post_attention_layernorm.weight"));
    at::Tensor a =
        at::silu(at::matmul(h, W(p + "mlp.gate_proj.weight").t())) * at::matmul(h, W(p + "mlp.up_proj.weight").t());
    x = x + at::matmul(a, W(p + "mlp.down_proj.weight").t());
  }
  const std::string head = t.w.count("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
  return at::matmul(norm(x, W("model.norm.weight")), W(head).t());
}

struct Case {
  std::string model_type;
  bool tied;
  nlohmann::json rope_scaling;
};

class EngineVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(EngineVsReference, AllLogitsWholeAndChunkedAndDecode) {
  const Case& k = GetParam();
  Tiny t = make_tiny(k.model_type, k.tied, k.rope_scaling);
  const fs::path dir = fs::temp_directory_path() / ("kvscope_tiny_" + std::to_string(::getpid()) + k.model_type);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << t.config.dump();
  std::ofstream(dir / "tokenizer.json") << test::read_text(test::pycode_dir() / "tokenizer.json");
  write_safetensors(dir / "model.safetensors", t.w);
  const Model model = load_model(dir, LoadOptions{});
  EXPECT_EQ(model.config.qkv_bias, k.model_type == "qwen2");
  const Engine engine(model);
  std::vector<int32_t> ids;
  std::vector<int64_t> ids64;
  for (int i = 0; i < 40; ++i) {
    ids.push_back((i * 37 + 11) % 97);
    ids64.push_back(ids.back());
  }
  const at::Tensor ref = reference_logits(t, ids64, rope_inv_freq(model.config)).to(at::kFloat);
  KvCache c1 = engine.new_cache(64);
  EXPECT_LE((engine.prefill(c1, ids, 0, true) - ref).abs().max().item<double>(), 1e-4);
  KvCache c2 = engine.new_cache(8);
  EXPECT_LE((engine.prefill(c2, ids, 7, true) - ref).abs().max().item<double>(), 1e-4);
  // Token-by-token decode gives each position's logits.
  KvCache c3 = engine.new_cache(4);
  for (size_t i = 0; i < ids.size(); ++i) {
    at::Tensor lg = engine.forward(c3, std::span<const int32_t>(&ids[i], 1));
    EXPECT_LE((lg - ref[i]).abs().max().item<double>(), 1e-4) << "position " << i;
  }
  test::remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EngineVsReference,
                         ::testing::Values(Case{"llama", true, nullptr}, Case{"qwen2", false, nullptr},
                                           Case{"mistral", false, nullptr},
                                           Case{"llama", false, {{"rope_type", "linear"}, {"factor", 4.0}}},
                                           Case{"llama",
                                                true,
                                                {{"rope_type", "llama3"},
                                                 {"factor", 8.0},
                                                 {"low_freq_factor", 1.0},
                                                 {"high_freq_factor", 4.0},
                                                 {"original_max_position_embeddings", 64}}}),
                         [](const auto& info) { return info.param.model_type + std::to_string(info.index); });

TEST(Rope, AdjacentPairsEqualRotateHalfOnPermutedChannels) {
  // Meta/llama2.c layout rotates (2i, 2i+1); HF rotates (i, i + D/2). Permuting channels maps one onto the other.
  ModelConfig c;
  c.head_dim = 8;
  at::Tensor inv = rope_inv_freq(c);
  at::Tensor x = at::randn({5, 3, 8});
  at::Tensor pos = at::arange(5, at::kLong) * 3;
  at::Tensor perm = at::cat({at::arange(0, 8, 2, at::kLong), at::arange(1, 8, 2, at::kLong)});
  at::Tensor a = apply_rope(x, pos, inv, RopeLayout::kAdjacentPairs).index_select(-1, perm);
  at::Tensor b = apply_rope(x.index_select(-1, perm), pos, inv, RopeLayout::kRotateHalf);
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-6);
  // A rotation preserves norms, and position 0 is the identity.
  EXPECT_LE((a.norm() - x.norm()).abs().item<double>(), 1e-4);
  EXPECT_TRUE(at::allclose(apply_rope(x, at::zeros({5}, at::kLong), inv, RopeLayout::kRotateHalf), x));
}

TEST(Rope, Llama3ScalingMatchesTheFormula) {
  // Llama 3.1: factor 8, low 1, high 4, original context 8192, theta 500000, D = 128.
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8;
  at::Tensor inv = rope_inv_freq(c).to(at::kDouble);
  for (int64_t i : {0, 20, 40, 63}) {
    const double f = std::pow(500000.0, -2.0 * i / 128), wl = 2 * M_PI / f;
    double want = f;
    if (wl > 8192)
      want = f / 8;
    else if (wl >= 2048) {
      const double s = (8192 / wl - 1) / 3;
      want = (1 - s) * f / 8 + s * f;
    }
    EXPECT_NEAR(inv[i].item<double>(), want, want * 1e-5) << i;
  }
}

}  // namespace
}  // namespace kvscope
