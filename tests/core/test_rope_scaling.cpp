// RoPE scaling types dynamic, yarn and longrope (and the earlier linear / llama3) as transformers
// 5.x computes them (modeling_rope_utils.py and the rotary embeddings' dynamic_rope_update):
// (1) against independent double-precision computations written from the formulas (YaRN: Peng et
// al. 2023; dynamic NTK; LongRoPE as Phi-3 uses it) at seq_lens around the thresholds;
// (2) against tests/data/rope/hf_rope_golden.json, written by tools/hf-rope-golden.py with
// transformers itself (skipped where the file is absent); (3) config.json parsing: every key
// spelling, and bad inputs refused with an InputError naming the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/rope.h"
#include "test_support.h"

namespace kvscope {
namespace {

using nlohmann::json;
const std::filesystem::path kSource = "rope-test/config.json";

/// A config.json of `model_type` with head_dim = hidden / heads; RoPE fields added by the caller.
json make_config(const std::string& model_type, int64_t hidden, int64_t heads, int64_t max_pos) {
  return {{"model_type", model_type},     {"vocab_size", 64},
          {"hidden_size", hidden},        {"intermediate_size", 32},
          {"num_hidden_layers", 2},       {"num_attention_heads", heads},
          {"num_key_value_heads", heads}, {"max_position_embeddings", max_pos}};
}

ModelConfig parse(const json& j) { return parse_hf_config_json(j, kSource); }

std::vector<double> values(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kCPU, at::kDouble).contiguous();
  return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i]) + 1e-30) << what << " [" << i << "]";
}

/// theta^(-2i/d), i < d/2, in double.
std::vector<double> plain(double theta, int64_t d) {
  std::vector<double> f;
  for (int64_t i = 0; i < d / 2; ++i) f.push_back(std::pow(theta, -2.0 * double(i) / double(d)));
  return f;
}

// ---------------------------------------------------------------------------------------------
// (1) The formulas, in double.

/// Dynamic NTK: for seq_len > L (max_position_embeddings) the base becomes
/// theta * (s * seq_len / L - (s - 1))^(d / (d - 2)); at or below L the plain frequencies.
std::vector<double> dynamic_ref(double theta, int64_t d, double s, int64_t L, int64_t seq_len) {
  const double n = double(std::max(seq_len, L));
  return plain(theta * std::pow(s * n / double(L) - (s - 1), double(d) / double(d - 2)), d);
}

TEST(RopeScaling, DynamicNtkMatchesTheFormulaAroundTheThreshold) {
  json j = make_config("llama", 512, 4, 4096);  // head_dim 128, Llama 2's context
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::kDynamic);
  for (int64_t n : {0, 1, 4095, 4096, 4097, 6000, 8192, 100000}) {
    const RopeFrequencies f = rope_frequencies(c, -1, n);
    expect_near_rel(values(f.inv_freq), dynamic_ref(10000, 128, 2.0, 4096, n), 2e-6, "seq_len " + std::to_string(n));
    EXPECT_EQ(f.attention_scaling, 1.0);
  }
  // At or below the context the frequencies are the plain ones; above, every channel but the first
  // turns slower.
  EXPECT_TRUE(at::equal(rope_frequencies(c, -1, 4096).inv_freq, rope_frequencies(c, -1, 0).inv_freq));
  const auto above = values(rope_frequencies(c, -1, 4097).inv_freq), at_ctx = values(rope_inv_freq(c));
  for (std::size_t i = 1; i < above.size(); ++i) EXPECT_LT(above[i], at_ctx[i]) << i;
  // A non-integer factor, partial rotary (phi3-style 0.75 of 128 = 96 channels), theta 1e6.
  json k = make_config("qwen2", 256, 2, 2048);
  k["rope_parameters"] = {
      {"rope_type", "dynamic"}, {"factor", 3.3}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.75}};
  const ModelConfig q = parse(k);
  ASSERT_EQ(q.rope_dim(), 96);
  for (int64_t n : {2047, 2048, 2049, 3000, 9999})
    expect_near_rel(values(rope_frequencies(q, -1, n).inv_freq), dynamic_ref(1e6, 96, 3.3, 2048, n), 2e-6,
                    "qwen2 seq_len " + std::to_string(n));
}

