// Learning head patterns (kvscope-cli learn-heads): the differentiable forward against the engine,
// budget accounting, HS-SFT and DuoAttention-style training on stories260K, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <ATen/ATen.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/learn/file_glob.h"
#include "kvscope/core/learn/learn_heads.h"
#include "kvscope/core/learn/pattern_budget.h"
#include "kvscope/core/learn/pattern_file.h"
#include "kvscope/core/learn/training_forward.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/pipeline.h"
#include "test_support.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using learn::LearnMethod;
using learn::LearnOptions;

std::string stories_glob() { return (test::source_dir() / "tests/data/learn-heads/*.txt").string(); }

const Model& stories() {
  static const Model m = load_model(test::stories_dir(), LoadOptions{});
  return m;
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("kvscope_learn_" + std::to_string(::getpid()) + "_" + name);
}

/// Options small enough for stories260K on CPU (context 512, 5 layers x 4 KV heads).
LearnOptions small_options(LearnMethod method, double budget) {
  LearnOptions o;
  o.method = method;
  o.budget = budget;
  o.steps = 16;
  o.batch = 4;
  o.seq_len = 128;
  o.sink = 4;
  o.window = 16;  // duo
  o.block = 8;    // hs-sft: candidates 8, 16, 24, 32
  o.n_candidates = 4;
  o.init_steps = 6;
  o.lr = 0.05;
  return o;
}

/// The pattern the file holds, checked against the model and the budget it was learned for.
HeadPattern check_pattern_file(const fs::path& f, const learn::LearnResult& r, const LearnOptions& o) {
  const HeadPattern p = load_head_pattern(f, stories().config);
  EXPECT_EQ(p.method, learn::learn_method_name(o.method));
  EXPECT_DOUBLE_EQ(p.budget, o.budget);
  const double kept = learn::kept_fraction(p, o.seq_len);
  EXPECT_LE(kept, o.budget);
  EXPECT_DOUBLE_EQ(kept, r.budget_achieved);
  const auto j = test::read_json(f);
  EXPECT_EQ(j["reference_length"], o.seq_len);
  EXPECT_EQ(j["learned"]["loss_curve"].size(), r.curve.size());
  EXPECT_DOUBLE_EQ(j["learned"]["final_loss"].get<double>(), r.final_loss);
  const std::string csv = test::read_text(learn::loss_curve_path(f));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(r.curve.size()) + 1);
  return p;
}

/// Runs `pattern_file` through the heads policy on a prompt of n_tok tokens and returns the kept
/// entries per layer and KV head after prefill.
std::vector<std::vector<size_t>> kept_by_heads_policy(const fs::path& pattern_file, int64_t n_tok) {
  PolicyRegistry registry;
  register_builtin_policies(registry);
  const Pipeline heads(registry, "heads:pattern=" + pattern_file.string());
  const Engine engine(stories());
  GenerateRequest req;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n_tok; ++i) ids.push_back(static_cast<int32_t>(3 + (i * 7) % 500));
  req.prompt_ids = ids;
  req.max_new_tokens = 1;
  req.pipeline = &heads;
  req.budget = {BudgetSpec::Unit::kFraction, 1.0};
  const auto res = generate(engine, req);
  std::vector<std::vector<size_t>> out;
  for (const auto& layer : res.kept) {
    out.emplace_back();
    for (const auto& h : layer) out.back().push_back(h.size());
  }
  return out;
}

TEST(TrainingForward, DenseForwardMatchesTheEngine) {
  const Model& m = stories();
  const learn::TrainingForward fwd(m);
  std::vector<int32_t> ids =
      m.tokenizer->encode("Once upon a time, there was a little girl named Lily. She loved to play.");
  ids.insert(ids.begin(), 1);
  const Engine engine(m);
  KvCache cache = engine.new_cache(static_cast<int64_t>(ids.size()));
  const at::Tensor want = engine.forward(cache, ids, /*all_logits=*/true);  // [T, vocab]
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  const at::Tensor batch = at::tensor(ids64, at::kLong).unsqueeze(0).repeat({2, 1});
  const at::Tensor got = fwd.logits(fwd.hidden_states(batch, {}));  // [2, T, vocab]
  EXPECT_TRUE(at::allclose(got[0], want, 1e-4, 1e-4)) << (got[0] - want).abs().max();
  EXPECT_TRUE(at::allclose(got[1], want, 1e-4, 1e-4));
}

