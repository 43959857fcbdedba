// DecodeGraph (one CUDA graph per decode step) against the eager fused decode path: same tokens in,
// same logits, cache contents, lengths and positions out, on the full cache and on a ragged
// (head-wise budget) cache. Skipped without a CUDA device or without the kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <ATen/ATen.h>

#include "../../core/src/ops/cuda_ops.h"
#include "kvscope/core/decode_graph.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "test_support.h"

namespace kvscope {
namespace {

class CudaDecodeGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
};

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

/// Keeps a different random subset of the prompt in every (layer, KV head): a ragged cache.
void make_ragged(KvCache& cache, int64_t reserve, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    std::vector<at::Tensor> kept;
    for (int64_t h = 0; h < cache.n_head_kv(); ++h) {
      const int64_t n = cache.layer(l).length[h], keep = 1 + static_cast<int64_t>(rng() % n);
      at::Tensor perm = at::randperm(n, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, keep);
      kept.push_back(std::get<0>(at::sort(perm)));
    }
    cache.retain(l, kept, reserve);
  }
}

void compare_paths(at::ScalarType dtype, bool ragged, double logit_tol) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), dtype, {}});
  const Engine engine(model);
  const int64_t n_prompt = 700, steps = 24;
  const auto prompt = random_ids(n_prompt, model.config.vocab_size, 7);
  const auto tokens = random_ids(steps, model.config.vocab_size, 8);
  KvCache eager = engine.new_cache(n_prompt + steps), graphed = engine.new_cache(n_prompt + steps);
  at::manual_seed(3);
  engine.prefill(eager, prompt);
  at::manual_seed(3);
  engine.prefill(graphed, prompt);
  if (ragged) {
    at::manual_seed(5);
    make_ragged(eager, steps, 11);
    at::manual_seed(5);
    make_ragged(graphed, steps, 11);
  }
  ASSERT_TRUE(DecodeGraph::supported(engine, graphed, steps));
  DecodeGraph graph(engine, graphed);
  for (int64_t t = 0; t < steps; ++t) {
    const int32_t tok[1] = {tokens[t]};
    const at::Tensor a = engine.forward(eager, tok).cpu();
    const at::Tensor b = graph.step(tokens[t]).cpu();
    ASSERT_EQ(a.sizes(), b.sizes());
    EXPECT_LE((a - b).abs().max().item<double>(), logit_tol) << "step " << t;
    if (dtype == at::kFloat) EXPECT_EQ(a.argmax().item<int64_t>(), b.argmax().item<int64_t>()) << "step " << t;
  }
  EXPECT_EQ(eager.next_position(), graphed.next_position());
  for (int64_t l = 0; l < eager.n_layer(); ++l) {
    EXPECT_EQ(eager.layer(l).length, graphed.layer(l).length) << "layer " << l;
    for (int64_t h = 0; h < eager.n_head_kv(); ++h) {
      EXPECT_TRUE(at::equal(eager.head_positions(l, h).cpu(), graphed.head_positions(l, h).cpu())) << l << "/" << h;
      EXPECT_TRUE(
          at::allclose(eager.head_keys(l, h).to(at::kFloat), graphed.head_keys(l, h).to(at::kFloat), 1e-2, 1e-2))
          << l << "/" << h;
    }
  }
}

TEST_F(CudaDecodeGraph, Fp32FullCacheMatchesEagerSteps) { compare_paths(at::kFloat, false, 1e-3); }
TEST_F(CudaDecodeGraph, Fp32RaggedCacheMatchesEagerSteps) { compare_paths(at::kFloat, true, 1e-3); }
TEST_F(CudaDecodeGraph, Bf16RaggedCacheMatchesEagerSteps) { compare_paths(at::kBFloat16, true, 0.25); }