TEST(RopeScaling, DynamicNtkKeepsHfStateAcrossForwards) {
  // HF's dynamic_frequency_update: recompute when seq_len grows past the cached maximum, keep the
  // frequencies while forwards stay at or below it, reset only below max_position_embeddings.
  json j = make_config("llama", 512, 4, 4096);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  int64_t state = 0;
  const std::vector<std::pair<int64_t, int64_t>> steps = {{100, 4096},  {4096, 4096}, {4097, 4097}, {6000, 6000},
                                                          {5000, 6000}, {4096, 6000}, {4095, 4096}, {8192, 8192},
                                                          {8193, 8193}, {1, 4096},    {4097, 4097}};
  for (const auto& [seq_len, want] : steps) {
    EXPECT_EQ(rope_forward_seq_len(c, state, seq_len), want) << "seq_len " << seq_len;
    EXPECT_EQ(state, want);
  }
  // Other types pass seq_len through and keep no state.
  json y = make_config("llama", 512, 4, 4096);
  y["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(64, 1.0)},
                       {"long_factor", std::vector<double>(64, 2.0)},
                       {"original_max_position_embeddings", 1024}};
  int64_t untouched = 0;
  EXPECT_EQ(rope_forward_seq_len(parse(y), untouched, 5000), 5000);
  EXPECT_EQ(rope_forward_seq_len(parse(y), untouched, 10), 10);
  EXPECT_EQ(untouched, 0);
}

/// YaRN (Peng et al. 2023, NTK-by-parts; the reference implementation's correction range): the
/// dimension index where the wavelength fits `rot` rotations into the original context L is
/// d ln(L / (2 pi rot)) / (2 ln theta); a linear ramp over the indices between beta_fast's (floor)
/// and beta_slow's (ceil) goes from extrapolation (plain frequency) to interpolation (/ s).
std::vector<double> yarn_ref(double theta, int64_t d, double s, int64_t L, double beta_fast, double beta_slow,
                             bool truncate) {
  auto dim_of = [&](double rot) { return double(d) * std::log(double(L) / (2 * M_PI * rot)) / (2 * std::log(theta)); };
  double lo = dim_of(beta_fast), hi = dim_of(beta_slow);
  if (truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0);
  hi = std::min(hi, double(d - 1));
  if (lo == hi) hi += 0.001;
  std::vector<double> f = plain(theta, d);
  for (int64_t i = 0; i < d / 2; ++i) {
    const double ramp = std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);  // 0: extrapolate, 1: interpolate
    f[i] = f[i] * (1 - ramp) + f[i] / s * ramp;
  }
  return f;
}