TEST(TrainingForward, StreamingMaskKeepsSinksAndWindow) {
  const at::Tensor m = learn::streaming_mask(6, 1, 2, at::kCPU);
  // Query 5 sees the sink (0) and itself plus one before it (4, 5).
  auto row = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong).to(at::kBool); };
  EXPECT_TRUE(at::equal(m[5], row({1, 0, 0, 0, 1, 1})));
  EXPECT_TRUE(at::equal(m[1], row({1, 1, 0, 0, 0, 0})));
  EXPECT_TRUE(at::equal(learn::streaming_mask(4, 0, 0, at::kCPU), at::ones({4, 4}, at::kBool).tril()));
}

TEST(TrainingForward, GatesMixFullAndStreamingAttention) {
  const Model& m = stories();
  const learn::TrainingForward fwd(m);
  const at::Tensor ids = at::arange(3, 3 + 40, at::kLong).unsqueeze(0);
  const int64_t L = m.config.n_layer, H = m.config.n_head_kv;
  auto with_gate = [&](double a, int64_t window) {
    std::vector<learn::AttentionMix> mixes;
    for (int64_t l = 0; l < L; ++l) mixes.push_back({2, {window}, {}, at::full({H}, a)});
    return fwd.hidden_states(ids, mixes);
  };
  const at::Tensor dense = fwd.hidden_states(ids, {});
  EXPECT_TRUE(at::allclose(with_gate(1.0, 4), dense, 1e-5, 1e-5)) << "gate 1 is full attention";
  EXPECT_TRUE(at::allclose(with_gate(0.0, 64), dense, 1e-5, 1e-5)) << "a window longer than the text drops nothing";
  EXPECT_FALSE(at::allclose(with_gate(0.0, 4), dense, 1e-3, 1e-3)) << "a 4-token window changes the output";
  // The gradient reaches the gates.
  at::Tensor g = at::full({H}, 0.5).set_requires_grad(true);
  std::vector<learn::AttentionMix> mixes;
  for (int64_t l = 0; l < L; ++l) mixes.push_back({2, {4}, {}, g});
  (fwd.hidden_states(ids, mixes) - dense).pow(2).sum().backward();
  ASSERT_TRUE(g.grad().defined());
  EXPECT_GT(g.grad().abs().sum().item<double>(), 0);
}

TEST(PatternBudget, KeptFractionCountsDenseAtFullLength) {
  HeadPattern p;
  p.layers = {{HeadPlan{}, HeadPlan{true, 4, 12}}, {HeadPlan{true, 4, 60}, HeadPlan{true, 0, 1000}}};
  // N = 64: 64 + 16 + 64 (min(64, 64)) + 64 (min(64, 1000)) of 4 * 64.
  EXPECT_DOUBLE_EQ(learn::kept_fraction(p, 64), (64.0 + 16 + 64 + 64) / 256);
  EXPECT_THROW(learn::kept_fraction(p, 0), InputError);
}

TEST(PatternBudget, ThresholdKeepsTheLargestGatesDense) {
  const std::vector<std::vector<double>> gates = {{0.1, 0.9}, {0.5, 0.2}};
  // N = 100, streaming keeps 20: all streaming = 0.2; each dense head adds 0.2.
  const HeadPattern p = learn::threshold_gates(gates, 0.61, 100, 4, 16);
  EXPECT_FALSE(p.layers[0][1].streaming);
  EXPECT_FALSE(p.layers[1][0].streaming);
  EXPECT_TRUE(p.layers[0][0].streaming);
  EXPECT_TRUE(p.layers[1][1].streaming);
  EXPECT_DOUBLE_EQ(learn::kept_fraction(p, 100), 0.6);
  try {
    learn::threshold_gates(gates, 0.1, 100, 4, 16);
    FAIL() << "a budget under the all-streaming floor must fail";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--budget 0.1"), std::string::npos) << e.what();
  }
}