/// A sparse-decode pipeline through generate(): at capture full on the eager fused path (forced by
/// a decode probe: attend_fused, per-step recall from LibTorch), at capture full on the CUDA graph
/// (the exact top-k oracle's kernels inside the step: DecodeOracle), off and summary (graph).
/// Greedy tokens, bytes per step, the timeline and the full level's recall and union agree.
void compare_generate(const std::string& spec, int64_t budget) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), at::kFloat, {}});
  const Engine engine(model);
  PolicyRegistry reg;
  register_builtin_policies(reg);
  const Pipeline pipeline(reg, spec);
  GenerateRequest req;
  req.prompt_ids = random_ids(1500, model.config.vocab_size, 21);
  req.max_new_tokens = 24;
  req.pipeline = &pipeline;
  req.budget = BudgetSpec{BudgetSpec::Unit::kFetched, double(budget)};
  req.capture = CaptureLevel::kFull;
  req.decode_probe = [](const LayerEvent&, int64_t) {};
  const GenerateResult eager = generate(engine, req);
  req.decode_probe = nullptr;
  const GenerateResult full = generate(engine, req);
  req.capture = CaptureLevel::kOff;
  const GenerateResult graphed = generate(engine, req);
  EXPECT_FALSE(eager.selection_recall.empty()) << spec << ": the eager run should have recorded selections";
  EXPECT_EQ(eager.output_ids, graphed.output_ids) << spec;
  EXPECT_EQ(eager.bytes_read, graphed.bytes_read) << spec;
  EXPECT_FALSE(eager.decode_graph);
  EXPECT_TRUE(graphed.decode_graph);
  // Capture full keeps the graph: recall and the exact top-k union come from the oracle's kernels
  // (fp32 logits of the same keys: equal up to near-ties at the k-th score).
  EXPECT_TRUE(full.decode_graph) << spec << ": capture full must not cost the CUDA graph";
  EXPECT_EQ(full.output_ids, eager.output_ids) << spec;
  ASSERT_EQ(full.selection_recall.size(), eager.selection_recall.size()) << spec;
  for (size_t i = 0; i < eager.selection_recall.size(); ++i)
    EXPECT_NEAR(full.selection_recall[i], eager.selection_recall[i], 0.01) << spec << " step " << i;
  ASSERT_EQ(full.timeline.recall.size(), eager.timeline.recall.size());
  int64_t compared = 0;
  for (size_t i = 0; i < eager.timeline.recall.size(); ++i) {
    const float e = eager.timeline.recall[i], f = full.timeline.recall[i];
    EXPECT_EQ(std::isnan(e), std::isnan(f)) << spec << " recall entry " << i;
    if (std::isnan(e) || std::isnan(f)) continue;
    EXPECT_NEAR(f, e, 0.02) << spec << " recall entry " << i;
    ++compared;
  }
  EXPECT_GT(compared, 0) << spec;
  // The exact top-k sets of the per-token heads (every head of this small run): the same sets up
  // to near-ties at the k-th logit.
  ASSERT_FALSE(eager.timeline.exact.empty()) << spec;
  ASSERT_FALSE(full.timeline.exact.empty()) << spec;
  int64_t same = 0, total = 0;
  for (int64_t s = 1; s <= eager.timeline.n_steps; ++s)
    for (int64_t l = 0; l < eager.timeline.n_layer; ++l)
      for (int64_t h = 0; h < eager.timeline.n_head_kv; ++h) {
        const auto e = eager.timeline.exact_positions(l, h, s), f = full.timeline.exact_positions(l, h, s);
        EXPECT_EQ(e.has_value(), f.has_value()) << spec << " step " << s << " head " << l << ":" << h;
        if (!e || !f) continue;
        ++total;
        same += *e == *f;
      }
  EXPECT_GE(same, total * 95 / 100) << spec << ": exact top-k sets differ beyond near-ties";
  ASSERT_TRUE(full.topk_unique.defined() && eager.topk_unique.defined());
  const at::Tensor du = (full.topk_unique - eager.topk_unique).abs().to(at::kDouble);
  EXPECT_LE(du.max().item<double>(), 0.02 * eager.topk_unique.max().item<double>() + 2) << spec;
  // Capture summary keeps the graph and records the same timeline as the eager steps.
  req.capture = CaptureLevel::kSummary;
  const GenerateResult summary = generate(engine, req);
  EXPECT_TRUE(summary.decode_graph) << spec << ": a timeline must not cost the CUDA graph";
  EXPECT_EQ(summary.output_ids, eager.output_ids) << spec;
  for (const Timeline* b : {&summary.timeline, &full.timeline}) {
    const Timeline& a = eager.timeline;
    ASSERT_EQ(a.check(), "");
    ASSERT_EQ(b->check(), "");
    EXPECT_EQ(a.n_steps, b->n_steps);
    EXPECT_EQ(a.evicted_at, b->evicted_at) << spec;
    ASSERT_EQ(a.pages.size(), b->pages.size());
    ASSERT_FALSE(a.pages.empty());
    for (size_t l = 0; l < a.pages.size(); ++l) {
      EXPECT_EQ(a.pages[l].bits, b->pages[l].bits) << spec << " layer " << l;
      EXPECT_EQ(a.pages[l].offsets, b->pages[l].offsets) << spec << " layer " << l;
    }
  }
}

