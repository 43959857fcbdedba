// Retention modes beyond one-shot eviction: streaming heads as ring buffers (head patterns),
// KeyDiff's block-wise prefill under a hard cap, and true positions surviving both.
#include <gtest/gtest.h>

#include <filesystem>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/pipeline.h"
#include "pycode_fixture.h"
#include "small_config.h"
#include "test_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

TEST(RingBuffer, KeepsSinksAndTheMostRecentWindow) {
  KvCache cache(test::small_config(1, 2, 1, 4), 16, c10::kCPU, at::kFloat);
  auto add = [&](int64_t p) {
    at::Tensor k = at::full({2, 1, 4}, double(p)), pos = at::full({1}, p, at::kLong);
    cache.append(0, k, k, pos);
  };
  for (int64_t p = 0; p < 10; ++p) add(p);
  // Head 0 streams with 2 sinks + 3 recent entries; head 1 stays dense.
  std::vector<at::Tensor> kept = {at::tensor({0, 1, 7, 8, 9}, at::kLong), at::arange(10, at::kLong)};
  cache.retain(0, kept, std::vector<int64_t>{0, 8});
  cache.set_window(0, 0, 2, 3);
  for (int64_t p = 10; p < 14; ++p) add(p);
  at::Tensor pos0 = std::get<0>(cache.head_positions(0, 0).sort());
  EXPECT_TRUE(at::equal(pos0, at::tensor({0, 1, 11, 12, 13}, at::kLong))) << pos0;
  EXPECT_EQ(cache.layer(0).capacity[0], 5) << "a ring never grows";
  EXPECT_EQ(cache.head_keys(0, 0).size(0), 5);
  // Keys travel with their positions.
  EXPECT_TRUE(at::equal(cache.head_keys(0, 0).select(1, 0).to(at::kLong), cache.head_positions(0, 0)));
  EXPECT_EQ(cache.layer(0).length[1], 14);
  EXPECT_THROW(cache.set_window(0, 1, 2, 3), std::invalid_argument);
}

TEST(Retain, RepacksRaggedHeadsWithTheirPositionsAndRejectsOutOfRangeRows) {
  KvCache cache(test::small_config(1, 3, 1, 2), 10, c10::kCPU, at::kFloat);
  // Head h, entry p: key 100 h + p (both channels), value its negation, position 10 + p.
  const at::Tensor k =
      (at::arange(3).view({3, 1, 1}) * 100 + at::arange(6).view({1, 6, 1})).expand({3, 6, 2}).to(at::kFloat);
  cache.append(0, k, -k, at::arange(10, 16, at::kLong));
  const std::vector<at::Tensor> kept = {at::tensor({0, 2, 5}, at::kLong), at::empty({0}, at::kLong),
                                        at::arange(6, at::kLong)};

  // Out of range (head 1: 6 >= 6 live entries; head 2: negative): refused, the layer untouched.
  EXPECT_THROW(cache.retain(0, {kept[0], at::tensor({6}, at::kLong), kept[2]}, 1), std::invalid_argument);
  EXPECT_THROW(cache.retain(0, {kept[0], kept[1], at::tensor({-1, 3}, at::kLong)}, 1), std::invalid_argument);
  try {
    cache.retain(0, {kept[0], at::tensor({6}, at::kLong), kept[2]}, 1);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 head 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.layer(0).length, (std::vector<int64_t>{6, 6, 6}));
  EXPECT_TRUE(at::equal(cache.head_keys(0, 1), k[1]));

  cache.retain(0, kept, std::vector<int64_t>{1, 2, 0});
  const LayerKv& L = cache.layer(0);
  EXPECT_EQ(L.length, (std::vector<int64_t>{3, 0, 6}));
  EXPECT_EQ(L.capacity, (std::vector<int64_t>{4, 2, 6}));
  EXPECT_EQ(L.offset, (std::vector<int64_t>{0, 4, 6}));
  EXPECT_EQ(L.k.size(0), 12) << "the layer holds exactly the kept rows and the reserves";
  EXPECT_TRUE(at::equal(cache.head_keys(0, 0), k[0].index_select(0, kept[0])));
  EXPECT_TRUE(at::equal(cache.head_values(0, 0), -k[0].index_select(0, kept[0])));
  EXPECT_TRUE(at::equal(cache.head_positions(0, 0), at::tensor({10, 12, 15}, at::kLong)));
  EXPECT_EQ(cache.head_keys(0, 1).size(0), 0);
  EXPECT_TRUE(at::equal(cache.head_keys(0, 2), k[2]));
  EXPECT_TRUE(at::equal(cache.head_values(0, 2), -k[2]));
  EXPECT_TRUE(at::equal(cache.head_positions(0, 2), at::arange(10, 16, at::kLong)));
  EXPECT_THROW(cache.retain(0, {kept[0], kept[1]}, 0), std::invalid_argument) << "one index set per KV head";
}