TEST(RopeScaling, YarnMatchesTheFormula) {
  // Qwen2.5-7B's long-context setting: factor 4 over 32768, head_dim 128, theta 1e6.
  json q = make_config("qwen2", 3584, 28, 32768);
  q["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"type", "yarn"}};
  const ModelConfig c = parse(q);
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  for (int64_t n : {0, 1, 32768, 32769, 131072}) {  // independent of seq_len
    const RopeFrequencies f = rope_frequencies(c, -1, n);
    expect_near_rel(values(f.inv_freq), yarn_ref(10000.0, 128, 4.0, 32768, 32, 1, true), 2e-6, "qwen2.5");
    EXPECT_NEAR(f.attention_scaling, 0.1 * std::log(4.0) + 1, 1e-15);
  }
  // rope_theta 1e6 (Qwen2.5's real base) through rope_parameters.
  json q6 = make_config("qwen2", 3584, 28, 32768);
  q6["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  expect_near_rel(values(rope_inv_freq(parse(q6))), yarn_ref(1e6, 128, 4.0, 32768, 32, 1, true), 2e-6, "theta 1e6");
  // DeepSeek-V3: factor 40 over 4096, mscale = mscale_all_dim = 1 -> attention factor 1.
  json d = make_config("llama", 4096, 64, 163840);
  d["rope_scaling"] = {{"beta_fast", 32}, {"beta_slow", 1},        {"factor", 40},
                       {"mscale", 1.0},   {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096},
                       {"type", "yarn"}};
  const RopeFrequencies ds = rope_frequencies(parse(d), -1, 5000);
  expect_near_rel(values(ds.inv_freq), yarn_ref(10000, 64, 40, 4096, 32, 1, true), 2e-6, "deepseek");
  EXPECT_NEAR(ds.attention_scaling, 1.0, 1e-15);
  // mscale / mscale_all_dim that differ: the ratio of the two get_mscale values.
  d["rope_scaling"]["mscale"] = 1.0;
  d["rope_scaling"]["mscale_all_dim"] = 0.707;
  const double m = (0.1 * 1.0 * std::log(40.0) + 1) / (0.1 * 0.707 * std::log(40.0) + 1);
  EXPECT_NEAR(rope_frequencies(parse(d), -1, 0).attention_scaling, m, 1e-15);
  // Only one of them set: the plain 0.1 ln(s) + 1; an explicit attention_factor wins.
  d["rope_scaling"]["mscale_all_dim"] = 0;
  EXPECT_NEAR(rope_frequencies(parse(d), -1, 0).attention_scaling, 0.1 * std::log(40.0) + 1, 1e-15);
  d["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_EQ(rope_frequencies(parse(d), -1, 0).attention_scaling, 1.5);
  // gpt-oss style: truncate false (fractional ramp bounds), other betas, theta 150000.
  json g = make_config("llama", 2880, 64, 131072);
  g["head_dim"] = 64;
  g["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", 150000.0},
                          {"factor", 32.0},
                          {"beta_fast", 24.0},
                          {"beta_slow", 2.0},
                          {"truncate", false},
                          {"original_max_position_embeddings", 4096}};
  const ModelConfig go = parse(g);
  EXPECT_FALSE(go.rope_scaling.truncate);
  expect_near_rel(values(rope_inv_freq(go)), yarn_ref(150000, 64, 32, 4096, 24, 2, false), 2e-6, "no truncate");
  const auto untruncated = values(rope_inv_freq(go)), truncated = yarn_ref(150000, 64, 32, 4096, 24, 2, true);
  double most = 0;
  for (std::size_t i = 0; i < truncated.size(); ++i) most = std::max(most, std::abs(untruncated[i] / truncated[i] - 1));
  EXPECT_GT(most, 1e-3) << "truncate must matter inside the ramp";
}

TEST(RopeScaling, YarnExtrapolatesFastDimensionsAndInterpolatesSlowOnes) {
  // The paper's NTK-by-parts in terms of rotations r = L / wavelength over the original context:
  // r > beta_fast: unchanged; r < beta_slow: divided by the factor.
  json q = make_config("llama", 512, 4, 32768);
  q["rope_scaling"] = {{"type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 4096}};
  const auto got = values(rope_inv_freq(parse(q)));
  const auto base = plain(10000, 128);
  int fast = 0, slow = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const double rotations = 4096 / (2 * M_PI / base[i]);
    if (rotations > 32 * 1.5) {
      EXPECT_NEAR(got[i], base[i], base[i] * 2e-6) << i;
      ++fast;
    }
    if (rotations < 1 / 1.5) {
      EXPECT_NEAR(got[i], base[i] / 8, base[i] / 8 * 2e-6) << i;
      ++slow;
    }
  }
  EXPECT_GT(fast, 5);
  EXPECT_GT(slow, 5);
}

TEST(RopeScaling, LongRopeSwitchesFactorsAboveTheOriginalContext) {
  // Phi-3.5-mini style: original_max_position_embeddings at the top level, no factor (then
  // max / original = 32), head_dim 96, 48 factors each.
  json j = make_config("phi3", 3072, 32, 131072);
  j["original_max_position_embeddings"] = 4096;
  std::vector<double> shortf, longf;
  for (int i = 0; i < 48; ++i) shortf.push_back(1.0 + 0.04 * i), longf.push_back(1.0 + 1.3 * i);
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", shortf}, {"long_factor", longf}};
  const ModelConfig c = parse(j);
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  const double attn = std::sqrt(1 + std::log(32.0) / std::log(4096.0));
  const auto base = plain(10000, 96);
  for (int64_t n : {0, 1, 4095, 4096, 4097, 131072}) {
    const RopeFrequencies f = rope_frequencies(c, -1, n);
    const auto& fac = n > 4096 ? longf : shortf;
    std::vector<double> want;
    for (std::size_t i = 0; i < base.size(); ++i) want.push_back(base[i] / double(float(fac[i])));
    expect_near_rel(values(f.inv_freq), want, 2e-6, "seq_len " + std::to_string(n));
    EXPECT_NEAR(f.attention_scaling, attn, 1e-15);
  }
  // A given factor and attention_factor win; the original context from the RoPE parameters.
  json l = make_config("llama", 512, 8, 16384);
  l["rope_parameters"] = {{"rope_type", "longrope"},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", 2048},
                          {"short_factor", std::vector<double>(32, 1.5)},
                          {"long_factor", std::vector<double>(32, 3.0)}};
  const ModelConfig lc = parse(l);
  EXPECT_NEAR(rope_frequencies(lc, -1, 0).attention_scaling, std::sqrt(1 + std::log(4.0) / std::log(2048.0)), 1e-15);
  l["rope_parameters"]["attention_factor"] = 1.25;
  EXPECT_EQ(rope_frequencies(parse(l), -1, 2049).attention_scaling, 1.25);
  expect_near_rel(
      values(rope_frequencies(lc, -1, 2049).inv_freq),
      [&] {
        auto w = plain(10000, 64);
        for (auto& v : w) v /= 3.0;
        return w;
      }(),
      2e-6, "long");
  // max_position_embeddings <= original: factor <= 1, no attention scaling.
  json s = make_config("phi3", 512, 4, 2048);
  s["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(64, 1.0)},
                       {"long_factor", std::vector<double>(64, 1.0)}};
  EXPECT_EQ(parse(s).rope_scaling.original_max_position_embeddings, 4096);  // Phi3Config's default
  EXPECT_EQ(rope_frequencies(parse(s), -1, 0).attention_scaling, 1.0);
}

TEST(RopeScaling, RopeTableScalesCosAndSinInFp32BeforeTheCast) {
  const at::Tensor inv = 1.0 / at::pow(10000.0, at::arange(0, 16, 2, at::kLong).to(at::kFloat) / 16);
  const at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 7, 4095});
  const RopeTable plain_t = rope_table(pos, inv, at::kFloat), scaled = rope_table(pos, inv, at::kFloat, 1.2);
  EXPECT_TRUE(at::allclose(scaled.cos, plain_t.cos * 1.2f, 0, 0));
  EXPECT_TRUE(at::allclose(scaled.sin, plain_t.sin * 1.2f, 0, 0));
  EXPECT_EQ(scaled.cos[0][0][0].item<float>(), 1.2f);  // position 0: cos = the scaling itself
  // bf16: the fp32 product, rounded once (not the bf16 cos times 1.2, rounded twice).
  const RopeTable b = rope_table(pos, inv, at::kBFloat16, 1.2);
  EXPECT_TRUE(at::equal(b.cos, (plain_t.cos * 1.2f).to(at::kBFloat16)));
  // The default (1.0) is the table as before.
  EXPECT_TRUE(at::equal(rope_table(pos, inv, at::kFloat, 1.0).cos, plain_t.cos));
}

TEST(RopeScaling, SeqDependenceSaysWhenTablesChange) {
  json d = make_config("llama", 512, 4, 4096);
  d["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  RopeSeqDependence dep = rope_seq_dependence(parse(d));
  EXPECT_EQ(dep.kind, RopeSeqDependence::Kind::kDynamic);
  EXPECT_EQ(dep.threshold, 4096);
  json l = make_config("phi3", 512, 4, 131072);
  l["original_max_position_embeddings"] = 4096;
  l["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(64, 1.0)},
                       {"long_factor", std::vector<double>(64, 4.0)}};
  dep = rope_seq_dependence(parse(l));
  EXPECT_EQ(dep.kind, RopeSeqDependence::Kind::kLongShort);
  EXPECT_EQ(dep.threshold, 4096);
  for (const json& fixed : {json{{"type", "yarn"}, {"factor", 4.0}}, json{{"type", "linear"}, {"factor", 4.0}},
                            json{{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 1024}},
                            json()}) {
    json y = make_config("llama", 512, 4, 4096);
    y["rope_scaling"] = fixed;
    EXPECT_EQ(rope_seq_dependence(parse(y)).kind, RopeSeqDependence::Kind::kNone) << fixed.dump();
  }
}

TEST(RopeScaling, GemmaLocalLayersKeepTheirBaseWithoutScaling) {
  // Gemma 3, transformers 5 spelling: rope_parameters by layer type; the full layers scale.
  json j = make_config("gemma3_text", 256, 2, 131072);
  j["sliding_window"] = 512;
  j["layer_types"] = {"sliding_attention", "full_attention"};
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 131072);  // layered: no top-level lookup
  const RopeFrequencies local = rope_frequencies(c, 0, 200000), global = rope_frequencies(c, 1, 200000);
  expect_near_rel(values(local.inv_freq), plain(10000, 128), 2e-6, "local");
  EXPECT_EQ(local.attention_scaling, 1.0);
  expect_near_rel(values(global.inv_freq), yarn_ref(1e6, 128, 8, 131072, 32, 1, true), 2e-6, "global");
  EXPECT_NEAR(global.attention_scaling, 0.1 * std::log(8.0) + 1, 1e-15);
  EXPECT_EQ(rope_seq_dependence(c, 0).kind, RopeSeqDependence::Kind::kNone);
}

TEST(RopeScaling, LegacyRopeInvFreqIsTheUnknownSeqLenRegime) {
  json j = make_config("phi3", 512, 4, 131072);
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(64, 1.0)},
                       {"long_factor", std::vector<double>(64, 4.0)}};
  const ModelConfig c = parse(j);
  EXPECT_TRUE(at::equal(rope_inv_freq(c), rope_frequencies(c, -1, 4096).inv_freq));
  EXPECT_FALSE(at::equal(rope_inv_freq(c), rope_frequencies(c, -1, 4097).inv_freq));
}

// ---------------------------------------------------------------------------------------------
// (3) Parsing.

TEST(RopeScalingParse, EverySpellingOfTheType) {
  // transformers < 5: rope_scaling with "type" or "rope_type"; >= 5: rope_parameters with rope_theta.
  for (const char* key : {"type", "rope_type"}) {
    json j = make_config("llama", 512, 4, 4096);
    j["rope_theta"] = 500000.0;
    j["rope_scaling"] = {{key, "dynamic"}, {"factor", 2.0}};
    const ModelConfig c = parse(j);
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kDynamic) << key;
    EXPECT_EQ(c.rope_scaling.factor, 2.0);
    EXPECT_EQ(c.rope_theta, 500000.0);
  }
  json p = make_config("qwen2", 3584, 28, 32768);
  p["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", 1e6},
                          {"factor", 4.0},
                          {"beta_fast", 16},
                          {"original_max_position_embeddings", 8192}};
  const ModelConfig c = parse(p);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.rope_scaling.truncate);
  // Without original_max_position_embeddings anywhere: max_position_embeddings (HF 5.x).
  p["rope_parameters"].erase("original_max_position_embeddings");
  EXPECT_EQ(parse(p).rope_scaling.original_max_position_embeddings, 32768);
  // yarn's factor may be null: max_position_embeddings / original_max_position_embeddings.
  p["rope_parameters"]["factor"] = nullptr;
  p["rope_parameters"]["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(parse(p).rope_scaling.factor, 8.0);
  // As in HF, a non-empty rope_scaling wins over rope_parameters; "default" is no scaling.
  json both = make_config("llama", 512, 4, 4096);
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000.0}};
  both["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}, {"rope_theta", 7000.0}};
  EXPECT_EQ(parse(both).rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(parse(both).rope_theta, 7000.0);
  both["rope_scaling"] = json::object();
  EXPECT_EQ(parse(both).rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(parse(both).rope_theta, 5000.0);
}

TEST(RopeScalingParse, Phi3StyleTopLevelOriginalContextAndAliases) {
  json j = make_config("phi3", 3072, 24, 131072);
  j["original_max_position_embeddings"] = 4096;
  j["partial_rotary_factor"] = 0.75;  // Phi-4-mini: 96 of 128 channels rotate
  j["rope_parameters"] = {{"rope_type", "longrope"},
                          {"rope_theta", 10000.0},
                          {"original_max_position_embeddings", 2048},  // the top-level one wins
                          {"short_factor", std::vector<double>(48, 1.0)},
                          {"long_factor", std::vector<double>(48, 2.0)}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_dim(), 96);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(rope_frequencies(c, -1, 5000).inv_freq.size(0), 48);
  // Phi3Config reads "su" and "yarn" as longrope; other families do not know "su".
  for (const char* alias : {"su", "yarn"}) {
    json a = make_config("phi3", 3072, 32, 131072);
    a["rope_scaling"] = {
        {"type", alias}, {"short_factor", std::vector<double>(48, 1.0)}, {"long_factor", std::vector<double>(48, 2.0)}};
    EXPECT_EQ(parse(a).rope_scaling.type, RopeScaling::Type::kLongRope) << alias;
  }
  json l = make_config("llama", 512, 4, 4096);
  l["rope_scaling"] = {
      {"type", "su"}, {"short_factor", std::vector<double>(64, 1.0)}, {"long_factor", std::vector<double>(64, 2.0)}};
  EXPECT_THROW(parse(l), InputError);
}

/// Expects an InputError whose message names the file and contains `problem`.
void expect_refused(const json& j, const std::string& problem) {
  try {
    parse(j);
    ADD_FAILURE() << "expected an InputError about " << problem << " for " << j.dump().substr(0, 300);
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(kSource.string() + ": ", 0), 0u) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << what;
  }
}

TEST(RopeScalingParse, BadInputsNameTheFile) {
  auto with = [](json rope, const std::string& model_type = "llama") {
    json j = make_config(model_type, 512, 4, 4096);
    j["rope_scaling"] = std::move(rope);
    return j;
  };
  for (const char* type : {"linear", "dynamic", "yarn"})
    expect_refused(with({{"type", type}}), "rope scaling '" + std::string(type) + "' needs 'factor'");
  expect_refused(with({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}}),
                 "rope scaling 'llama3' needs 'high_freq_factor'");
  expect_refused(with({{"type", "ntk-by-magic"}, {"factor", 2.0}}),
                 "unsupported rope scaling type 'ntk-by-magic' (supported: default, linear, dynamic, yarn, longrope, "
                 "llama3)");
  expect_refused(with({{"type", "longrope"},
                       {"short_factor", std::vector<double>(64, 1.0)},
                       {"long_factor", std::vector<double>(63, 2.0)}}),
                 "long_factor has 63 entries, the rotary dimension 128 needs 64");
  expect_refused(with({{"type", "longrope"},
                       {"short_factor", std::vector<double>(48, 1.0)},
                       {"long_factor", std::vector<double>(64, 2.0)}}),
                 "short_factor has 48 entries");
  expect_refused(with({{"type", "longrope"}, {"short_factor", std::vector<double>(64, 1.0)}}),
                 "rope scaling 'longrope' needs 'long_factor'");
  expect_refused(
      with({{"type", "longrope"}, {"short_factor", {1.0, "x"}}, {"long_factor", std::vector<double>(64, 2.0)}}),
      "'short_factor' holds \"x\"");
  expect_refused(with({{"type", "longrope"},
                       {"short_factor", std::vector<double>(64, 0.0)},
                       {"long_factor", std::vector<double>(64, 2.0)}}),
                 "'short_factor' holds 0.0");
  expect_refused(with({{"type", "yarn"}, {"factor", 4.0}, {"truncate", "no"}}), "'truncate' must be true or false");
  expect_refused(with({{"type", "yarn"}, {"factor", "four"}}), "'factor' must be a finite number");
  expect_refused(with({{"type", "yarn"}, {"factor", -4.0}}), "rope scaling factor must be > 0");
  expect_refused(with({{"type", "yarn"}, {"factor", 4.0}, {"attention_factor", 0.0}}), "attention_factor must be > 0");
  expect_refused(with({{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 0}}),
                 "original_max_position_embeddings must be > 0");
  expect_refused(with({{"type", 7}}), "rope scaling type must be a string");
  json j = make_config("llama", 512, 4, 4096);
  j["rope_scaling"] = "yarn";
  expect_refused(j, "rope_scaling must be an object");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}};
  expect_refused(j, "rope scaling 'yarn' needs 'factor'");
  j["rope_parameters"] = {{"rope_type", "magic"}, {"rope_theta", 1e6}};
  expect_refused(j, "unsupported rope scaling type 'magic'");
  // Gemma 3, rope_parameters by layer type: the full-attention entry is checked too.
  json g = make_config("gemma3_text", 256, 2, 8192);
  g["sliding_window"] = 512;
  g["rope_parameters"] = {{"full_attention", {{"rope_type", "dynamic"}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  expect_refused(g, "rope scaling 'dynamic' needs 'factor'");
}

// ---------------------------------------------------------------------------------------------
// (2) transformers' own numbers.

const char* type_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::kNone:
      return "default";
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kLlama3:
      return "llama3";
    case RopeScaling::Type::kDynamic:
      return "dynamic";
    case RopeScaling::Type::kYarn:
      return "yarn";
    case RopeScaling::Type::kLongRope:
      return "longrope";
  }
  return "?";
}

