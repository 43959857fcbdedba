// Channel pruning stacked under decode-time selection (core/src/stacked_decode.h, docs/methods.md
// §4.10): SPARK/ThinK prune the keys, Quest/HSA score and attend over the recovered keys. Checked
// against the two ends of the composition: no channel pruned is the selection alone, a selection of
// every entry is the channel stage alone; bytes per step as the two compose.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <numeric>

#include "kvscope/core/compact_keys.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy_catalog.h"
#include "page_summary_reference.h"
#include "pycode_fixture.h"
#include "small_config.h"

namespace kvscope {
namespace {

class StackedDecodeTest : public test::PycodeSuite {
 protected:
  GenerateResult run(const std::string& spec, BudgetSpec budget, int64_t n_new = 8) const {
    const Pipeline p(*registry_, spec);
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.prompt_ids.resize(320);  // long enough for 20 pages of 16 and a selection of 48 to choose
    r.max_new_tokens = n_new;
    r.pipeline = &p;
    r.budget = budget;
    r.reference_full = true;
    return generate(Engine(*model_), r);
  }
  static double mean(const std::vector<int64_t>& v) {
    return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
};

void expect_same_steps(const GenerateResult& a, const GenerateResult& b, const std::string& what) {
  EXPECT_EQ(a.output_ids, b.output_ids) << what;
  ASSERT_EQ(a.fidelity.kl.size(), b.fidelity.kl.size()) << what;
  for (size_t i = 0; i < a.fidelity.kl.size(); ++i)
    EXPECT_NEAR(a.fidelity.kl[i], b.fidelity.kl[i], 1e-5) << what << " step " << i;
}

TEST_F(StackedDecodeTest, NoChannelPrunedIsTheSelectionAlone) {
  const BudgetSpec t{BudgetSpec::Unit::kFetched, 48};
  for (const char* sel : {"quest", "hsa"}) {
    const GenerateResult alone = run(sel, t);
    const GenerateResult stacked = run(std::string("spark:ratio=0+") + sel, t);
    expect_same_steps(stacked, alone, sel);
    EXPECT_GT(mean(alone.bytes_read), 0) << sel;
  }
}

TEST_F(StackedDecodeTest, ASelectionOfEveryEntryIsTheChannelStageAlone) {
  const BudgetSpec all{BudgetSpec::Unit::kFetched, 100000};
  for (const char* channel : {"spark:ratio=0.8,value_ratio=0.5", "think"}) {
    const GenerateResult alone = run(channel, all);
    const GenerateResult stacked = run(std::string(channel) + "+quest", all);
    expect_same_steps(stacked, alone, channel);
    EXPECT_EQ(stacked.cache_bytes_allocated, alone.cache_bytes_allocated) << channel;
  }
}

TEST_F(StackedDecodeTest, BytesPerStepAreTheSelectedRowsAsStored) {
  // At the same t, the pruned keys make every gathered row cheaper: SPARK at 0.5 over Quest reads
  // less than Quest alone, and the cache holds fewer bytes; with RocketKV (preset, stage 1 SnapKV)
  // the channel stage goes before HSA wherever it is written.
  const BudgetSpec t{BudgetSpec::Unit::kFetched, 48};
  const GenerateResult quest = run("quest", t), stacked = run("spark+quest", t);
  ASSERT_FALSE(stacked.bytes_read.empty());
  EXPECT_LT(mean(stacked.bytes_read), mean(quest.bytes_read));
  EXPECT_GT(mean(stacked.bytes_read), 0.5 * mean(quest.bytes_read)) << "values and side stores are not pruned";
  EXPECT_LT(stacked.cache_bytes_allocated, quest.cache_bytes_allocated);
  const Pipeline written_after(*registry_, "rocketkv+spark");
  const Pipeline in_order(*registry_, "snapkv:window=32,kernel=63,pool=max,gqa=sum+spark+hsa");
  EXPECT_EQ(written_after.canonical(), Pipeline(*registry_, in_order.canonical()).canonical());
  const GenerateResult rocket = run("rocketkv", t), rocket_spark = run("rocketkv+spark", t);
  EXPECT_LT(mean(rocket_spark.bytes_read), mean(rocket.bytes_read));
}

TEST_F(StackedDecodeTest, CombinationsThatCannotBeDefinedAreRefused) {
  auto refused = [&](const std::string& spec, const std::string& why) {
    try {
      Pipeline p(*registry_, spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << spec << ": " << e.what();
    }
  };
  refused("spark:sign=positive+quest", "sign=positive recovers the pruned channels as a logit term");
  refused("spark+think+quest", "more than one channel-pruning stage");
  refused("quest+hsa", "more than one decode-time selection stage");
  refused("tova+spark+decoding", "eviction while decoding with a decode-time attention stage");
  EXPECT_NO_THROW(Pipeline(*registry_, "snapkv+think+sparq"));
  EXPECT_NO_THROW(Pipeline(*registry_, "spark+rocketkv-mt"));
}

TEST(StackedDecodePages, SummariesOfCompactKeysFollowTheCacheWithoutRecoveringIt) {
  // After the channel stage, a decode step's page upkeep reads only the dense rows appended since:
  // the compact entries of the page where they begin come from PageMinMax::compact_edge. Every
  // step, each page served must equal the min/max of the head's current (recovered) rows, for a
  // compact count inside a page (head 0) and at a page boundary (head 1).
  const int64_t D = 16, page = 4;
  const ModelConfig cfg = test::small_config(1, 2, 2, D);
  for (const char* name : {"quest", "hsa"}) {
    SCOPED_TRACE(name);
    KvCache cache(cfg, 8, c10::Device(c10::kCPU), at::kFloat);
    at::manual_seed(5);
    cache.append(0, at::randn({2, 22, D}) * 2.0, at::randn({2, 22, D}), at::arange(22, at::kLong));
    cache.advance_position(22);
    cache.retain(0, {at::arange(18, at::kLong), at::arange(20, at::kLong)}, std::vector<int64_t>{40, 40});
    std::vector<CompactKeys> packed;
    for (int64_t h = 0; h < 2; ++h) {
      const at::Tensor k = cache.head_keys(0, h);
      packed.push_back(CompactKeys::pack(k, at::rand({k.size(0), D}).lt(0.5), at::rand({k.size(0)}), at::rand({D})));
    }
    cache.compact_keys(0, std::move(packed));
    auto policy =
        std::string(name) == "quest"
            ? test::make_paged("quest", {{"page", std::to_string(page)}, {"k", "8"}})
            : test::make_paged("hsa", {{"stage1", "false"}, {"page", std::to_string(page)}, {"k1", "6"}, {"k2", "6"}});
    policy->configure(RunBudget{BudgetSpec{BudgetSpec::Unit::kFetched, 16}, 20, 30}, cfg);
    policy->on_prefill(0, LayerPrefill{cfg, 0, at::Tensor(), at::Tensor(), at::Tensor()}, cache);
    ASSERT_NE(policy->page_summaries().compact_edge(0), nullptr);
    for (int64_t step = 1; step <= 30; ++step) {
      const int64_t p = cache.next_position();
      cache.append(0, at::randn({2, 1, D}) * 3.0, at::randn({2, 1, D}), at::full({1}, p, at::kLong));
      cache.advance_position(1);
      policy->attend(0, at::randn({4, D}), cache);
      for (int64_t h = 0; h < 2; ++h)
        EXPECT_EQ(test::stale_pages(policy->page_summaries(), cache, 0, h), 0) << "step " << step << " head " << h;
    }
    EXPECT_EQ(cache.layer(0).compact_entries(0), 18);
  }
}

}  // namespace
}  // namespace kvscope