class RetentionOnPycode : public test::PycodeSuite {
 protected:
  static GenerateRequest request(const Pipeline& p, BudgetSpec b, int64_t n_new) {
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.max_new_tokens = n_new;
    r.pipeline = &p;
    r.budget = b;
    return r;
  }
  fs::path write_pattern(const HeadPattern& p) {
    const fs::path f = fs::temp_directory_path() / ("kvscope_pattern_" + std::to_string(::getpid()) + ".json");
    save_head_pattern(f, p);
    return f;
  }
};

TEST_F(RetentionOnPycode, AllStreamingHeadsKeepWhatStreamingLlmKeeps) {
  HeadPattern pattern;
  pattern.layers.assign(8, std::vector<HeadPlan>(2, HeadPlan{true, 4, 60}));
  const fs::path f = write_pattern(pattern);
  const Engine engine(*model_);
  const Pipeline heads(*registry_, "heads:pattern=" + f.string());
  const Pipeline slm(*registry_, "streamingllm:sink=4");
  const auto a = generate(engine, request(heads, {BudgetSpec::Unit::kStored, 64}, 1));
  const auto b = generate(engine, request(slm, {BudgetSpec::Unit::kStored, 64}, 1));
  EXPECT_EQ(a.kept, b.kept);
  EXPECT_EQ(a.output_ids, b.output_ids);
  // Decoding further keeps streaming heads at sink + window entries (a ring, not a growing cache).
  const auto c = generate(engine, request(heads, {BudgetSpec::Unit::kStored, 64}, 24));
  EXPECT_EQ(c.cache_bytes_allocated, a.cache_bytes_allocated);
  fs::remove(f);
}

TEST_F(RetentionOnPycode, DensePatternIsTheFullCache) {
  HeadPattern pattern;
  pattern.layers.assign(8, std::vector<HeadPlan>(2, HeadPlan{}));
  pattern.layers[3][1] = HeadPlan{true, 4, 1000};  // longer than the prompt: keeps everything too
  const fs::path f = write_pattern(pattern);
  const Engine engine(*model_);
  const Pipeline heads(*registry_, "heads:pattern=" + f.string());
  auto req = request(heads, {BudgetSpec::Unit::kStored, 1}, 12);
  req.reference_full = true;
  const auto r = generate(engine, req);
  for (double kl : r.fidelity.kl) EXPECT_NEAR(kl, 0.0, 1e-9);
  fs::remove(f);
}

TEST_F(RetentionOnPycode, BadPatternFilesNameTheFile) {
  const fs::path f = fs::temp_directory_path() / ("kvscope_badpattern_" + std::to_string(::getpid()) + ".json");
  std::ofstream(f)
      << R"({"format": "kvscope.head_pattern.v1", "layers": [{"heads": [{"streaming": true, "window": 0}]}]})";
  try {
    load_head_pattern(f);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(f.string() + ": layer 0 head 0"), std::string::npos) << e.what();
  }
  HeadPattern small;
  small.layers.assign(3, std::vector<HeadPlan>(2));
  save_head_pattern(f, small);
  EXPECT_THROW(load_head_pattern(f, model_->config), InputError);
  fs::remove(f);
}

TEST_F(RetentionOnPycode, KeyDiffBlockWisePrefillRespectsTheCap) {
  const Engine engine(*model_);
  const Pipeline blockwise(*registry_, "keydiff:block=64");
  const Pipeline oneshot(*registry_, "keydiff");
  EXPECT_EQ(blockwise.prefill_block(), 64);
  const auto a = generate(engine, request(blockwise, {BudgetSpec::Unit::kStored, 128}, 4));
  const auto b = generate(engine, request(oneshot, {BudgetSpec::Unit::kStored, 128}, 4));
  for (const auto& layer : a.kept)
    for (const auto& head : layer) {
      EXPECT_EQ(head.size(), 128u);
      EXPECT_TRUE(std::is_sorted(head.begin(), head.end()));
      EXPECT_GT(head.back(), 400) << "late blocks compete for the cache";
    }
  EXPECT_NE(a.kept, b.kept) << "block-wise selection sees only the cache, not the whole prompt";
  // With one block covering the prompt, block-wise is the one-shot eviction.
  const Pipeline big(*registry_, "keydiff:block=1024");
  EXPECT_EQ(generate(engine, request(big, {BudgetSpec::Unit::kStored, 128}, 4)).kept, b.kept);
}

}  // namespace
}  // namespace kvscope
