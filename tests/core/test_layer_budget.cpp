// S2 across layers, then across heads: PyramidKV's layer budgets composed with a head budget, run
// through the engine's prefill as generate() runs a pipeline, on pycode-16m (fp32, CPU) and the
// argparse golden prompt (2,589 tokens: at ratio 0.5 the pyramid does not fall back to uniform).
// Reference per layer: kvpress PyramidKVPress.get_layer_budget (pyramid_layer_budget, held to hand
// values in PolicyConformance.PyramidBudgetMatchesKvpressFormula); within the layer: the head
// budget's own selection on the scores the pipeline ranked (adakv is held to kvpress in
// KvpressGolden.AdaKVOverSnapKV). kvpress PyramidKVPress's greedy tokens: CliRun.PyramidKv*.
#include <gtest/gtest.h>

#include <set>

#include <ATen/ATen.h>

#include "../../core/src/policies/scoring.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "pycode_fixture.h"
#include "test_support.h"

namespace kvscope {
namespace {

std::vector<int64_t> to_vec(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

class LayerBudget : public test::PycodeSuite {
 protected:
  /// Prefills the argparse golden under `spec` keeping n_kept per head on average; checks every
  /// layer against `expected_layer_kept(l)` and `head_budget`'s selection at that budget.
  static void check(const std::string& spec, const std::string& head_budget, int64_t n_kept) {
    const auto g = test::read_json(test::pycode_dir() / "golden/argparse_head.json");
    const auto ids = g["input_ids"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(ids.size());
    const Pipeline pipeline(*registry_, spec);
    const auto selector =
        registry_->make(head_budget, head_budget == "adakv" ? ParamValues{{"alpha", "0.2"}} : ParamValues{});
    const auto& B = dynamic_cast<const BudgetPolicy&>(*selector);
    const Engine engine(*model_);
    KvCache cache = engine.new_cache(n);
    const ModelConfig& cfg = model_->config;
    std::set<int64_t> layer_totals;
    engine.prefill(cache, ids, /*chunk=*/0, /*all_logits=*/false, [&](const LayerEvent& e) {
      const LayerPrefill in{cfg, e.layer, e.q, e.cache.keys(e.layer).clone(), e.cache.values(e.layer).clone()};
      const at::Tensor scores = pipeline.compress_layer(e, n_kept, 0);
      ASSERT_TRUE(scores.defined());
      const int64_t budget = policies::pyramid_layer_budget(n, n_kept, 64, 20, e.layer, cfg.n_layer);
      const auto ref = B.select(scores, budget, in);
      int64_t total = 0;
      for (int64_t h = 0; h < cfg.n_head_kv; ++h) {
        EXPECT_EQ(to_vec(e.cache.head_positions(e.layer, h)), to_vec(ref[h])) << "layer " << e.layer << " head " << h;
        total += e.cache.layer(e.layer).length[h];
      }
      EXPECT_EQ(total, cfg.n_head_kv * budget) << "layer " << e.layer;
      layer_totals.insert(total);
    });
    EXPECT_EQ(layer_totals.size(), static_cast<size_t>(cfg.n_layer)) << "the pyramid fell back to one budget";
  }
};

TEST_F(LayerBudget, PyramidKvAloneRunsThePyramidWithUniformHeads) {
  const Pipeline p(*registry_, "pyramidkv");
  EXPECT_EQ(p.canonical().find("pyramidkv:"), 0u) << p.canonical();
  EXPECT_NE(p.canonical().find("+pyramid:"), std::string::npos) << p.canonical();
  EXPECT_NE(p.canonical().find("+uniform"), std::string::npos) << p.canonical();
  check("pyramidkv", "uniform", 1294);
}

TEST_F(LayerBudget, AdaPyramidKvAllocatesEachLayersPyramidBudgetAcrossItsHeads) {
  check("pyramidkv+adakv:alpha=0.2", "adakv", 1294);
}

TEST_F(LayerBudget, AnyScorerTakesThePyramid) {
  const Pipeline p(*registry_, "snapkv:window=64,kernel=5,pool=avg+pyramid+adakv");
  EXPECT_NE(p.canonical().find("+pyramid:"), std::string::npos);
  check("snapkv:window=64,kernel=5,pool=avg+pyramid+adakv:alpha=0.2", "adakv", 1294);
}

TEST_F(LayerBudget, RefusesALayerBudgetWithoutAScorerAndTwoOfThem) {
  EXPECT_THROW(Pipeline(*registry_, "pyramid+quest"), InputError);
  EXPECT_THROW(Pipeline(*registry_, "snapkv+pyramid+pyramid"), InputError);
  EXPECT_THROW(Pipeline(*registry_, "snapkv+adakv+pyramid"), InputError);  // stage order
}

}  // namespace
}  // namespace kvscope
