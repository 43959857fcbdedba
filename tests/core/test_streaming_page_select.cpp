// Streaming heads (a head pattern's ring buffers) under the page-summary selection stages, quest and
// hsa (issue 33 item 7). A streaming head's ring overwrites its oldest non-sink row in place once
// full, so its length stops changing while its rows do: page min/max kept incrementally by length
// would describe keys that are no longer in the cache. The rule (PagedSelectionBase, decode_selection.h):
// streaming heads attend densely over their sinks + window, retrieval heads select pages, and the
// page store never summarises a ring. Checked at every decode step against the cache's current rows:
// (a) on a synthetic cache (one ring filling up then wrapping, one growing dense head, G = 2), on
//     the CPU and, where there is one, on a GPU with D = 64, where the fused page kernels would fit
//     and must be left for a layer that holds a ring (they select every head of the layer);
// (b) end to end through generate() on pycode-16m with a mixed pattern (rings full after the prefill,
//     rings filling during decode, a layer of two rings, an all-dense layer) for a few hundred steps:
//     every page the store keeps equals the min/max of its current rows, retrieval heads select a
//     top-n of the page (quest) or token (hsa) scores recomputed from those rows, streaming heads
//     read every row, and each output is the exact attention over the rows read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "cache_reference.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/kv_cache.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "ops/cuda_ops.h"
#include "page_summary_reference.h"
#include "policies/decode_selection.h"
#include "pycode_fixture.h"
#include "small_config.h"
#include "test_support.h"
#include "topk_reference.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using policies::PagedSelectionBase;
using policies::PageMinMax;
using test::attention;
using test::make_paged;
using test::page_bounds;
using test::stale_pages;
using test::to_vec;
using test::top_k_error;

/// Quest's group-accumulated page scores U[P] = Σ_g Σ_j max(q_gj·Kmax_Pj, q_gj·Kmin_Pj) (fp64) from
/// the current rows of (l, h).
std::vector<double> quest_scores(const KvCache& cache, int64_t l, int64_t h, const at::Tensor& q, int64_t G,
                                 int64_t page) {
  const auto [mn, mx] = page_bounds(cache, l, h, page);
  const at::Tensor qg = q.narrow(0, h * G, G).to(at::kDouble);  // [G, D]
  const at::Tensor u = (at::matmul(qg.clamp_min(0), mx.t()) + at::matmul(qg.clamp_max(0), mn.t())).sum(0);
  return {u.data_ptr<double>(), u.data_ptr<double>() + u.numel()};
}

/// HSA's token weights Σ_g π̂_{g,i} (RocketKV Alg. 1; fp64) from the current rows of (l, h).
std::vector<double> hsa_scores(const KvCache& cache, int64_t l, int64_t h, const at::Tensor& q, int64_t G, int64_t page,
                               int64_t k1) {
  const auto [mn, mx] = page_bounds(cache, l, h, page);
  const at::Tensor qg = q.narrow(0, h * G, G).to(at::kDouble);  // [G, D]
  const int64_t N = cache.layer(l).length[h], D = q.size(1);
  const at::Tensor i1 = std::get<1>(qg.abs().sum(0).topk(k1));
  const at::Tensor qhat = qg.index_select(1, i1);                                                        // [G, k1]
  const at::Tensor khat = at::where(qhat.sum(0).ge(0), mx.index_select(1, i1), mn.index_select(1, i1));  // [P, k1]
  at::Tensor s = at::matmul(qhat, khat.t()).repeat_interleave(page, 1).narrow(1, 0, N);                  // [G, N]
  const at::Tensor scale = (qhat.abs().sum(1, true) / qg.abs().sum(1, true) * static_cast<double>(D)).sqrt();
  const at::Tensor total = at::softmax(s / scale, 1).sum(0).contiguous();
  return {total.data_ptr<double>(), total.data_ptr<double>() + total.numel()};
}

/// What one decode step of one layer checks, for a paged policy `p` that just attended layer l.
struct StepCheck {
  bool quest;  // else hsa
  int64_t page, keep, k1;
  int64_t steps = 0, stale = 0, bad_selection = 0, bad_output = 0, ring_steps = 0, ring_wrapped = 0;
  std::string first_stale, first_selection, first_output;