TEST(RopeScalingGolden, MatchesTransformers) {
  const auto path = test::source_dir() / "tests/data/rope/hf_rope_golden.json";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is absent: run tools/hf-rope-golden.py " << path
                 << " where torch and transformers 5.x are installed";
  const json g = test::read_json(path);
  ASSERT_EQ(g.at("format"), "kvscope.hf_rope_golden.v1");
  std::size_t checked = 0;
  for (const json& k : g.at("cases")) {
    const std::string name = k.at("name");
    SCOPED_TRACE(name);
    if (k.contains("skipped")) {  // transformers itself refused the config
      std::cout << "[ INFO     ] " << name << ": not checked, transformers refused it: " << k.at("skipped") << "\n";
      continue;
    }
    ++checked;
    const ModelConfig c = parse_hf_config_json(k.at("config"), path);
    EXPECT_EQ(type_name(c.rope_scaling.type), k.at("rope_type").get<std::string>());
    ASSERT_EQ(c.rope_dim(), k.at("rope_dim").get<int64_t>());
    auto check = [&](const RopeFrequencies& f, const json& want, const std::string& what) {
      expect_near_rel(values(f.inv_freq), want.at("inv_freq").get<std::vector<double>>(), 2e-6, name + " " + what);
      EXPECT_NEAR(f.attention_scaling, want.at("attention_scaling").get<double>(), 1e-12) << what;
    };
    check(rope_frequencies(c, -1, 0), k.at("init"), "init");
    for (const json& d : k.at("direct"))
      check(rope_frequencies(c, -1, d.at("seq_len").get<int64_t>()), d,
            "ROPE_INIT_FUNCTIONS seq_len " + d.at("seq_len").dump());
    // Forwards in order through one rotary module: its state (dynamic) carries over.
    int64_t state = 0;
    for (const json& f : k.at("forwards")) {
      const auto positions = f.at("positions").get<std::vector<int64_t>>();
      const int64_t seq_len = *std::max_element(positions.begin(), positions.end()) + 1;
      ASSERT_EQ(seq_len, f.at("seq_len").get<int64_t>());
      const std::string what = "forward seq_len " + std::to_string(seq_len);
      const RopeFrequencies r = rope_frequencies(c, -1, rope_forward_seq_len(c, state, seq_len));
      check(r, f, what);
      const RopeTable t = rope_table(at::tensor(positions), r.inv_freq, at::kFloat, r.attention_scaling);
      const auto want_cos = f.at("cos").get<std::vector<std::vector<double>>>();
      const auto want_sin = f.at("sin").get<std::vector<std::vector<double>>>();
      const auto inv = values(r.inv_freq);
      for (std::size_t p = 0; p < positions.size(); ++p)
        for (std::size_t i = 0; i < inv.size(); ++i) {
          // Angles in fp32: a few ulps of the angle (large positions) on top of cos/sin's own error.
          const double tol = 2e-6 + 3e-7 * double(positions[p]) * inv[i];
          EXPECT_NEAR(t.cos[int64_t(p)][0][int64_t(i)].item<double>(), want_cos[p][i], tol)
              << what << " p" << p << " i" << i;
          EXPECT_NEAR(t.sin[int64_t(p)][0][int64_t(i)].item<double>(), want_sin[p][i], tol)
              << what << " p" << p << " i" << i;
        }
    }
  }
  EXPECT_GE(checked, 12u) << "cases transformers computed";
}

}  // namespace
}  // namespace kvscope
