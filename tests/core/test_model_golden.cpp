// The engine against references: HF transformers fp32 goldens for pycode-16m, and the published
// stories260K output of llama2.c.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "test_support.h"

namespace kvscope {
namespace {

class PycodeGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new Model(load_model(test::pycode_dir(), LoadOptions{})); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* PycodeGolden::model_ = nullptr;

TEST_F(PycodeGolden, LogitsArgmaxAndGreedyMatchTransformers) {
  const Engine engine(*model_);
  for (const auto& path : test::pycode_goldens()) {
    SCOPED_TRACE(path.filename().string());
    const auto g = test::read_json(path);
    const auto ids = g["input_ids"].get<std::vector<int32_t>>();
    KvCache cache = engine.new_cache(ids.size() + 48);
    at::Tensor logits = engine.prefill(cache, ids, /*chunk=*/0, /*all_logits=*/true);  // [T, V]

    const auto golden_last = g["last_logits"].get<std::vector<float>>();
    at::Tensor ref = at::from_blob(const_cast<float*>(golden_last.data()), {int64_t(golden_last.size())}, at::kFloat);
    const double max_err = (logits[-1] - ref).abs().max().item<double>();
    EXPECT_LE(max_err, 1e-3) << "max |last_logits - golden|";

    const auto golden_argmax = g["argmax"].get<std::vector<int64_t>>();
    at::Tensor am = logits.argmax(-1).contiguous();
    int64_t agree = 0;
    for (size_t i = 0; i < golden_argmax.size(); ++i) agree += am[i].item<int64_t>() == golden_argmax[i];
    EXPECT_GE(double(agree) / golden_argmax.size(), 0.995) << agree << " of " << golden_argmax.size();

    GenerateRequest req;
    req.prompt_ids = ids;
    req.max_new_tokens = 32;
    const auto out = generate(engine, req).output_ids;
    const auto golden_greedy = g["greedy_full"].get<std::vector<int32_t>>();
    ASSERT_EQ(out.size(), 32u);
    EXPECT_EQ(out, std::vector<int32_t>(golden_greedy.begin(), golden_greedy.begin() + 32));
  }
}

TEST_F(PycodeGolden, ChunkedPrefillEqualsWholePrefill) {
  const Engine engine(*model_);
  const auto g = test::read_json(test::pycode_dir() / "golden/textwrap_head.json");
  const auto ids = g["input_ids"].get<std::vector<int32_t>>();
  KvCache whole = engine.new_cache(ids.size()), chunked = engine.new_cache(16);  // chunked also grows
  at::Tensor a = engine.prefill(whole, ids, 0, true);
  at::Tensor b = engine.prefill(chunked, ids, 100, true);
  EXPECT_LE((a - b).abs().max().item<double>(), 2e-4);
  EXPECT_EQ(chunked.next_position(), int64_t(ids.size()));
  EXPECT_TRUE(at::equal(chunked.positions(3)[1], at::arange(int64_t(ids.size()), at::kLong)));
}

TEST(Stories260K, GreedyEqualsPublishedReference) {
  const Model model = load_model(test::stories_dir() / "stories260K.bin", LoadOptions{});
  EXPECT_EQ(model.config.n_head_kv, 4);
  EXPECT_EQ(model.config.parameter_count(), 260032);  // README: 260,032 parameters
  const Engine engine(model);
  GenerateRequest req;
  req.prompt_ids = prompt_ids(model, "", BosMode::kAlways);
  ASSERT_EQ(req.prompt_ids, std::vector<int32_t>{1});
  req.max_new_tokens = 256;  // run.c -n 256: one sampled token per forward step
  req.stop_ids = model.stop_token_ids;
  const auto res = generate(engine, req);
  const std::string readme = test::read_text(test::stories_dir() / "README.md");
  const auto begin = readme.find("```\n") + 4;
  const std::string expected = readme.substr(begin, readme.find("\n```", begin) - begin);
  EXPECT_EQ(decode_continuation(*model.tokenizer, req.prompt_ids, res.output_ids), expected);
}

}  // namespace
}  // namespace kvscope
