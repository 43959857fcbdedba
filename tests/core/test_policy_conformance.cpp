// Conformance of every registered policy: each scoring policy combined with each budget policy on
// small random LayerPrefill inputs (several n_tok including 1 and 37; GQA groups 1 and 3). Checks
// the contracts of policy.h: score shape/dtype, kept indices valid, sorted, unique, budget
// respected, deterministic, everything kept when the budget covers the prompt; plus the
// registry's table (specs, defaults) and resolve_params errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "kvscope/core/errors.h"
#include "kvscope/core/head_pattern.h"

#include <numeric>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/presets.h"
#include "policies/scoring.h"
#include "small_config.h"

namespace kvscope {
namespace {

PolicyRegistry builtin_registry() {
  PolicyRegistry r;
  register_builtin_policies(r);
  return r;
}

std::vector<std::string> names_of(const PolicyRegistry& r, Stage stage) {
  std::vector<std::string> out;
  for (const auto& p : r.catalog().policies())
    if (p.stage == stage) out.push_back(p.name);
  return out;
}

struct RandomPrefill {
  at::Tensor q, k, v;
};
RandomPrefill random_prefill(const ModelConfig& c, int64_t n_tok, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  RandomPrefill r;
  r.q = at::randn({n_tok, c.n_head, c.head_dim}, gen, at::TensorOptions().dtype(at::kFloat));
  r.k = at::randn({c.n_head_kv, n_tok, c.head_dim}, gen, at::TensorOptions().dtype(at::kFloat));
  r.v = at::randn({c.n_head_kv, n_tok, c.head_dim}, gen, at::TensorOptions().dtype(at::kFloat));
  return r;
}

std::vector<int64_t> to_vec(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

TEST(PolicyConformance, RegistryHasTheBuiltins) {
  const PolicyRegistry r = builtin_registry();
  for (const char* n : {"snapkv", "pyramidkv", "streamingllm", "h2o", "tova", "knorm", "keydiff", "random"})
    EXPECT_EQ(r.catalog().at(n).stage, Stage::kScoring) << n;
  for (const char* n : {"uniform", "adakv"}) EXPECT_EQ(r.catalog().at(n).stage, Stage::kBudget) << n;
  EXPECT_EQ(r.catalog().at("pyramid").stage, Stage::kLayerBudget);
}

/// A valid head pattern (4 layers x 2 KV heads, one streaming head per layer) in a temp file.
std::string test_pattern_file() {
  HeadPattern p;
  p.layers.assign(4, {HeadPlan{}, HeadPlan{true, 2, 8}});
  const auto f =
      std::filesystem::temp_directory_path() / ("kvscope_conformance_" + std::to_string(::getpid()) + ".json");
  save_head_pattern(f, p);
  return f.string();
}

TEST(PolicyConformance, SpecsAreCompleteAndDefaultsResolve) {
  const PolicyRegistry r = builtin_registry();
  for (const auto& e : r.catalog().policies()) {
    const std::string& name = e.name;
    SCOPED_TRACE(name);
    EXPECT_FALSE(e.summary.empty());
    std::set<std::string> keys;
    for (const auto& p : e.params) {
      EXPECT_TRUE(keys.insert(p.key).second) << "duplicate key " << p.key;
      EXPECT_FALSE(p.help.empty()) << p.key;
      EXPECT_FALSE(p.paper_ref.empty()) << p.key;
      if (p.type != ParamType::kPath) EXPECT_FALSE(p.default_value.empty()) << p.key;
    }
    ParamValues required;  // file parameters have no default: the policy must refuse to run without one
    for (const auto& p : e.params)
      if (p.type == ParamType::kPath && p.default_value.empty()) {
        EXPECT_THROW(r.make(name, {}), InputError) << p.key;
        required[p.key] = test_pattern_file();
      }
    const auto policy = r.make(name, required);
    ASSERT_TRUE(policy);
    EXPECT_EQ(policy->name(), name);
    EXPECT_EQ(policy->stage(), e.stage);
    const ParamValues pv = policy->params();
    EXPECT_EQ(pv.size(), e.params.size());
    for (const auto& p : e.params)
      EXPECT_EQ(pv.at(p.key), required.count(p.key) ? required.at(p.key) : p.default_value) << p.key;
  }
  EXPECT_EQ(r.make("snapkv", {{"window", "64"}})->params().at("window"), "64");
}

// Every preset (each paper's main configuration) builds against the built-in policies.
TEST(PolicyConformance, EveryPresetBuildsAPipeline) {
  const PolicyRegistry r = builtin_registry();
  for (const Preset& p : pipeline_presets()) {
    SCOPED_TRACE(p.name);
    EXPECT_NO_THROW(Pipeline(r, p.name));
    EXPECT_FALSE(p.paper_ref.empty());
  }
}

TEST(PolicyConformance, EveryScoringWithEveryBudget) {
  const PolicyRegistry r = builtin_registry();
  const auto scorers = names_of(r, Stage::kScoring), budgets = names_of(r, Stage::kBudget);
  auto layer_budgets = names_of(r, Stage::kLayerBudget);
  ASSERT_FALSE(scorers.empty());
  ASSERT_FALSE(budgets.empty());
  ASSERT_FALSE(layer_budgets.empty());
  layer_budgets.insert(layer_budgets.begin(), "");  // none: every layer at n_kept
  const int64_t n_layer = 4, Hkv = 2;
  uint64_t seed = 1;
  for (const int64_t group : {1, 3}) {
    const ModelConfig cfg = test::small_config(n_layer, Hkv, group, 16);
    for (const int64_t n_tok : {1, 2, 5, 37, 100}) {
      // One random prefill per layer, as an engine observer would hand them over.
      std::vector<LayerPrefill> layers;
      for (int64_t l = 0; l < n_layer; ++l) {
        const RandomPrefill rp = random_prefill(cfg, n_tok, seed++);
        layers.push_back(LayerPrefill{cfg, l, rp.q, rp.k, rp.v});
      }
      for (const auto& sn : scorers) {
        const auto sp = r.make(sn, {});
        const auto& S = dynamic_cast<const ScoringPolicy&>(*sp);
        std::vector<at::Tensor> scores;
        for (const auto& lp : layers) {
          SCOPED_TRACE(sn + " G=" + std::to_string(group) + " n_tok=" + std::to_string(n_tok));
          at::Tensor s = S.score(lp);
          ASSERT_EQ(s.scalar_type(), at::kFloat);
          ASSERT_EQ(s.sizes(), (at::IntArrayRef{Hkv, n_tok}));
          EXPECT_FALSE(s.isnan().any().item<bool>());
          EXPECT_TRUE(at::equal(s, S.score(lp))) << "scores not deterministic";
          scores.push_back(s);
        }
        for (const auto& ln : layer_budgets)
          for (const auto& bn : budgets) {
            const auto lp = ln.empty() ? nullptr : r.make(ln, {});
            const auto* L = dynamic_cast<const LayerBudgetPolicy*>(lp.get());
            const auto bp = r.make(bn, {});
            const auto& B = dynamic_cast<const BudgetPolicy&>(*bp);
            for (const int64_t n_kept : {int64_t{0}, int64_t{1}, n_tok / 2, n_tok - 1, n_tok, n_tok + 3}) {
              SCOPED_TRACE(sn + " + " + ln + " + " + bn + " G=" + std::to_string(group) +
                           " n_tok=" + std::to_string(n_tok) + " n_kept=" + std::to_string(n_kept));
              int64_t model_total = 0;
              for (size_t l = 0; l < layers.size(); ++l) {
                const int64_t layer_kept = L ? L->layer_kept(scores[l], n_kept, layers[l]) : n_kept;
                if (L) {
                  ASSERT_GE(layer_kept, 0);
                  ASSERT_LE(layer_kept, n_tok);
                  EXPECT_EQ(layer_kept, L->layer_kept(scores[l], n_kept, layers[l])) << "not deterministic";
                }
                const auto kept = B.select(scores[l], layer_kept, layers[l]);
                ASSERT_EQ(int64_t(kept.size()), Hkv);
                const auto again = B.select(scores[l], layer_kept, layers[l]);
                int64_t layer_total = 0;
                for (int64_t h = 0; h < Hkv; ++h) {
                  ASSERT_EQ(kept[h].scalar_type(), at::kLong);
                  ASSERT_EQ(kept[h].dim(), 1);
                  const auto v = to_vec(kept[h]);
                  for (size_t i = 0; i < v.size(); ++i) {
                    ASSERT_GE(v[i], 0);
                    ASSERT_LT(v[i], n_tok);
                    if (i) ASSERT_LT(v[i - 1], v[i]) << "not sorted / not unique";
                  }
                  EXPECT_EQ(v, to_vec(again[h])) << "selection not deterministic";
                  if (layer_kept >= n_tok) {
                    std::vector<int64_t> all(n_tok);
                    std::iota(all.begin(), all.end(), 0);
                    EXPECT_EQ(v, all) << "budget >= n_tok must keep everything";
                  }
                  if (bn == "uniform") EXPECT_EQ(int64_t(v.size()), std::min(layer_kept, n_tok));
                  layer_total += int64_t(v.size());
                }
                // Within a layer the head budget holds the layer's average (a layer budget moves
                // memory between layers).
                EXPECT_LE(layer_total, Hkv * std::max<int64_t>(0, layer_kept)) << "layer " << l;
                if (bn == "adakv") EXPECT_EQ(layer_total, Hkv * std::min(layer_kept, n_tok));
                model_total += layer_total;
              }
              // Over the whole model every combination respects the mean n_kept per head
              // (pyramid up to its round-half-even of each layer's budget: +0.5 per layer).
              EXPECT_LE(double(model_total), double(n_layer * Hkv) * (double(std::min(n_kept, n_tok)) + 0.5));
            }
          }
      }
    }
  }
}

TEST(PolicyConformance, AlwaysKeptEntriesSurviveUniformSelection) {
  const PolicyRegistry r = builtin_registry();
  const ModelConfig cfg = test::small_config(2, 2, 3, 16);
  const RandomPrefill rp = random_prefill(cfg, 100, 7);
  const LayerPrefill lp{cfg, 0, rp.q, rp.k, rp.v};
  const auto uniform = r.make("uniform", {});
  const auto& U = dynamic_cast<const BudgetPolicy&>(*uniform);
  {  // snapkv: the observation window is always kept
    const auto s = r.make("snapkv", {{"window", "8"}});
    const auto kept = U.select(dynamic_cast<const ScoringPolicy&>(*s).score(lp), 20, lp);
    for (const auto& k : kept) {
      const auto v = to_vec(k);
      ASSERT_EQ(v.size(), 20u);
      EXPECT_EQ(std::vector<int64_t>(v.end() - 8, v.end()), (std::vector<int64_t>{92, 93, 94, 95, 96, 97, 98, 99}));
    }
  }
  {  // streamingllm: sinks + most recent
    const auto s = r.make("streamingllm", {{"sink", "4"}});
    const auto kept = U.select(dynamic_cast<const ScoringPolicy&>(*s).score(lp), 10, lp);
    for (const auto& k : kept) EXPECT_EQ(to_vec(k), (std::vector<int64_t>{0, 1, 2, 3, 94, 95, 96, 97, 98, 99}));
  }
  {  // tova: one set for all KV heads (layer-wide head mean), last token kept
    const auto s = r.make("tova", {});
    const auto kept = U.select(dynamic_cast<const ScoringPolicy&>(*s).score(lp), 30, lp);
    EXPECT_EQ(to_vec(kept[0]), to_vec(kept[1]));
    EXPECT_EQ(to_vec(kept[0]).back(), 99);
  }
  {  // h2o with recent window
    const auto s = r.make("h2o", {{"recent", "5"}});
    const auto kept = U.select(dynamic_cast<const ScoringPolicy&>(*s).score(lp), 12, lp);
    for (const auto& k : kept) {
      const auto v = to_vec(k);
      EXPECT_EQ(std::vector<int64_t>(v.end() - 5, v.end()), (std::vector<int64_t>{95, 96, 97, 98, 99}));
    }
  }
}

TEST(PolicyConformance, QueryScorersAcceptOnlyTheLastQueries) {
  // Block-wise prefill hands over only the block's queries (the last T of n_tok); window scorers
  // must give the same scores as with all queries when the window fits in the block.
  const PolicyRegistry r = builtin_registry();
  const ModelConfig cfg = test::small_config(1, 2, 3, 16);
  const RandomPrefill rp = random_prefill(cfg, 90, 5);
  const LayerPrefill full{cfg, 0, rp.q, rp.k, rp.v};
  const LayerPrefill tail{cfg, 0, rp.q.narrow(0, 50, 40), rp.k, rp.v};
  for (const auto& [name, params] : std::vector<std::pair<std::string, ParamValues>>{
           {"snapkv", {{"window", "16"}}}, {"pyramidkv", {{"window", "40"}}}, {"tova", {}}}) {
    const auto p = r.make(name, params);
    const auto& S = dynamic_cast<const ScoringPolicy&>(*p);
    EXPECT_TRUE(at::allclose(S.score(full), S.score(tail))) << name;
  }
  // h2o accumulates only what it is given: the tail's attention equals the full sum minus the head's.
  const auto h2o = r.make("h2o", {{"gqa", "sum"}});
  const at::Tensor all = dynamic_cast<const ScoringPolicy&>(*h2o).score(full);
  const at::Tensor last = dynamic_cast<const ScoringPolicy&>(*h2o).score(tail);
  const at::Tensor first = policies::causal_attention_probs(rp.q.narrow(0, 0, 50), rp.k.narrow(1, 0, 50), 0);
  at::Tensor expect = all.clone();
  expect.narrow(1, 0, 50).sub_(first.sum(2).sum(1));
  EXPECT_TRUE(at::allclose(last, expect, 1e-4, 1e-5));
}

TEST(PolicyConformance, H2OBlockedEqualsDenseAccumulation) {
  // The blocked accumulation (query blocks of 16M / (n_head * n_tok) rows: 2 blocks here) must equal
  // the plain n x n computation.
  const PolicyRegistry r = builtin_registry();
  const ModelConfig cfg = test::small_config(1, 2, 3, 16);
  const int64_t n = 2000;
  const RandomPrefill rp = random_prefill(cfg, n, 11);
  const LayerPrefill lp{cfg, 0, rp.q, rp.k, rp.v};
  const auto h2o = r.make("h2o", {{"gqa", "sum"}});
  const at::Tensor ours = dynamic_cast<const ScoringPolicy&>(*h2o).score(lp);
  const at::Tensor dense = policies::causal_attention_probs(rp.q, rp.k, 0).sum(2).sum(1);  // [Hkv, n]
  EXPECT_TRUE(at::allclose(ours, dense, 1e-5, 1e-6));
}

TEST(PolicyConformance, AdaKVGuaranteesTheSafeguardPerHead) {
  const PolicyRegistry r = builtin_registry();
  const ModelConfig cfg = test::small_config(1, 2, 1, 16);
  const int64_t n = 100;
  const RandomPrefill rp = random_prefill(cfg, n, 3);
  const LayerPrefill lp{cfg, 0, rp.q, rp.k, rp.v};
  // Head 1's scores are all below head 0's: a pure global top-k would give it nothing.
  at::Tensor s = at::stack({at::linspace(10, 20, n), at::linspace(0, 1, n)}).to(at::kFloat);
  const auto ada = r.make("adakv", {{"alpha", "0.2"}}), ada0 = r.make("adakv", {{"alpha", "0"}});
  const auto kept = dynamic_cast<const BudgetPolicy&>(*ada).select(s, 40, lp);
  EXPECT_EQ(kept[1].numel(), 8);  // int(40 * 0.2): its own top 8
  EXPECT_EQ(to_vec(kept[1]), (std::vector<int64_t>{92, 93, 94, 95, 96, 97, 98, 99}));
  EXPECT_EQ(kept[0].numel(), 72);
  const auto none = dynamic_cast<const BudgetPolicy&>(*ada0).select(s, 40, lp);
  EXPECT_EQ(none[1].numel(), 0);
  EXPECT_EQ(none[0].numel(), 80);
}

TEST(PolicyConformance, PyramidBudgetMatchesKvpressFormula) {
  // kvpress PyramidKVPress on pycode-16m (8 layers), argparse_head (2589 tokens), window 64, beta 20.
  using policies::pyramid_layer_budget;
  // ratio 0.5: n_kept 1294 -> min 64.7, max 2523.3, step (max-min)/7.
  EXPECT_EQ(pyramid_layer_budget(2589, 1294, 64, 20, 0, 8), 2523);
  EXPECT_EQ(pyramid_layer_budget(2589, 1294, 64, 20, 7, 8), 65);
  int64_t total = 0;
  for (int l = 0; l < 8; ++l) total += pyramid_layer_budget(2589, 1294, 64, 20, l, 8);
  EXPECT_NEAR(double(total) / 8, 1294, 0.5);
  // ratio 0.75: n_kept 647 -> min 32.35 < window 64 -> falls back to the uniform budget.
  for (int l = 0; l < 8; ++l) EXPECT_EQ(pyramid_layer_budget(2589, 647, 64, 20, l, 8), 647);
  // max_num clamped to n - W: n 100, n_kept 80, W 8 -> max 92, min 68.
  EXPECT_EQ(pyramid_layer_budget(100, 80, 8, 20, 0, 4), 92);
  EXPECT_EQ(pyramid_layer_budget(100, 80, 8, 20, 3, 4), 68);
}

TEST(PolicyConformance, ResolveParamsErrors) {
  const PolicyRegistry r = builtin_registry();
  auto message = [&](const std::string& policy, const ParamValues& v) -> std::string {
    try {
      r.make(policy, v);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  std::string m = message("snapkv", {{"windw", "64"}});
  EXPECT_NE(m.find("windw"), std::string::npos) << m;
  EXPECT_NE(m.find("window, kernel, pool, gqa"), std::string::npos) << "lists the valid keys: " << m;
  m = message("snapkv", {{"window", "0"}});
  EXPECT_NE(m.find("'window'"), std::string::npos) << m;
  EXPECT_NE(m.find("outside"), std::string::npos) << m;
  m = message("snapkv", {{"kernel", "4"}});
  EXPECT_NE(m.find("odd"), std::string::npos) << m;
  m = message("snapkv", {{"pool", "median"}});
  EXPECT_NE(m.find("avg|max"), std::string::npos) << m;
  m = message("snapkv", {{"window", "abc"}});
  EXPECT_NE(m.find("not a number"), std::string::npos) << m;
  m = message("adakv", {{"alpha", "1.5"}});
  EXPECT_NE(m.find("'alpha'"), std::string::npos) << m;
  m = message("streamingllm", {{"sink", "2.5"}});
  EXPECT_NE(m.find("integer"), std::string::npos) << m;
  m = message("knorm", {{"x", "1"}});
  EXPECT_NE(m.find("(none)"), std::string::npos) << m;
  m = message("snapkvv", {});
  EXPECT_NE(m.find("unknown policy"), std::string::npos) << m;
  EXPECT_NE(m.find("snapkv"), std::string::npos) << m;
}

}  // namespace
}  // namespace kvscope