/// B prompts of n_prompt random tokens, each prefilled into its own cache (room for `steps` more).
std::vector<KvCache> prefill_alone(const Engine& engine, int64_t B, int64_t n_prompt, int64_t steps) {
  std::vector<KvCache> alone;
  for (int64_t b = 0; b < B; ++b) {
    alone.push_back(engine.new_cache(n_prompt + steps));
    engine.prefill(alone.back(), random_ids(n_prompt, engine.model().config.vocab_size, 20 + static_cast<uint32_t>(b)));
  }
  return alone;
}

/// The caches stacked into one of B x n_head_kv heads (sequence b owns heads b * Hkv ..).
KvCache stack_caches(const Engine& engine, const std::vector<KvCache>& alone, int64_t n_prompt, int64_t steps) {
  const Model& model = engine.model();
  ModelConfig bc = model.config;
  bc.n_head_kv *= static_cast<int64_t>(alone.size());
  KvCache batch(bc, n_prompt + steps, model.device, model.dtype);
  for (int64_t l = 0; l < batch.n_layer(); ++l) {
    std::vector<at::Tensor> k, v;
    for (const KvCache& c : alone) {
      k.push_back(c.keys(l));
      v.push_back(c.values(l));
    }
    batch.append(l, at::cat(k), at::cat(v), alone[0].positions(l)[0]);
  }
  batch.advance_position(n_prompt);
  return batch;
}

/// Three prompts of one length prefilled separately, stacked into one cache of 3 x n_head_kv heads
/// (sequence b owns heads b * Hkv ..): every graphed batch step gives each sequence the logits of
/// its own batch-1 step. The batch's projections run three rows at once (cuBLAS), the single
/// sequence's one row (the GEMV kernel): equal up to summation order and, in bf16, rounding.
void compare_batch(at::ScalarType dtype, double logit_tol) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), dtype, {}});
  const Engine engine(model);
  const int64_t B = 3, n_prompt = 300, steps = 6;
  std::vector<KvCache> alone = prefill_alone(engine, B, n_prompt, steps);
  KvCache batch = stack_caches(engine, alone, n_prompt, steps);
  ASSERT_TRUE(DecodeGraph::supported(engine, batch, steps));
  DecodeGraph graph(engine, batch);
  const auto tokens = random_ids(steps, model.config.vocab_size, 9);
  for (int64_t t = 0; t < steps; ++t) {
    const at::Tensor got = graph.step(tokens[t]).cpu();
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{B, model.config.vocab_size}));
    for (int64_t b = 0; b < B; ++b) {
      const int32_t tok[1] = {tokens[t]};
      const at::Tensor want = engine.forward(alone[b], tok).cpu();
      EXPECT_LE((got[b] - want).abs().max().item<double>(), logit_tol) << "step " << t << " sequence " << b;
      if (dtype == at::kFloat)
        EXPECT_EQ(got[b].argmax().item<int64_t>(), want.argmax().item<int64_t>()) << "step " << t << " sequence " << b;
    }
  }
  EXPECT_EQ(batch.layer(0).length[0], n_prompt + steps);
}

TEST_F(CudaDecodeGraph, Fp32BatchOfSequencesMatchesEachSequenceAlone) { compare_batch(at::kFloat, 1e-3); }

/// Page selection (Quest, 2 of 19 pages a step) in a batched graph: each sequence gets the logits
/// of its own batch-1 graph with its own policy instance; prepare_graph builds the summaries over
/// each cache's heads, so query head i of the batch reads cache head i / G, its sequence's.
TEST_F(CudaDecodeGraph, QuestBatchOfSequencesMatchesEachSequenceAlone) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), at::kFloat, {}});
  const Engine engine(model);
  const int64_t B = 3, n_prompt = 300, steps = 6;
  PolicyRegistry reg;
  register_builtin_policies(reg);
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  auto quest = [&] {
    pipelines.push_back(std::make_unique<Pipeline>(reg, "quest"));
    pipelines.back()->begin_run(RunBudget{BudgetSpec{BudgetSpec::Unit::kFetched, 64}, n_prompt, steps}, model.config);
    return pipelines.back()->decode_attention();
  };
  std::vector<KvCache> alone = prefill_alone(engine, B, n_prompt, steps);
  KvCache batch = stack_caches(engine, alone, n_prompt, steps);
  DecodeAttentionPolicy* batch_policy = quest();
  ASSERT_TRUE(batch_policy->prepare_graph(batch, steps + 1));
  DecodeGraph graph(engine, batch, batch_policy);
  std::vector<DecodeAttentionPolicy*> policies;
  std::vector<std::unique_ptr<DecodeGraph>> singles;
  for (KvCache& c : alone) {
    policies.push_back(quest());
    ASSERT_TRUE(policies.back()->prepare_graph(c, steps + 1));
    singles.push_back(std::make_unique<DecodeGraph>(engine, c, policies.back()));
  }
  const auto tokens = random_ids(steps, model.config.vocab_size, 9);
  int64_t batch_bytes = 0, alone_bytes = 0;
  for (int64_t t = 0; t < steps; ++t) {
    const at::Tensor got = graph.step(tokens[t]).cpu();
    batch_bytes += batch_policy->after_graph_step(batch);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{B, model.config.vocab_size}));
    for (int64_t b = 0; b < B; ++b) {
      const at::Tensor want = singles[b]->step(tokens[t]).cpu();
      alone_bytes += policies[b]->after_graph_step(alone[b]);
      EXPECT_LE((got[b] - want).abs().max().item<double>(), 1e-3) << "step " << t << " sequence " << b;
      EXPECT_EQ(got[b].argmax().item<int64_t>(), want.argmax().item<int64_t>()) << "step " << t << " sequence " << b;
    }
  }
  EXPECT_EQ(batch_bytes, alone_bytes);  // the batch reads what its sequences read alone
  EXPECT_GT(batch_bytes, 0);
}
TEST_F(CudaDecodeGraph, Bf16BatchOfSequencesMatchesEachSequenceAlone) { compare_batch(at::kBFloat16, 0.25); }

TEST_F(CudaDecodeGraph, RocketKvGraphMatchesEagerFused) { compare_generate("rocketkv", 256); }
TEST_F(CudaDecodeGraph, QuestGraphMatchesEagerFused) { compare_generate("quest", 256); }