TEST(PatternBudget, DenseHeadsPerLayerThenGlobally) {
  const std::vector<std::vector<double>> gates = {{0.1, 0.9, 0.3, 0.2}, {0.8, 0.7, 0.6, 0.0}};
  auto d = learn::choose_dense_heads(gates, 0.25);  // 1 per layer
  EXPECT_EQ(d, (std::vector<std::vector<bool>>{{false, true, false, false}, {true, false, false, false}}));
  d = learn::choose_dense_heads(gates, 0.375);  // 1 per layer + 1 more globally: 0.7
  EXPECT_TRUE(d[1][1]);
  EXPECT_EQ(std::count(d[0].begin(), d[0].end(), true) + std::count(d[1].begin(), d[1].end(), true), 3);
  d = learn::choose_dense_heads({{0.2, 0.9}, {0.1, 0.3}}, 0.25);  // 2 KV heads: per layer 0, globally 1
  EXPECT_TRUE(d[0][1]);
  EXPECT_EQ(std::count(d[1].begin(), d[1].end(), true), 0);
}

TEST(PatternBudget, RescaleKeepsTheOrderOfLearnedWindowsUnderTheBudget) {
  const std::vector<std::vector<bool>> dense = {{true, false}, {false, false}, {false, false}};
  const std::vector<int64_t> learned = {128, 256, 512};
  const HeadPattern p = learn::rescale_windows(dense, learned, 16, 0.4, 2048);
  EXPECT_LE(learn::kept_fraction(p, 2048), 0.4);
  EXPECT_GT(learn::kept_fraction(p, 2048), 0.39) << "the largest scale that fits is chosen";
  EXPECT_LT(p.layers[0][1].window, p.layers[1][0].window);
  EXPECT_LT(p.layers[1][0].window, p.layers[2][0].window);
  EXPECT_EQ(p.layers[1][0].window, p.layers[1][1].window) << "one window per layer";
  EXPECT_THROW(learn::rescale_windows(dense, learned, 16, 0.1, 2048), InputError) << "the dense head alone is 1/6";
}

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected InputError mentioning '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The defaults were the papers' 128 sinks / 256-token window / 128-token blocks on every model: on
// stories260K's 512-token context hs-sft at budget 0.25 refused to run ("below what the dense heads
// and the 128 sink tokens ... keep on a 512-token reference context"). Below 8K they now scale with
// the reference length.
TEST(LearnDefaults, SizesScaleWithTheReferenceLengthBelow8K) {
  using learn::default_streaming_sizes;
  const auto sizes = [](int64_t n, int64_t context) {
    const learn::StreamingSizes s = default_streaming_sizes(n, context);
    return std::vector<int64_t>{s.sink, s.window, s.block};
  };
  EXPECT_EQ(sizes(512, 512), (std::vector<int64_t>{8, 16, 8}));      // stories260K
  EXPECT_EQ(sizes(1024, 4096), (std::vector<int64_t>{16, 32, 16}));  // pycode-16m at the default --seq-len
  EXPECT_EQ(sizes(128, 512), (std::vector<int64_t>{2, 4, 2}));
  EXPECT_EQ(sizes(16, 512), (std::vector<int64_t>{1, 1, 1})) << "at least 1";
  // The papers' values (HS-SFT Table 6, DuoAttention) for 8K+ models, whatever the reference length,
  // and for a reference length of 8K+ on any model.
  EXPECT_EQ(sizes(1024, 8192), (std::vector<int64_t>{128, 256, 128}));
  EXPECT_EQ(sizes(512, 131072), (std::vector<int64_t>{128, 256, 128}));
  EXPECT_EQ(sizes(8192, 512), (std::vector<int64_t>{128, 256, 128}));
  EXPECT_EQ(sizes(16384, 4096), (std::vector<int64_t>{128, 256, 128}));
}