  void run(PagedSelectionBase& p, const KvCache& cache, int64_t l, const at::Tensor& q_step, int64_t step) {
    ++steps;
    const int64_t Hkv = cache.n_head_kv(), G = q_step.size(0) / Hkv;
    const auto first = p.last_selection();
    ASSERT_EQ(static_cast<int64_t>(first.size()), Hkv) << "run() follows the step's attend()";
    // Again: the same step, now checkable (the references run on the host, in fp64).
    const at::Tensor y = p.attend(l, q_step, cache).to(at::kCPU, at::kDouble);
    const at::Tensor q = q_step.cpu();
    const auto sel = p.last_selection();
    const LayerKv& kv = cache.layer(l);
    const std::string where = "step " + std::to_string(step) + " layer " + std::to_string(l) + " head ";
    for (int64_t h = 0; h < Hkv; ++h) {
      const int64_t N = kv.length[h];
      const bool ring = kv.ring_window[h] > 0;
      if (ring) {
        ++ring_steps;
        const auto pos = to_vec(cache.head_positions(l, h));
        ring_wrapped += std::is_sorted(pos.begin(), pos.end()) ? 0 : 1;  // a row overwritten in place
      }
      if (const int64_t s = stale_pages(p.page_summaries(), cache, l, h); s > 0) {
        if (first_stale.empty())
          first_stale = where + std::to_string(h) + (ring ? " (ring)" : "") + ": " + std::to_string(s) + " of " +
                        std::to_string(p.page_summaries().n_pages(l, h)) + " pages stale";
        stale += s;
      }
      ASSERT_EQ(sel[h].size(0), 1) << "one selection per KV group";
      const auto rows = to_vec(sel[h][0]);
      EXPECT_EQ(rows, to_vec(first[h][0])) << where << h << ": attend() again selected other rows";
      std::string err;
      if (ring) {  // a streaming head reads its whole ring (DuoAttention's streaming attention)
        std::vector<int64_t> all(N);
        for (int64_t i = 0; i < N; ++i) all[i] = i;
        if (rows != all) err = "reads " + std::to_string(rows.size()) + " of its " + std::to_string(N) + " ring rows";
      } else if (p.page_summaries().n_pages(l, h) != (N + page - 1) / page) {
        err = "has " + std::to_string(p.page_summaries().n_pages(l, h)) + " pages for " + std::to_string(N) + " rows";
      } else if (quest) {
        const int64_t n_pages = (N + page - 1) / page;
        std::vector<int64_t> pages;
        for (int64_t r : rows)
          if (pages.empty() || pages.back() != r / page) pages.push_back(r / page);
        int64_t whole = 0;
        for (int64_t pg : pages) whole += std::min(page, N - pg * page);
        if (whole != static_cast<int64_t>(rows.size())) err = "reads part of a page";
        const auto u = quest_scores(cache, l, h, q, G, page);
        double scale = 1;
        for (double x : u) scale = std::max(scale, std::abs(x));
        if (err.empty()) err = top_k_error(u, pages, std::min(keep, n_pages), 1e-5 * scale);
      } else {
        err = top_k_error(hsa_scores(cache, l, h, q, G, page, k1), rows, keep, 1e-6);
      }
      if (!err.empty()) {
        if (first_selection.empty()) first_selection = where + std::to_string(h) + (ring ? " (ring) " : " ") + err;
        ++bad_selection;
      }
      for (int64_t g = 0; g < G && !rows.empty(); ++g) {
        const int64_t hq = h * G + g;
        const double d = (y[hq] - attention(cache, l, q, hq, G, rows)).abs().max().item<double>();
        if (d > 1e-4) {
          if (first_output.empty())
            first_output =
                where + std::to_string(h) + ", query head " + std::to_string(hq) + ": |dy| " + std::to_string(d);
          ++bad_output;
        }
      }
    }
  }

  void expect_clean(int64_t min_ring_steps) const {
    EXPECT_GT(steps, 0);
    EXPECT_GE(ring_steps, min_ring_steps);
    EXPECT_GT(ring_wrapped, 0) << "no ring buffer wrapped: the test did not reach the in-place overwrites";
    EXPECT_EQ(stale, 0) << "stale summary pages; first: " << first_stale;
    EXPECT_EQ(bad_selection, 0) << "selections off their definition; first: " << first_selection;
    EXPECT_EQ(bad_output, 0) << "outputs off the exact attention over the rows read; first: " << first_output;
    std::printf(
        "%s: %lld layer steps, %lld ring head-steps (%lld wrapped); stale pages %lld, bad selections %lld, "
        "bad outputs %lld\n",
        quest ? "quest" : "hsa", static_cast<long long>(steps), static_cast<long long>(ring_steps),
        static_cast<long long>(ring_wrapped), static_cast<long long>(stale), static_cast<long long>(bad_selection),
        static_cast<long long>(bad_output));
  }
};

// ---- (a) synthetic cache ---------------------------------------------------------------------------

/// KV head 0 streams (3 sinks + a window of 10; 7 prompt rows kept, so it fills, then wraps five
/// times); KV head 1 keeps everything. G = 2, pages of 4 (the sinks end inside page 0). On CUDA
/// with D = 64 the fused page kernels would fit: the layer must still step through the rule.
void ring_heads_on_a_synthetic_cache(c10::Device device, int64_t D) {
  const ModelConfig cfg = test::small_config(1, 2, 2, D);
  for (const bool quest : {true, false}) {
    SCOPED_TRACE(quest ? "quest" : "hsa");
    KvCache cache(cfg, 8, device, at::kFloat);
    at::Generator gen = at::detail::createCPUGenerator(quest ? 11 : 12);
    auto randn = [&](at::IntArrayRef shape) {
      return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(device);
    };
    auto append = [&](int64_t n) {
      const int64_t p = cache.next_position();
      cache.append(0, randn({2, n, D}) * 2.0, randn({2, n, D}), at::arange(p, p + n, at::kLong).to(device));
      cache.advance_position(n);
    };
    append(20);
    cache.retain(0, {at::tensor({0, 1, 2, 16, 17, 18, 19}, at::kLong), at::arange(20, at::kLong)},
                 std::vector<int64_t>{6, 64});
    cache.set_window(0, 0, 3, 10);
    auto policy = quest ? make_paged("quest", {{"page", "4"}, {"k", "8"}})
                        : make_paged("hsa", {{"stage1", "false"}, {"page", "4"}, {"k1", "6"}, {"k2", "5"}});
    policy->configure(RunBudget{BudgetSpec{BudgetSpec::Unit::kFetched, 16}, 20, 60}, cfg);
    policy->on_prefill(0, LayerPrefill{cfg, 0, at::Tensor(), at::Tensor(), at::Tensor()}, cache);
    StepCheck check{quest, 4, quest ? 2 : 5, 6};
    const int64_t row_bytes = 2 * D * 4;  // fp32 K and V
    for (int64_t step = 1; step <= 56; ++step) {
      append(1);
      const at::Tensor q = randn({4, D});
      policy->attend(0, q, cache);  // the step, as the engine runs it
      if (!quest) {                 // the ring's every row; the dense head: pages x k1 bounds + k2 rows
        const int64_t ring = cache.layer(0).length[0], dense = cache.layer(0).length[1];
        EXPECT_EQ(policy->bytes_read_last(), ring * row_bytes + (dense + 3) / 4 * 6 * 4 + 5 * row_bytes);
      }
      check.run(*policy, cache, 0, q, step);
    }
    EXPECT_EQ(cache.layer(0).length, (std::vector<int64_t>{13, 76}));
    check.expect_clean(56);
    // The side store holds the dense head's pages only: a ring is never summarised.
    EXPECT_EQ(policy->page_summaries().n_pages(0, 0), 0);
    EXPECT_EQ(policy->side_store_bytes(), 19 * row_bytes);
  }
}

TEST(StreamingPageSelect, RingHeadsOnASyntheticCache) { ring_heads_on_a_synthetic_cache(at::kCPU, 16); }

TEST(StreamingPageSelect, RingHeadsOnTheGpuLeaveTheFusedKernels) {
  if (!ops::cuda_kernels_available()) GTEST_SKIP() << "built without the CUDA kernels";
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  ring_heads_on_a_synthetic_cache(c10::Device(c10::kCUDA, 0), 64);
}

// ---- (b) end to end --------------------------------------------------------------------------------

class StreamingPageSelectModel : public test::PycodeSuite {};

TEST_F(StreamingPageSelectModel, SummariesSelectionsAndOutputsFollowTheCacheEveryStep) {
  const fs::path f = fs::temp_directory_path() / ("kvscope_streaming_pages_" + std::to_string(::getpid()) + ".json");
  save_head_pattern(f, test::mixed_ring_pattern());
  const int64_t n_new = 240;
  struct Case {
    std::string stage;
    StepCheck check;
  };
  std::vector<Case> cases = {
      {"quest:page=4,k=16", StepCheck{true, 4, 4, 0}},  // 4 pages of 4
      {"hsa:stage1=false,page=3,k1=16,k2=12", StepCheck{false, 3, 12, 16}},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.stage);
    const Pipeline pipeline(*registry_, "heads:pattern=" + f.string() + "+" + c.stage);
    auto* policy = dynamic_cast<PagedSelectionBase*>(pipeline.decode_attention());
    ASSERT_NE(policy, nullptr);
    GenerateRequest req;
    req.prompt_ids = textwrap_ids();
    req.prompt_ids.resize(64);
    req.max_new_tokens = n_new;
    req.sampling.greedy = false;  // sampled: varied keys over a long run
    req.sampling.seed = 5;
    req.pipeline = &pipeline;
    req.budget = BudgetSpec{BudgetSpec::Unit::kFetched, 32};
    req.decode_probe = [&](const LayerEvent& ev, int64_t step) {
      c.check.run(*policy, ev.cache, ev.layer, ev.q[0], step);
      // D = 64, G = 3 fit the page kernels, but a CUDA graph's step would select inside the rings.
      if (step == 1 && ev.layer == 0) EXPECT_FALSE(policy->prepare_graph(ev.cache, 8));
    };
    const GenerateResult r = generate(Engine(*model_), req);
    ASSERT_EQ(r.decode_steps, n_new - 1);
    // 9 streaming heads, each checked at every decode step.
    c.check.expect_clean(9 * (n_new - 1));
  }
  fs::remove(f);
}

}  // namespace
}  // namespace kvscope