// Eviction while decoding at its cap (S6 at interval 1) runs inside the graph: each step drops the
// lowest-ranked entry of every head in place (Pipeline::evict_decode_device; H2O's running totals in
// a device buffer); the eager steps re-pack the cache (evict_decode). fp32: the same greedy tokens
// and cache sizes.
TEST_F(CudaDecodeGraph, DecodeEvictionRunsInTheGraph) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), at::kFloat, {}});
  const Engine engine(model);
  PolicyRegistry reg;
  register_builtin_policies(reg);
  // DecodingPress at interval 8 runs two graphs (with and without the eviction); target 120 under
  // the budget and the question past it leave the cache off its target until the first eager
  // eviction, after which the graph is captured.
  const struct {
    const char* spec;
    bool question;
  } cases[] = {{"tova+decoding", false},
               {"keydiff+decoding", false},
               {"streamingllm+decoding", false},
               {"h2o:recent=16+decoding", false},
               {"tova+decoding:interval=8", false},
               {"keydiff+decoding:interval=8,target=120", false},
               {"tova+decoding", true},
               {"tova+decoding:interval=4", true}};
  for (const auto& [spec, question] : cases) {
    const Pipeline pipeline(reg, spec);
    GenerateRequest req;
    req.prompt_ids = random_ids(900, model.config.vocab_size, 41);
    if (question) req.question_ids = random_ids(13, model.config.vocab_size, 42);
    req.max_new_tokens = 64;
    req.pipeline = &pipeline;
    req.budget = BudgetSpec{BudgetSpec::Unit::kStored, 128};
    req.decode_probe = [](const LayerEvent&, int64_t) {};  // per-layer observation: eager steps
    const GenerateResult eager = generate(engine, req);
    req.decode_probe = nullptr;
    const GenerateResult graphed = generate(engine, req);
    EXPECT_FALSE(eager.decode_graph) << spec << question;
    EXPECT_TRUE(graphed.decode_graph) << spec << question;
    EXPECT_EQ(eager.output_ids, graphed.output_ids) << spec << question;
    EXPECT_EQ(eager.bytes_read, graphed.bytes_read) << spec << question;  // the cache stays at its cap
  }
}

TEST_F(CudaDecodeGraph, SparkOnTheGpuMatchesTheCpuPath) {
  // SPARK's keys (and with value_ratio its values) are stored compactly in the cache on both
  // devices (the same bytes allocated). The GPU decode reads the compact layout in one kernel inside
  // the graph; the CPU path recovers head by head (spark.cpp). fp32 on both: same greedy tokens.
  PolicyRegistry reg;
  register_builtin_policies(reg);
  for (const char* spec : {"snapkv+spark", "snapkv+spark:value_ratio=0.5", "snapkv+think", "snapkv+spark:mode=g"}) {
    SCOPED_TRACE(spec);
    const Pipeline pipeline(reg, spec);
    std::vector<std::vector<int32_t>> outputs;
    std::vector<std::vector<int64_t>> bytes;
    std::vector<int64_t> allocated;
    for (const char* dev : {"cpu", "cuda:0"}) {
      const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device(dev), at::kFloat, {}});
      const Engine engine(model);
      GenerateRequest req;
      req.prompt_ids = random_ids(900, model.config.vocab_size, 31);
      req.max_new_tokens = 16;
      req.pipeline = &pipeline;
      req.budget = BudgetSpec{BudgetSpec::Unit::kStored, 256};
      const GenerateResult r = generate(engine, req);
      outputs.push_back(r.output_ids);
      bytes.push_back(r.bytes_read);
      allocated.push_back(r.cache_bytes_allocated);
      if (std::string(dev) != "cpu") EXPECT_TRUE(r.decode_graph);
    }
    EXPECT_EQ(outputs[0], outputs[1]);
    EXPECT_EQ(bytes[0], bytes[1]);
    EXPECT_EQ(allocated[0], allocated[1]);
  }
}

/// One greedy generation of `spec` on `dev` in fp32 (decode probe: eager steps).
GenerateResult stacked_run(const PolicyRegistry& reg, const std::string& spec, const char* dev, bool probe) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device(dev), at::kFloat, {}});
  const Engine engine(model);
  const Pipeline pipeline(reg, spec);
  GenerateRequest req;
  req.prompt_ids = random_ids(1500, model.config.vocab_size, 23);
  req.max_new_tokens = 24;
  req.pipeline = &pipeline;
  req.budget = BudgetSpec{BudgetSpec::Unit::kFetched, 256};
  if (probe) req.decode_probe = [](const LayerEvent&, int64_t) {};
  return generate(engine, req);
}

TEST_F(CudaDecodeGraph, SelectionOverCompactKeysGraphMatchesTheEagerKernels) {
  // Channel pruning stacked under a page selection (StackedDecode) runs fused and in the CUDA
  // graph: the eager steps (a decode probe) run the same kernels, so the greedy tokens agree, and
  // the bytes per step agree too: the eager count comes from the recorded selection on the host,
  // the graph's from the compact rows the kernel counted. Stored compactly, the selected rows cost
  // less than the selection alone reads.
  PolicyRegistry reg;
  register_builtin_policies(reg);
  const GenerateResult quest = stacked_run(reg, "quest", "cuda:0", false);
  for (const char* spec : {"spark+quest", "rocketkv+spark", "think+quest", "spark:value_ratio=0.5+hsa"}) {
    SCOPED_TRACE(spec);
    const GenerateResult eager = stacked_run(reg, spec, "cuda:0", true);
    const GenerateResult graphed = stacked_run(reg, spec, "cuda:0", false);
    EXPECT_FALSE(eager.decode_graph);
    EXPECT_TRUE(graphed.decode_graph);
    EXPECT_EQ(eager.output_ids, graphed.output_ids);
    EXPECT_EQ(eager.bytes_read, graphed.bytes_read);
    ASSERT_FALSE(graphed.bytes_read.empty());
    if (std::string(spec).find("quest") != std::string::npos)
      EXPECT_LT(graphed.bytes_read.back(), quest.bytes_read.back());
  }
}

TEST_F(CudaDecodeGraph, SelectionOverCompactKeysOnTheGpuMatchesTheCpuPath) {
  // The CPU path scores pages of the recovered keys with LibTorch and attends head by head
  // (stacked_decode.cpp); the GPU graph runs page_select and the compact-key kernel. fp32 on both:
  // the same greedy tokens, as for the selections alone (the first two). Bytes per step (the rows
  // each head reads: Quest's emitted pages, HSA's k2 rows) agree up to near-tie swaps at the
  // boundary page, each trading a compact row for a dense one (~110 bytes here; 0.1% allows 16).
  PolicyRegistry reg;
  register_builtin_policies(reg);
  for (const char* spec : {"quest", "rocketkv", "spark+quest", "rocketkv+spark"}) {
    SCOPED_TRACE(spec);
    const GenerateResult cpu = stacked_run(reg, spec, "cpu", false);
    const GenerateResult gpu = stacked_run(reg, spec, "cuda:0", false);
    EXPECT_TRUE(gpu.decode_graph);
    EXPECT_EQ(cpu.output_ids, gpu.output_ids);
    ASSERT_EQ(cpu.bytes_read.size(), gpu.bytes_read.size());
    for (size_t i = 0; i < cpu.bytes_read.size(); ++i)
      EXPECT_NEAR(double(cpu.bytes_read[i]), double(gpu.bytes_read[i]), 1e-3 * double(gpu.bytes_read[i]))
          << "step " << i;
  }
}

TEST_F(CudaDecodeGraph, RefusesACacheWithoutRoom) {
  const Model model = load_model(test::pycode_dir(), LoadOptions{c10::Device("cuda:0"), at::kBFloat16, {}});
  const Engine engine(model);
  KvCache cache = engine.new_cache(16);
  engine.prefill(cache, random_ids(16, model.config.vocab_size, 1));
  EXPECT_FALSE(DecodeGraph::supported(engine, cache, 1));
  EXPECT_THROW(DecodeGraph(engine, cache), std::runtime_error);
}

}  // namespace
}  // namespace kvscope
