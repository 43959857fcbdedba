// The full cache's attention to the needle (app/run/eval_run.h needle_attention_share, blob
// "needle_attention" of `kvscope-cli eval --db`): on a hand-made needle sample of a few hundred
// tokens for pycode-recall-17m, it equals the mean over the question + answer queries of a by-hand
// fp64 softmax(q·k / sqrt(d)) over the engine's own queries and keys, and the capture's window-mean
// attention over exactly those queries; needle spans over every token give 1, spans no query
// attends give 0, disjoint spans add up; on tiny Gemma 2 (logit scale, soft-capping, sliding
// window) it equals the engine's attention function fed the needle indicator as values. The blob
// is recorded with the full-cache item (either question mode: the same values) and only there.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "../core/test_support.h"
#include "cli_support.h"
#include "eval_prompt.h"
#include "eval_run.h"
#include "kvscope/core/attention.h"
#include "kvscope/core/capture.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path recall_dir() { return test::source_dir() / "assets/models/pycode-recall-17m"; }

/// A plain needle-in-a-haystack sample of ~300 tokens, its needle span given in bytes.
EvalSample hand_sample() {
  EvalSample s;
  s.id = "hand-0";
  s.task = "niah_single_1";
  s.chat = false;
  s.instruction = "A special magic number is hidden within the following text. Make sure to memorize it.\n";
  const std::string filler =
      "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
  std::string context;
  for (int i = 0; i < 6; ++i) context += filler;
  const std::string needle = "One of the special magic numbers for quiet-river is: 7341962. ";
  const auto at = static_cast<int64_t>(context.size());
  context += needle;
  for (int i = 0; i < 6; ++i) context += filler;
  s.context = context;
  s.question = "\nWhat is the special magic number for quiet-river mentioned in the provided text?";
  s.answer_prefix = " The special magic number for quiet-river mentioned in the provided text is";
  s.answers = {"7341962"};
  s.max_new_tokens = 8;
  s.metric = "string_match_all";
  s.needles = {{at, at + static_cast<int64_t>(needle.size()) - 1}};
  return s;
}

class NeedleAttention : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model(load_model(recall_dir(), {}));
    engine_ = new Engine(*model_);
    sample_ = new EvalSample(hand_sample());
    prompt_ = new run::EvalPrompt(run::assemble_eval_prompt(*model_, nullptr, *sample_));
    registry_ = new PolicyRegistry();
    register_builtin_policies(*registry_);
  }
  static void TearDownTestSuite() {
    delete registry_;
    delete prompt_;
    delete sample_;
    delete engine_;
    delete model_;
  }
  /// The prompt and its greedy output under the full cache.
  static std::vector<int32_t> prompt_and_output() {
    const run::EvalItem item{sample_, prompt_, nullptr, std::nullopt, run::QuestionMode::kAgnostic, nullptr};
    const run::EvalRunResult r =
        run::run_eval_item(*engine_, *registry_, item, nullptr, "x", std::nullopt, CaptureLevel::kOff);
    EXPECT_FALSE(r.output_ids.empty());
    EXPECT_TRUE(r.needle_attention.empty()) << "no store: no extra forward";
    std::vector<int32_t> ids = prompt_->ids;
    ids.insert(ids.end(), r.output_ids.begin(), r.output_ids.end());
    return ids;
  }

  static inline Model* model_ = nullptr;
  static inline Engine* engine_ = nullptr;
  static inline EvalSample* sample_ = nullptr;
  static inline run::EvalPrompt* prompt_ = nullptr;
  static inline PolicyRegistry* registry_ = nullptr;
};

/// Every layer's post-RoPE queries [n, n_head, D] and keys / values [n_head_kv, n, D] of one
/// full prefill of `ids`, as the engine hands them to an observer.
struct Prefill {
  std::vector<at::Tensor> q, k, v;
};
Prefill prefill_qkv(const Engine& engine, const std::vector<int32_t>& ids) {
  Prefill out;
  KvCache cache = engine.new_cache(static_cast<int64_t>(ids.size()));
  engine.prefill(cache, ids, 0, false, [&](const LayerEvent& ev) {
    out.q.push_back(ev.q.to(at::kFloat).clone());
    out.k.push_back(ev.cache.keys(ev.layer).to(at::kFloat).clone());
    out.v.push_back(ev.cache.values(ev.layer).to(at::kFloat).clone());
  });
  return out;
}

std::vector<bool> needle_mask(const std::vector<TextSpan>& needles, int64_t n) {
  std::vector<bool> m(static_cast<size_t>(n), false);
  for (const TextSpan& s : needles)
    for (int64_t p = std::max<int64_t>(s.begin, 0); p < std::min(s.end, n); ++p) m[static_cast<size_t>(p)] = true;
  return m;
}

TEST_F(NeedleAttention, EqualsAByHandSoftmaxAndTheCapturesWindowAttention) {
  const std::vector<int32_t> ids = prompt_and_output();
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t qs = prompt_->question_start, W = n - qs;
  ASSERT_EQ(prompt_->needle_ids.size(), 1u);
  ASSERT_GT(n, 250);
  ASSERT_GT(W, 20);  // question, answer prefix and output
  const std::vector<float> got = run::needle_attention_share(*engine_, ids, qs, prompt_->needle_ids);
  const ModelConfig& c = model_->config;
  ASSERT_EQ(got.size(), static_cast<size_t>(c.n_layer * c.n_head_kv));
  const Prefill pf = prefill_qkv(*engine_, ids);
  const std::vector<bool> needle = needle_mask(prompt_->needle_ids, n);
  const int64_t G = c.group_size(), D = c.head_dim;
  double max_diff_hand = 0, max_diff_capture = 0, sum = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    // The capture's window-mean attention over exactly the question + answer queries.
    const LayerCapture cap = capture_layer(LayerPrefill{c, l, pf.q[l], pf.k[l], pf.v[l]}, W, CaptureLevel::kFull);
    ASSERT_EQ(cap.attention.size(1), n);
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      // By hand, fp64: softmax(q_i · k_j / sqrt(D)) over j <= i, summed over the needle, mean over
      // the window's queries i and the group's query heads.
      const at::Tensor kh = pf.k[l][h].to(at::kDouble);  // [n, D]
      double mass = 0;
      for (int64_t g = 0; g < G; ++g)
        for (int64_t i = qs; i < n; ++i) {
          const at::Tensor logits =
              kh.narrow(0, 0, i + 1).matmul(pf.q[l][i][h * G + g].to(at::kDouble)) / std::sqrt(static_cast<double>(D));
          const at::Tensor p = at::softmax(logits, 0);
          const double* pp = p.contiguous().data_ptr<double>();
          for (int64_t j = 0; j <= i; ++j)
            if (needle[static_cast<size_t>(j)]) mass += pp[j];
        }
      mass /= static_cast<double>(G * W);
      double from_capture = 0;
      for (int64_t j = 0; j < n; ++j)
        if (needle[static_cast<size_t>(j)]) from_capture += cap.attention[h][j].item<double>();
      const float v = got[static_cast<size_t>(l * c.n_head_kv + h)];
      max_diff_hand = std::max(max_diff_hand, std::abs(v - mass));
      max_diff_capture = std::max(max_diff_capture, std::abs(v - from_capture));
      sum += v;
    }
  }
  EXPECT_LT(max_diff_hand, 1e-5);
  EXPECT_LT(max_diff_capture, 1e-5);
  EXPECT_GT(sum, 0.0) << "the question and answer attend to the needle somewhere";
}

TEST_F(NeedleAttention, SpansOverEveryTokenGiveOneUnattendedSpansZeroAndSpansAddUp) {
  const std::vector<int32_t> ids = prompt_and_output();
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t qs = prompt_->question_start;
  auto share = [&](const std::vector<TextSpan>& spans) {
    return run::needle_attention_share(*engine_, ids, qs, spans);
  };
  const std::vector<float> all = share({{0, n}});
  const std::vector<float> context = share({{0, qs}});
  const std::vector<float> question_answer = share({{qs, n}});
  const std::vector<float> after = share({{n, n + 50}});  // no query sees a later token
  const TextSpan needle = prompt_->needle_ids.at(0);
  const std::vector<float> a = share({{0, needle.begin}}), b = share({needle}), rest = share({{needle.end, qs}});
  ASSERT_EQ(all.size(), static_cast<size_t>(model_->config.n_layer * model_->config.n_head_kv));
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_NEAR(all[i], 1.0, 1e-5);
    EXPECT_NEAR(context[i] + question_answer[i], 1.0, 1e-5);  // the context gets what the question + answer do not
    EXPECT_NEAR(a[i] + b[i] + rest[i], context[i], 1e-5);
    EXPECT_EQ(after[i], 0.0f);
    for (float v : {context[i], question_answer[i], a[i], b[i], rest[i]}) {
      EXPECT_GE(v, 0.0f);
      EXPECT_LE(v, 1.0f);
    }
  }
  // Overlapping spans count each token once.
  const std::vector<float> twice = share({needle, needle, {needle.begin, needle.begin + 1}});
  for (size_t i = 0; i < b.size(); ++i) EXPECT_FLOAT_EQ(twice[i], b[i]);
  // No needle token: nothing to measure.
  EXPECT_TRUE(share({}).empty());
  EXPECT_TRUE(share({{5, 5}}).empty());
}

// Gemma 2's logit scale (query_pre_attn_scalar), soft-capping and sliding window (48 of 120
// tokens): the same as the engine's attention function with the needle indicator as the values.
TEST(NeedleAttentionShapes, FollowsTheModelsScaleSoftcapAndSlidingWindow) {
  const Model model = load_model(test::source_dir() / "assets/models/tiny-archs/gemma2-softcap", {});
  const ModelConfig& c = model.config;
  ASSERT_GT(c.attn_softcap, 0);
  ASSERT_GT(c.attn_scale, 0);
  ASSERT_GT(c.window(0), 0);
  ASSERT_EQ(c.window(1), 0);
  const Engine engine(model);
  std::vector<int32_t> ids;
  for (int i = 0; i < 120; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % c.vocab_size));
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t qs = 70, W = n - qs;
  const std::vector<TextSpan> needles = {{15, 30}, {60, 66}};
  const std::vector<float> got = run::needle_attention_share(engine, ids, qs, needles);
  ASSERT_EQ(got.size(), static_cast<size_t>(c.n_layer * c.n_head_kv));
  const Prefill pf = prefill_qkv(engine, ids);
  const std::vector<bool> mask = needle_mask(needles, n);
  at::Tensor ind = at::zeros({n}, at::kFloat);
  for (int64_t j = 0; j < n; ++j) ind[j] = mask[static_cast<size_t>(j)] ? 1.0f : 0.0f;
  const int64_t H = c.n_head, Hkv = c.n_head_kv, G = H / Hkv, D = c.head_dim;
  const at::Tensor values = ind.view({1, n, 1}).expand({Hkv, n, D}).contiguous();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    SCOPED_TRACE(l);
    auto reference = [&](int64_t window) {
      const AttentionShape shape{c.attn_scale, c.attn_softcap, window};
      const at::Tensor o = gqa_attention(pf.q[l].narrow(0, qs, W), pf.k[l], values, shape);  // [W, H * D]
      return o.view({W, H, D}).select(2, 0).mean(0).view({Hkv, G}).mean(1);                  // [Hkv]
    };
    const at::Tensor ref = reference(c.window(l));
    for (int64_t h = 0; h < Hkv; ++h)
      EXPECT_NEAR(got[static_cast<size_t>(l * Hkv + h)], ref[h].item<double>(), 1e-5) << "head " << h;
    if (c.window(l) > 0) {  // the window hides most of the first needle from these queries
      const at::Tensor no_window = reference(0);
      EXPECT_GT((no_window - ref).abs().max().item<double>(), 1e-3);
    }
  }
}

// ---- the blob --------------------------------------------------------------------------------

class NeedleAttentionBlob : public NeedleAttention {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvscope_needle_attention_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    test::remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { test::remove_tree(dir_); }
  fs::path dir_;
};

TEST_F(NeedleAttentionBlob, RecordedWithTheFullCacheItemOnlyAndTheSameInEitherMode) {
  auto store = sessions::SessionStore::open((dir_ / "eval.db").string());
  const ModelConfig& c = model_->config;
  auto item = [&](const Pipeline* p, std::optional<BudgetSpec> b, run::QuestionMode m) {
    return run::EvalItem{sample_, prompt_, p, b, m, nullptr};
  };
  const run::EvalRunResult full =
      run::run_eval_item(*engine_, *registry_, item(nullptr, std::nullopt, run::QuestionMode::kAgnostic), &store,
                         "full", "k-full", CaptureLevel::kOff);
  const auto blob = store.load_blob(full.run_id, "needle_attention", -1, -1);
  ASSERT_TRUE(blob);
  EXPECT_EQ(blob->dtype, sessions::DType::kF32);
  EXPECT_EQ(blob->shape, (std::vector<int64_t>{c.n_layer, c.n_head_kv}));
  EXPECT_EQ(blob->values<float>(), full.needle_attention);
  // What it holds: needle_attention_share of the prompt + output from the question on.
  std::vector<int32_t> ids = prompt_->ids;
  ids.insert(ids.end(), full.output_ids.begin(), full.output_ids.end());
  const std::vector<float> want =
      run::needle_attention_share(*engine_, ids, prompt_->question_start, prompt_->needle_ids);
  ASSERT_EQ(full.needle_attention.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(full.needle_attention[i], want[i], 1e-6);
  EXPECT_EQ(
      sessions::SessionStore::open((dir_ / "eval.db").string(), sessions::OpenMode::kReadOnly).list_runs().at(0).status,
      sessions::RunStatus::kComplete);
  // Question-aware: the full cache compresses nothing, so the same output and the same map.
  const run::EvalRunResult aware =
      run::run_eval_item(*engine_, *registry_, item(nullptr, std::nullopt, run::QuestionMode::kAware), &store,
                         "full aware", "k-aware", CaptureLevel::kOff);
  EXPECT_EQ(aware.output_ids, full.output_ids);
  EXPECT_EQ(aware.needle_attention, full.needle_attention);
  // A compressed item: its needle kept, no attention map.
  const Pipeline streaming(*registry_, "streamingllm:sink=4");
  const run::EvalRunResult comp =
      run::run_eval_item(*engine_, *registry_,
                         item(&streaming, BudgetSpec{BudgetUnit::kCompressionRatio, 0.5}, run::QuestionMode::kAgnostic),
                         &store, "streaming", "k-comp", CaptureLevel::kOff);
  EXPECT_TRUE(comp.needle_attention.empty());
  EXPECT_FALSE(store.load_blob(comp.run_id, "needle_attention", -1, -1));
  EXPECT_TRUE(store.load_blob(comp.run_id, "needle_kept", -1, -1));
  // A sample without a needle: nothing to record.
  EvalSample plain = *sample_;
  plain.needles.clear();
  plain.answers = {"no such answer"};
  const run::EvalPrompt plain_prompt = run::assemble_eval_prompt(*model_, nullptr, plain);
  ASSERT_TRUE(plain_prompt.needle_ids.empty());
  const run::EvalRunResult none = run::run_eval_item(
      *engine_, *registry_,
      run::EvalItem{&plain, &plain_prompt, nullptr, std::nullopt, run::QuestionMode::kAgnostic, nullptr}, &store,
      "no needle", "k-none", CaptureLevel::kOff);
  EXPECT_FALSE(store.load_blob(none.run_id, "needle_attention", -1, -1));
}

// Through kvscope-cli eval --db: the full cache's runs carry the map, a pipeline's do not.
TEST_F(NeedleAttentionBlob, KvscopeCliEvalRecordsItForTheFullCache) {
  const EvalSample s = hand_sample();
  json j = {{"id", s.id},
            {"task", s.task},
            {"chat", false},
            {"instruction", s.instruction},
            {"context", s.context},
            {"question", s.question},
            {"answer_prefix", s.answer_prefix},
            {"answers", s.answers},
            {"max_new_tokens", s.max_new_tokens},
            {"needles", json::array({json::array({s.needles[0].begin, s.needles[0].end})})}};
  std::ofstream(dir_ / "hand.jsonl") << j.dump() << "\n";
  const fs::path db = dir_ / "eval.db";
  const std::string base = "eval --model " + test::quote(recall_dir()) + " --data " + test::quote(dir_ / "hand.jsonl") +
                           " --db " + test::quote(db) + " --json";
  ASSERT_EQ(test::run_cli(base).exit_code, 0);
  ASSERT_EQ(test::run_cli(base + " --pipeline streamingllm:sink=4 --compression-ratio 0.5").exit_code, 0);
  const auto store = sessions::SessionStore::open(db.string(), sessions::OpenMode::kReadOnly);
  const auto rows = store.list_runs();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    SCOPED_TRACE(row.pipeline_spec);
    const bool is_full = row.sweep_key && row.sweep_key->find("|full|") != std::string::npos;
    const auto blob = store.load_blob(row.id, "needle_attention", -1, -1);
    EXPECT_EQ(bool(blob), is_full);
    if (blob) {
      EXPECT_EQ(blob->shape, (std::vector<int64_t>{model_->config.n_layer, model_->config.n_head_kv}));
      for (float v : blob->values<float>()) {
        EXPECT_GE(v, 0.0f);
        EXPECT_LE(v, 1.0f);
      }
    }
  }
}

}  // namespace
}  // namespace kvscope