TEST(LearnDefaults, ResolveFillsOnlyWhatWasLeftToDefault) {
  const ModelConfig& c = stories().config;  // context 512
  const LearnOptions d = learn::resolve_defaults(LearnOptions{}, c);
  EXPECT_EQ(d.seq_len, 512) << "1024 capped at the model's context";
  EXPECT_EQ(d.sink, 8);
  EXPECT_EQ(d.window, 16);
  EXPECT_EQ(d.block, 8);
  LearnOptions given;
  given.seq_len = 256;
  given.sink = 0;
  given.window = 40;
  const LearnOptions r = learn::resolve_defaults(given, c);
  EXPECT_EQ(r.seq_len, 256);
  EXPECT_EQ(r.sink, 0) << "an explicit 0 sinks is kept";
  EXPECT_EQ(r.window, 40);
  EXPECT_EQ(r.block, 4) << "256 / 64";
  LearnOptions longer = given;
  longer.reference_length = 4096;  // the budget measured on longer prompts than the training sequences
  EXPECT_EQ(learn::resolve_defaults(longer, c).block, 64);
  EXPECT_EQ(learn::resolve_defaults(r, c).block, r.block) << "idempotent";
  const ModelConfig pycode = parse_hf_config(test::pycode_dir() / "config.json");
  const LearnOptions p = learn::resolve_defaults(LearnOptions{}, pycode);
  EXPECT_EQ(p.seq_len, 1024);
  EXPECT_EQ(p.sink, 16);
  EXPECT_EQ(p.window, 32);
  EXPECT_EQ(p.block, 16);
  ModelConfig long_context = pycode;
  long_context.max_position_embeddings = 32768;
  const LearnOptions l = learn::resolve_defaults(LearnOptions{}, long_context);
  EXPECT_EQ(l.seq_len, 1024);
  EXPECT_EQ(l.sink, 128);
  EXPECT_EQ(l.window, 256);
  EXPECT_EQ(l.block, 128);
}

TEST(LearnDefaults, EveryBudgetFromTenToFiftyPercentFitsOnTheEmbeddedModels) {
  const std::vector<std::pair<std::string, ModelConfig>> models = {
      {"stories260K", stories().config}, {"pycode-16m", parse_hf_config(test::pycode_dir() / "config.json")}};
  for (const auto& [name, config] : models)
    for (const LearnMethod method : {LearnMethod::kHsSft, LearnMethod::kDuo})
      for (int percent = 10; percent <= 50; percent += 5) {
        LearnOptions o;  // everything else at its default, as `kvscope-cli learn-heads` passes it
        o.method = method;
        o.budget = percent / 100.0;
        SCOPED_TRACE(name + " " + learn::learn_method_name(method) + " budget " + std::to_string(o.budget));
        EXPECT_NO_THROW(learn::validate(o, config));
        // The fitted patterns of the budget check stay within the budget at the reference length.
        const LearnOptions r = learn::resolve_defaults(o, config);
        const std::vector<std::vector<double>> ones(config.n_layer, std::vector<double>(config.n_head_kv, 1.0));
        const HeadPattern p =
            method == LearnMethod::kDuo
                ? learn::threshold_gates(ones, o.budget, r.seq_len, r.sink, r.window)
                : learn::rescale_windows(learn::choose_dense_heads(ones, std::max(0.0, o.budget - 0.05)),
                                         std::vector<int64_t>(config.n_layer, r.block), r.sink, o.budget, r.seq_len);
        EXPECT_LE(learn::kept_fraction(p, r.seq_len), o.budget);
      }
}

TEST(LearnDefaults, ExplicitSizesThatCannotMeetTheBudgetStillFail) {
  const ModelConfig& c = stories().config;
  LearnOptions hs;
  hs.budget = 0.25;
  hs.sink = 128;  // the papers' sinks on a 512-token context
  expect_input_error(
      [&] { learn::validate(hs, c); },
      "--budget 0.25 is below what the dense heads and the 128 sink tokens of the streaming heads keep on a "
      "512-token reference context");
  expect_input_error([&] { learn::learn_head_pattern(stories(), stories_glob(), hs); }, "the 128 sink tokens");
  LearnOptions duo;
  duo.method = LearnMethod::kDuo;
  duo.budget = 0.25;
  duo.sink = 64;
  duo.window = 256;
  expect_input_error(
      [&] { learn::validate(duo, c); },
      "--budget 0.25 is below what streaming heads alone keep: sink 64 + window 256 of a 512-token reference context");
  LearnOptions window_only = duo;  // the default sink (8) with an explicit window too large for the budget
  window_only.sink = -1;
  window_only.window = 200;
  expect_input_error([&] { learn::validate(window_only, c); }, "sink 8 + window 200 of a 512-token reference context");
  // An 8K+ model keeps the papers' sizes: at the default 1,024-token reference they cannot meet 0.25.
  ModelConfig long_context = parse_hf_config(test::pycode_dir() / "config.json");
  long_context.max_position_embeddings = 8192;
  LearnOptions paper;
  paper.method = LearnMethod::kDuo;
  paper.budget = 0.25;
  expect_input_error([&] { learn::validate(paper, long_context); },
                     "sink 128 + window 256 of a 1024-token reference context");
  paper.reference_length = 8192;
  EXPECT_NO_THROW(learn::validate(paper, long_context));
}

TEST(FileGlob, DoubleStarMatchesAnyDepth) {
  const fs::path root = temp_file("glob");
  fs::create_directories(root / "a/b");
  for (const char* f : {"x.py", "a/y.py", "a/b/z.py", "a/b/w.txt"}) std::ofstream(root / f) << "pass\n";
  const auto all = learn::expand_glob((root / "**/*.py").string());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], root / "a/b/z.py");
  EXPECT_EQ(learn::expand_glob((root / "*/*.py").string()), std::vector<fs::path>{root / "a/y.py"});
  EXPECT_TRUE(learn::expand_glob((root / "nothing/**/*.py").string()).empty());
  test::remove_tree(root);
}

TEST(LearnHeads, HsSftReducesTheLossAndWritesAPatternWithinBudget) {
  LearnOptions o = small_options(LearnMethod::kHsSft, 0.5);
  // stories260K barely uses context beyond 8 tokens: at the paper's lambda 1e-2 the balance loss
  // outweighs the LM's pull toward longer windows, so every layer would keep the smallest one.
  o.lambda = 1e-3;
  const learn::LearnResult r = learn::learn_head_pattern(stories(), stories_glob(), o);
  EXPECT_EQ(r.n_files, 3);
  ASSERT_EQ(r.curve.size(), static_cast<size_t>(o.init_steps + o.steps));
  EXPECT_EQ(r.curve.front().phase, "duo");
  EXPECT_EQ(r.curve.back().phase, "hs-sft");
  EXPECT_LT(r.final_loss, r.initial_loss) << "the training objective on the fixed batch must drop";
  EXPECT_LT(r.final_task_loss, r.initial_task_loss) << "the LM loss itself drops: windows moved off the smallest";
  EXPECT_GT(*std::max_element(r.learned_windows.begin(), r.learned_windows.end()), o.block);
  // alpha = budget - 0.05 = 0.45 of 20 KV heads: 1 per layer + 4 by gate = 9 dense heads.
  int64_t n_dense = 0;
  for (const auto& l : r.dense) n_dense += std::count(l.begin(), l.end(), true);
  EXPECT_EQ(n_dense, 9);
  for (const auto& probs : r.window_probs) EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-5);
  const fs::path f = temp_file("hs.json");
  learn::save_learned_pattern(f, r, o);
  const HeadPattern p = check_pattern_file(f, r, o);
  // One window per layer for the streaming heads; dense heads as chosen.
  for (size_t l = 0; l < p.layers.size(); ++l) {
    int64_t w = -1;
    for (size_t h = 0; h < p.layers[l].size(); ++h) {
      EXPECT_EQ(!p.layers[l][h].streaming, r.dense[l][h]);
      if (!p.layers[l][h].streaming) continue;
      EXPECT_EQ(p.layers[l][h].sink, o.sink);
      if (w >= 0) EXPECT_EQ(p.layers[l][h].window, w);
      w = p.layers[l][h].window;
    }
  }
  // The heads policy runs it: dense heads keep all 128 prompt entries, streaming ones sink + window.
  const auto kept = kept_by_heads_policy(f, o.seq_len);
  for (size_t l = 0; l < p.layers.size(); ++l)
    for (size_t h = 0; h < p.layers[l].size(); ++h)
      EXPECT_EQ(static_cast<int64_t>(kept[l][h]), p.layers[l][h].streaming
                                                      ? std::min(o.seq_len, p.layers[l][h].sink + p.layers[l][h].window)
                                                      : o.seq_len);
  std::remove(f.c_str());
  std::remove(learn::loss_curve_path(f).c_str());
}

