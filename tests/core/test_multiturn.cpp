// Multi-turn generation on one cache, and RocketKV-MT (keep everything, reselect every turn).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "../temp_dir.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/timeline.h"
#include "pycode_fixture.h"
#include "test_support.h"

namespace kvscope {
namespace {

class MultiTurn : public test::PycodeSuite {
 protected:
  static GenerateRequest two_turns() {
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.follow_up_turns = {model_->tokenizer->encode("\n\ndef shorten(text, width):\n")};
    r.max_new_tokens = 6;
    return r;
  }
};

TEST_F(MultiTurn, SecondTurnContinuesTheSameCache) {
  const Engine engine(*model_);
  GenerateRequest req = two_turns();
  const auto res = generate(engine, req);
  ASSERT_EQ(res.turn_output_ids.size(), 2u);
  // Equivalent single prompt: turn 1 + its outputs + turn 2, then greedy.
  GenerateRequest flat;
  flat.prompt_ids = req.prompt_ids;
  flat.prompt_ids.insert(flat.prompt_ids.end(), res.turn_output_ids[0].begin(), res.turn_output_ids[0].end());
  flat.prompt_ids.insert(flat.prompt_ids.end(), req.follow_up_turns[0].begin(), req.follow_up_turns[0].end());
  flat.max_new_tokens = 6;
  EXPECT_EQ(generate(engine, flat).output_ids, res.turn_output_ids[1]);
}

TEST_F(MultiTurn, RocketKvMtKeepsEverythingAndWithAFullBudgetIsExact) {
  const Engine engine(*model_);
  const Pipeline mt(*registry_, "rocketkv-mt");
  GenerateRequest req = two_turns();
  req.pipeline = &mt;
  req.reference_full = true;
  req.budget = {BudgetSpec::Unit::kFetched, 100000};  // t >= history: HSA attends to everything
  const auto exact = generate(engine, req);
  for (double kl : exact.fidelity.kl) EXPECT_NEAR(kl, 0.0, 1e-6);
  req.budget = {BudgetSpec::Unit::kFetched, 64};
  const auto sparse = generate(engine, req);
  EXPECT_EQ(sparse.kept[0][0].size(), req.prompt_ids.size()) << "stage 1 deletes nothing";
  ASSERT_EQ(sparse.fidelity.kl.size(), 12u);
  double mean = 0;
  for (double kl : sparse.fidelity.kl) mean += kl / 12;
  EXPECT_GT(mean, 1e-4);
  EXPECT_LT(mean, 2.0);
  ASSERT_FALSE(sparse.bytes_read.empty());
  for (int64_t b : sparse.bytes_read) {
    EXPECT_GT(b, 0) << "the policy's own count of what it read";
    EXPECT_LT(b, sparse.cache_bytes_live / 2) << "reads a fraction of the cache";
  }
}

TEST_F(MultiTurn, EachHeadScoresAloneAsInTheLayer) {
  // Pipeline::compress_ragged ranks every KV head on its own entries with its group's queries: that
  // is the layer's ranking only if a scorer's score of one head does not depend on the others.
  const ModelConfig& c = model_->config;
  const int64_t H = c.n_head, Hkv = c.n_head_kv, G = H / Hkv, D = c.head_dim;
  at::manual_seed(3);
  const at::Tensor q = at::randn({40, H, D}), k = at::randn({Hkv, 70, D}), v = at::randn({Hkv, 70, D});
  for (const char* spec : {"snapkv", "tova:gqa=mean", "tova", "keydiff", "knorm", "streamingllm", "h2o", "pyramidkv"}) {
    const Pipeline p(*registry_, spec);
    const auto* scorer = dynamic_cast<const ScoringPolicy*>(p.stages().front().get());
    ASSERT_NE(scorer, nullptr) << spec;
    if (!scorer->per_head()) continue;  // TOVA's default: the layer's mean (refused, below)
    const at::Tensor layer = scorer->score(LayerPrefill{c, 2, q, k, v});
    for (int64_t h = 0; h < Hkv; ++h) {
      const at::Tensor one =
          scorer->score(LayerPrefill{c, 2, q.narrow(1, h * G, G), k.narrow(0, h, 1), v.narrow(0, h, 1)});
      EXPECT_TRUE(at::allclose(one[0], layer[h], 1e-5, 1e-6)) << spec << " head " << h;
    }
  }
}

TEST_F(MultiTurn, RaggedCachesAreReselectedOnLaterTurns) {
  // Ada-KV leaves head-wise lengths; the second turn's prefill re-ranks every head's entries and
  // Ada-KV allocates the layer's budget again over them: right after that prefill the layer holds
  // n_head_kv x the second turn's per-head budget, spread unevenly over its heads.
  const Engine engine(*model_);
  const Pipeline ada(*registry_, "snapkv+adakv");
  GenerateRequest req = two_turns();
  req.pipeline = &ada;
  req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.5};
  req.capture = CaptureLevel::kSummary;
  const GenerateResult res = generate(engine, req);
  ASSERT_EQ(res.turn_output_ids.size(), 2u);
  ASSERT_FALSE(res.timeline.empty());
  const Timeline& t = res.timeline;
  // Turn 1: the prompt, then 5 decode steps feed 5 tokens; turn 2's block is the 6th token + the turn.
  const auto P = static_cast<int64_t>(req.prompt_ids.size());
  const int64_t turn2 = t.entered_at[static_cast<size_t>(P + 5)];
  const int64_t history = P + 6 + static_cast<int64_t>(req.follow_up_turns[0].size());
  const int64_t per_head = req.budget.kept_per_head(history);
  bool ragged = false;
  int64_t reselected = 0;
  for (int64_t l = 0; l < t.n_layer; ++l) {
    int64_t total = 0;
    std::vector<int64_t> live(static_cast<size_t>(t.n_head_kv), 0);
    for (int64_t h = 0; h < t.n_head_kv; ++h)
      for (int64_t pos = 0; pos < history; ++pos) {
        const int32_t out = t.evicted_at[static_cast<size_t>((l * t.n_head_kv + h) * t.n_positions + pos)];
        reselected += t.evicted_by[static_cast<size_t>((l * t.n_head_kv + h) * t.n_positions + pos)] ==
                      static_cast<uint8_t>(EvictionCause::kTurn);
        if (t.entered_at[static_cast<size_t>(pos)] <= turn2 && (out < 0 || out > turn2)) ++live[static_cast<size_t>(h)];
      }
    for (int64_t n : live) total += n;
    EXPECT_EQ(total, t.n_head_kv * per_head) << "layer " << l;
    ragged = ragged || live.front() != live.back();
  }
  EXPECT_GT(reselected, 0) << "the second turn evicted nothing";
  EXPECT_TRUE(ragged) << "Ada-KV's second allocation left every head the same length";
}

TEST_F(MultiTurn, ALayerWideScoreRefusesARaggedLayer) {
  // A layer whose KV heads hold 30 and 20 entries, and a later turn's 8-token block on top.
  const ModelConfig& c = model_->config;
  KvCache cache(c, 64, at::kCPU, at::kFloat);
  at::manual_seed(5);
  const int64_t Hkv = c.n_head_kv, D = c.head_dim;
  cache.append(1, at::randn({Hkv, 30, D}), at::randn({Hkv, 30, D}), at::arange(30, at::kLong));
  std::vector<at::Tensor> kept(static_cast<size_t>(Hkv), at::arange(30, at::kLong));
  kept.back() = at::arange(10, 30, at::kLong);
  cache.retain(1, kept, 8);
  cache.append(1, at::randn({Hkv, 8, D}), at::randn({Hkv, 8, D}), at::arange(30, 38, at::kLong));
  ASSERT_FALSE(cache.layer(1).uniform());
  const at::Tensor q = at::randn({8, c.n_head, D});
  const Pipeline tova(*registry_, "tova+adakv");
  (void)tova.begin_run(RunBudget{{BudgetSpec::Unit::kStored, 16}, 38, 4}, c);
  try {
    tova.compress_layer(LayerEvent{c, 1, q, cache}, 16, 4);
    FAIL() << "tova (gqa=all) ranked heads of different lengths";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("per-head score"), std::string::npos) << e.what();
  }
  // Per group, the heads are re-ranked: Ada-KV keeps n_head_kv x 16 of the 38 + 28 entries.
  const Pipeline mean(*registry_, "tova:gqa=mean+adakv");
  (void)mean.begin_run(RunBudget{{BudgetSpec::Unit::kStored, 16}, 38, 4}, c);
  mean.compress_layer(LayerEvent{c, 1, q, cache}, 16, 4);
  int64_t total = 0;
  for (int64_t n : cache.layer(1).length) total += n;
  EXPECT_EQ(total, Hkv * 16);
}

TEST_F(MultiTurn, StreamingHeadsRefuseALaterTurn) {
  test::TempDir dir("multiturn");
  const std::filesystem::path f = dir.path() / "pattern.json";
  save_head_pattern(f, test::mixed_ring_pattern());
  const Pipeline heads(*registry_, "heads:pattern=" + f.string());
  GenerateRequest req = two_turns();
  req.pipeline = &heads;
  req.budget = {BudgetSpec::Unit::kStored, 64};
  try {
    generate(Engine(*model_), req);
    FAIL() << "a later turn after streaming heads ran";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ring buffer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvscope
