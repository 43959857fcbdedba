// The decisive score that capture full records (LayerCapture::policy_score) is exactly what the
// budget stage's select() ranked, for every scoring policy of the catalogue, and the kept sets of
// every budget stage (uniform, Ada-KV, pyramid) are a top-k of it per KV head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/capture.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "test_support.h"

namespace kvscope {
namespace {

/// A budget stage that records the scores select() receives (per layer, CPU copies) and delegates
/// to `uniform`.
class SpyBudget : public BudgetPolicy {
 public:
  SpyBudget(std::unique_ptr<Policy> uniform, std::vector<at::Tensor>* seen)
      : uniform_(dynamic_cast<BudgetPolicy*>(uniform.release())), seen_(seen) {}
  std::string name() const override { return "spy"; }
  ParamValues params() const override { return {}; }
  std::vector<at::Tensor> select(const at::Tensor& scores, int64_t n_kept, const LayerPrefill& in) const override {
    if (seen_->size() <= static_cast<std::size_t>(in.layer)) seen_->resize(static_cast<std::size_t>(in.layer + 1));
    (*seen_)[static_cast<std::size_t>(in.layer)] = scores.to(at::kCPU).clone();
    return uniform_->select(scores, n_kept, in);
  }

 private:
  std::unique_ptr<BudgetPolicy> uniform_;
  std::vector<at::Tensor>* seen_;
};

/// Pipeline text of scorer `name` with parameters small enough for a ~100-token prompt.
std::string scorer_spec(const PolicyDescription& d) {
  std::string params;
  for (const ParamSpec& p : d.params) {
    const char* v = p.type != ParamType::kInt ? nullptr
                    : p.key == "window"       ? "8"
                    : p.key == "recent"       ? "4"
                    : p.key == "sink"         ? "4"
                                              : nullptr;
    if (v) params += (params.empty() ? ":" : ",") + p.key + "=" + v;
  }
  return d.name + params;
}

class PolicyScoreRecord : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = std::make_unique<Model>(load_model(test::stories_dir() / "stories260K.bin", LoadOptions{}));
    registry_.reset(new PolicyRegistry);
    register_builtin_policies(*registry_);
    registry_->add({"spy",
                    Stage::kBudget,
                    {},
                    "records the scores select() ranks (test)",
                    [](const ParamValues&) -> std::unique_ptr<Policy> {
                      return std::make_unique<SpyBudget>(registry_->make("uniform", {}), &seen_);
                    }});
  }
  static void TearDownTestSuite() {
    model_.reset();
    registry_.reset();
  }

  GenerateResult run(const std::string& spec) {
    const Engine engine(*model_);
    const Pipeline p(*registry_, spec);
    GenerateRequest req;
    req.prompt_ids = prompt_ids(*model_,
                                "Once upon a time, there was a little girl named Lily. She loved to play in the park "
                                "with her dog Max. One day, Max found a big red ball under a tree. Lily and Max "
                                "played with the ball all day long, and when the sun went down they walked home "
                                "together, tired and happy.",
                                BosMode::kAlways);
    req.max_new_tokens = 1;
    req.pipeline = &p;
    req.budget = {BudgetSpec::Unit::kCompressionRatio, 0.6};
    req.capture = CaptureLevel::kFull;
    seen_.clear();
    return generate(engine, req);
  }

  static std::vector<const PolicyDescription*> scorers() {
    std::vector<const PolicyDescription*> out;
    for (const PolicyDescription& d : registry_->catalog().policies())
      if (d.stage == Stage::kScoring && d.name != "spy") out.push_back(&d);
    return out;
  }

  static inline std::unique_ptr<Model> model_;
  static inline std::unique_ptr<PolicyRegistry> registry_;
  static inline std::vector<at::Tensor> seen_;
};

TEST_F(PolicyScoreRecord, EqualsWhatSelectRankedForEveryScorer) {
  const auto all = scorers();
  ASSERT_GE(all.size(), 8u);
  for (const PolicyDescription* d : all) {
    SCOPED_TRACE(d->name);
    EXPECT_FALSE(d->score.empty()) << "the catalogue says what the score means";
    const GenerateResult res = run(scorer_spec(*d) + "+spy");
    ASSERT_EQ(seen_.size(), res.captures.size());
    for (std::size_t l = 0; l < res.captures.size(); ++l) {
      const at::Tensor& rec = res.captures[l].policy_score;
      ASSERT_TRUE(rec.defined());
      // One compression of the whole prompt: cache rows are prompt positions, so the record equals
      // the tensor select() saw, bit for bit (always-kept entries at the largest finite float).
      EXPECT_TRUE(at::equal(rec, seen_[l])) << "layer " << l;
      EXPECT_FALSE(at::isnan(rec).any().item<bool>());
    }
  }
}

TEST_F(PolicyScoreRecord, KeptSetsAreTopKOfTheRecordedScoreForEveryBudgetStage) {
  for (const PolicyDescription* d : scorers())
    for (const char* budget : {"", "+adakv", "+pyramid"}) {
      const std::string spec = scorer_spec(*d) + budget;
      SCOPED_TRACE(spec);
      const GenerateResult res = run(spec);
      for (std::size_t l = 0; l < res.captures.size(); ++l)
        for (std::size_t h = 0; h < res.kept[l].size(); ++h) {
          const at::Tensor row = res.captures[l].policy_score[static_cast<int64_t>(h)];
          const float* s = row.data_ptr<float>();
          const auto& kept = res.kept[l][h];
          std::vector<bool> is_kept(static_cast<std::size_t>(row.size(0)), false);
          for (int64_t p : kept) is_kept[static_cast<std::size_t>(p)] = true;
          float min_kept = std::numeric_limits<float>::infinity(), max_evicted = -min_kept;
          for (std::size_t j = 0; j < is_kept.size(); ++j) {
            if (is_kept[j])
              min_kept = std::min(min_kept, s[j]);
            else
              max_evicted = std::max(max_evicted, s[j]);
          }
          ASSERT_LT(kept.size(), is_kept.size()) << "something was evicted";
          EXPECT_GE(min_kept, max_evicted)
              << "layer " << l << " head " << h << ": an evicted entry outranks a kept one";
          // Always-kept entries (largest finite float) are never evicted.
          for (std::size_t j = 0; j < is_kept.size(); ++j)
            if (s[j] == std::numeric_limits<float>::max()) EXPECT_TRUE(is_kept[j]) << "position " << j;
        }
    }
}

TEST(PolicyScoreRecordUnit, ScattersByPositionAndKeepsEarlierBlocks) {
  LayerCapture cap;
  // Block 1: rows are positions 0..3; block 2: the cache kept positions {1, 3} and appended 4, 5.
  record_policy_scores(cap, at::tensor({1.f, 2.f, 3.f, 4.f}).view({1, 4}), at::arange(4).view({1, 4}), 6);
  record_policy_scores(cap, at::tensor({7.f, 8.f, 9.f, 10.f}).view({1, 4}), at::tensor({1L, 3L, 4L, 5L}).view({1, 4}),
                       6);
  const at::Tensor want = at::tensor({1.f, 7.f, 3.f, 8.f, 9.f, 10.f}).view({1, 6});
  EXPECT_TRUE(at::equal(cap.policy_score, want)) << cap.policy_score;
  // Positions past the prompt are dropped; unscored positions stay NaN.
  LayerCapture c2;
  record_policy_scores(c2, at::tensor({5.f, 6.f}).view({1, 2}), at::tensor({0L, 9L}).view({1, 2}), 3);
  EXPECT_EQ(c2.policy_score[0][0].item<float>(), 5.f);
  EXPECT_TRUE(std::isnan(c2.policy_score[0][1].item<float>()));
  EXPECT_TRUE(std::isnan(c2.policy_score[0][2].item<float>()));
}

}  // namespace
}  // namespace kvscope