TEST(LearnHeads, DuoReducesTheLossAndThresholdsGatesToTheBudget) {
  const LearnOptions o = small_options(LearnMethod::kDuo, 0.5);
  const learn::LearnResult r = learn::learn_head_pattern(stories(), stories_glob(), o);
  ASSERT_EQ(r.curve.size(), static_cast<size_t>(o.steps));
  EXPECT_LT(r.final_loss, r.initial_loss);
  EXPECT_LT(r.curve.back().reg_loss, r.curve.front().reg_loss) << "the L1 term pulls the gates down";
  EXPECT_DOUBLE_EQ(r.initial_task_loss, 0) << "gates at 1: the mixed model is the full model";
  EXPECT_GT(r.final_task_loss, 0);
  for (const auto& layer : r.gates)
    for (double a : layer) EXPECT_TRUE(a >= 0 && a <= 1) << a;
  const fs::path f = temp_file("duo.json");
  learn::save_learned_pattern(f, r, o);
  const HeadPattern p = check_pattern_file(f, r, o);
  // Streaming keeps 20 of 128 (0.156); each dense head adds 0.042 of the cache: 8 dense heads fit 0.5.
  std::vector<double> dense_gates, streaming_gates;
  for (size_t l = 0; l < p.layers.size(); ++l)
    for (size_t h = 0; h < p.layers[l].size(); ++h) {
      (p.layers[l][h].streaming ? streaming_gates : dense_gates).push_back(r.gates[l][h]);
      if (p.layers[l][h].streaming) EXPECT_EQ(p.layers[l][h].window, o.window);
    }
  EXPECT_EQ(dense_gates.size(), 8u);
  EXPECT_GE(*std::min_element(dense_gates.begin(), dense_gates.end()),
            *std::max_element(streaming_gates.begin(), streaming_gates.end()))
      << "dense heads are the ones with the largest gates";
  std::remove(f.c_str());
  std::remove(learn::loss_curve_path(f).c_str());
}

TEST(LearnHeads, BadInputIsNamed) {
  const LearnOptions o = small_options(LearnMethod::kDuo, 0.5);
  const std::string missing = (test::source_dir() / "tests/data/no-such-dir/*.txt").string();
  expect_input_error([&] { learn::learn_head_pattern(stories(), missing, o); },
                     "--data '" + missing + "': no files match");
  for (double b : {0.0, -0.2, 1.5}) {
    LearnOptions bad = o;
    bad.budget = b;
    expect_input_error([&] { learn::learn_head_pattern(stories(), stories_glob(), bad); }, "--budget");
  }
  LearnOptions tight = o;
  tight.budget = 0.1;  // streaming alone keeps 20 / 128
  expect_input_error([&] { learn::learn_head_pattern(stories(), stories_glob(), tight); },
                     "below what streaming heads alone keep");
  LearnOptions short_seq = o;
  short_seq.seq_len = 20;
  expect_input_error([&] { learn::learn_head_pattern(stories(), stories_glob(), short_seq); }, "--seq-len 20");
  LearnOptions too_long = o;
  too_long.seq_len = 4096;
  expect_input_error([&] { learn::learn_head_pattern(stories(), stories_glob(), too_long); },
                     "beyond the model's context");
  const fs::path tiny = temp_file("tiny.txt");
  std::ofstream(tiny) << "Once upon a time, there was a cat.";
  expect_input_error([&] { learn::learn_head_pattern(stories(), tiny.string(), o); },
                     "fewer than one sequence of --seq-len 128");
  std::remove(tiny.c_str());
  expect_input_error([] { learn::parse_learn_method("snapkv"); }, "expected hs-sft or duo");
}

}  // namespace
}  // namespace kvscope
