// Streaming heads (a head pattern's ring buffers) under SparQ with its mean-value term, sparq:mean=true.
// A streaming head's ring overwrites its oldest non-sink row in place once full, so its length stops
// changing while its rows do: a running sum of the values kept up to date by length (SparQ's v̄)
// would still hold values that are no longer in the cache. The rule (the one PagedSelectionBase in
// decode_selection.h adopts for quest and hsa): streaming heads attend densely over their sinks +
// window, with no selection and no side state; retrieval heads run SparQ as defined (Ribar et al.
// 2024, Alg. 1; docs/methods.md §7.9), v̄ being the mean of the head's current values. Checked at
// every decode step against a brute-force SparQ recomputed in fp64 from the cache's current rows:
// (a) on a synthetic cache (one ring filling up then wrapping, one growing dense head, G = 2, r from
//     the budget), with the bytes read and the side store;
// (b) end to end through generate() on pycode-16m with a mixed pattern (rings full after the prefill,
//     rings filling during decode, a layer of two rings, an all-dense layer) for a few hundred steps.
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
#include "pycode_fixture.h"
#include "small_config.h"
#include "test_support.h"
#include "topk_reference.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;
using test::attention;
using test::to_vec;
using test::top_k_error;

/// SparQ (Alg. 1, GQA-aware as sparq.cpp) for KV head h of layer l, recomputed in fp64 from the
/// cache's current rows: the r channels of the largest Σ_g |q_g| (chosen in fp32, as the policy
/// does, so a near tie cannot flip them), π̂_g = softmax(q̂_g · K̂ᵀ / sqrt(D · Σ|q̂_g| / Σ|q_g|)).
struct SparqRef {
  at::Tensor pi;               // fp64 [G, N]
  std::vector<double> weight;  // Σ_g π̂_{g,i}: the token scores top-k selects on
};

SparqRef sparq_ref(const KvCache& cache, int64_t l, int64_t h, const at::Tensor& q, int64_t G, int64_t r) {
  const at::Tensor qf = q.narrow(0, h * G, G).to(at::kFloat);
  const at::Tensor i1 = std::get<1>(qf.abs().sum(0).topk(r));
  const at::Tensor qg = qf.to(at::kDouble);  // [G, D]
  const at::Tensor qhat = qg.index_select(1, i1);
  const at::Tensor khat = cache.head_keys(l, h).to(at::kCPU, at::kDouble).index_select(1, i1);  // [N, r]
  const at::Tensor scale = (qhat.abs().sum(1, true) / qg.abs().sum(1, true) * static_cast<double>(q.size(1))).sqrt();
  SparqRef out;
  out.pi = at::softmax(at::matmul(qhat, khat.t()) / scale, 1);
  const at::Tensor w = out.pi.sum(0).contiguous();
  out.weight.assign(w.data_ptr<double>(), w.data_ptr<double>() + w.numel());
  return out;
}

/// What one decode step of one layer checks, for sparq:mean=true that just attended layer l.
struct StepCheck {
  int64_t t, k;  // the token budget and the tokens attended per group
  int64_t steps = 0, ring_steps = 0, ring_wrapped = 0, sparq_steps = 0, bad_selection = 0, bad_output = 0,
          bad_bytes = 0;
  std::string first_selection, first_output, first_bytes;

  void run(DecodeAttentionPolicy& p, const KvCache& cache, int64_t l, const at::Tensor& q_step, int64_t step) {
    ++steps;
    const int64_t Hkv = cache.n_head_kv(), G = q_step.size(0) / Hkv, D = q_step.size(1);
    const auto first = p.last_selection();
    ASSERT_EQ(static_cast<int64_t>(first.size()), Hkv) << "run() follows the step's attend()";
    // Again: the same step, now checkable (the references run on the host, in fp64).
    const at::Tensor y = p.attend(l, q_step, cache).to(at::kCPU, at::kDouble);
    const at::Tensor q = q_step.cpu();
    const auto sel = p.last_selection();
    const LayerKv& kv = cache.layer(l);
    const int64_t item = kv.k.element_size(), row_bytes = 2 * D * item;
    const std::string where = "step " + std::to_string(step) + " layer " + std::to_string(l) + " head ";
    int64_t want_bytes = 0;
    for (int64_t h = 0; h < Hkv; ++h) {
      const int64_t N = kv.length[h];
      const bool ring = kv.ring(h);
      const std::string head = where + std::to_string(h) + (ring ? " (ring)" : "");
      if (ring) {
        ++ring_steps;
        const auto pos = to_vec(cache.head_positions(l, h));
        ring_wrapped += std::is_sorted(pos.begin(), pos.end()) ? 0 : 1;  // a row overwritten in place
      }
      ASSERT_EQ(sel[h].size(0), 1) << "one selection per KV group";
      const auto rows = to_vec(sel[h][0]);
      EXPECT_EQ(rows, to_vec(first[h][0])) << head << ": attend() again selected other rows";
      // A streaming head, or a head with no more than k rows: every row, exact attention, no v̄.
      const bool dense = ring || k >= N;
      std::string err;
      SparqRef ref;
      int64_t r = 0;
      if (dense) {
        std::vector<int64_t> all(N);
        for (int64_t i = 0; i < N; ++i) all[i] = i;
        if (rows != all) err = "reads " + std::to_string(rows.size()) + " of its " + std::to_string(N) + " rows";
        want_bytes += N * row_bytes;
      } else {
        ++sparq_steps;
        r = std::clamp<int64_t>(2 * D * std::max<int64_t>(0, t - k) / N, 1, D);
        ref = sparq_ref(cache, l, h, q, G, r);
        err = top_k_error(ref.weight, rows, k, 1e-6);
        want_bytes += N * r * item + k * row_bytes + D * 4;  // r key channels of every row, k rows, v̄
      }
      if (!err.empty()) {
        if (first_selection.empty()) first_selection = head + ": " + err;
        ++bad_selection;
        continue;
      }
      const at::Tensor vbar = cache.head_values(l, h).to(at::kCPU, at::kDouble).mean(0);  // the current rows
      for (int64_t g = 0; g < G; ++g) {
        const int64_t hq = h * G + g;
        at::Tensor want = attention(cache, l, q, hq, G, rows);
        if (!dense) {
          const double alpha = ref.pi[g].index_select(0, at::tensor(rows, at::kLong)).sum().item<double>();
          want = alpha * want + (1 - alpha) * vbar;
        }
        const double d = (y[hq] - want).abs().max().item<double>();
        if (d > 1e-4) {
          if (first_output.empty())
            first_output = head + ", query head " + std::to_string(hq) + ": |dy| " + std::to_string(d);
          ++bad_output;
        }
      }
    }
    if (const int64_t b = p.bytes_read_last(); b != want_bytes) {
      if (first_bytes.empty())
        first_bytes =
            where.substr(0, where.size() - 6) + ": " + std::to_string(b) + " bytes, want " + std::to_string(want_bytes);
      ++bad_bytes;
    }
  }

  void expect_clean(int64_t min_ring_steps) const {
    EXPECT_GT(steps, 0);
    EXPECT_GT(sparq_steps, 0) << "no retrieval head ran SparQ";
    EXPECT_GE(ring_steps, min_ring_steps);
    EXPECT_GT(ring_wrapped, 0) << "no ring buffer wrapped: the test did not reach the in-place overwrites";
    EXPECT_EQ(bad_selection, 0) << "selections off their definition; first: " << first_selection;
    EXPECT_EQ(bad_output, 0) << "outputs off the brute-force SparQ / exact attention; first: " << first_output;
    EXPECT_EQ(bad_bytes, 0) << "bytes read off the count; first: " << first_bytes;
    std::printf(
        "sparq:mean=true: %lld layer steps, %lld SparQ head-steps, %lld ring head-steps (%lld wrapped); bad "
        "selections %lld, bad outputs %lld, bad byte counts %lld\n",
        static_cast<long long>(steps), static_cast<long long>(sparq_steps), static_cast<long long>(ring_steps),
        static_cast<long long>(ring_wrapped), static_cast<long long>(bad_selection), static_cast<long long>(bad_output),
        static_cast<long long>(bad_bytes));
  }
};

// ---- (a) synthetic cache ---------------------------------------------------------------------------

/// KV head 0 streams (3 sinks + a window of 10; 7 prompt rows kept, so it fills, then wraps five
/// times); KV head 1 keeps everything. G = 2, D = 16; t = 16 and k = 5, so the ring (13 rows) would
/// be selected from, and r = clamp(floor(2·D·(t - k)/N), 1, D) runs from 16 down to 4 on the dense head.
TEST(SparqRing, RingHeadsOnASyntheticCache) {
  const int64_t D = 16;
  const ModelConfig cfg = test::small_config(1, 2, 2, D);
  KvCache cache(cfg, 8, at::kCPU, at::kFloat);
  at::Generator gen = at::detail::createCPUGenerator(21);
  auto randn = [&](at::IntArrayRef shape) { return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)); };
  auto append = [&](int64_t n) {
    const int64_t p = cache.next_position();
    // Values with a head-wide offset that drifts, so a stale v̄ shows in the output.
    cache.append(0, randn({2, n, D}) * 2.0, randn({2, n, D}) + 0.1 * static_cast<double>(p),
                 at::arange(p, p + n, at::kLong));
    cache.advance_position(n);
  };
  append(20);
  PolicyRegistry reg;
  register_builtin_policies(reg);
  auto policy = reg.make("sparq", {{"k", "5"}, {"mean", "true"}});
  auto& sparq = dynamic_cast<DecodeAttentionPolicy&>(*policy);
  sparq.configure(RunBudget{BudgetSpec{BudgetSpec::Unit::kFetched, 16}, 20, 60}, cfg);
  // The side store is built before the head turns into a ring (as a pattern applied after the
  // policy saw the prefill would leave it): it must drop that head at the next step.
  sparq.on_prefill(0, LayerPrefill{cfg, 0, at::Tensor(), at::Tensor(), at::Tensor()}, cache);
  cache.retain(0, {at::tensor({0, 1, 2, 16, 17, 18, 19}, at::kLong), at::arange(20, at::kLong)},
               std::vector<int64_t>{6, 64});
  cache.set_window(0, 0, 3, 10);
  StepCheck check{16, 5};
  for (int64_t step = 1; step <= 56; ++step) {
    append(1);
    const at::Tensor q = randn({4, D});
    sparq.attend(0, q, cache);  // the step, as the engine runs it
    check.run(sparq, cache, 0, q, step);
  }
  EXPECT_EQ(cache.layer(0).length, (std::vector<int64_t>{13, 76}));
  check.expect_clean(56);
  // v̄ is kept for the retrieval head only: a ring has no side state.
  EXPECT_EQ(sparq.side_store_bytes(), D * 4);
}

// ---- (b) end to end --------------------------------------------------------------------------------

class SparqRingModel : public test::PycodeSuite {};

TEST_F(SparqRingModel, OutputsFollowTheCacheEveryStep) {
  const fs::path f = fs::temp_directory_path() / ("kvscope_sparq_ring_" + std::to_string(::getpid()) + ".json");
  save_head_pattern(f, test::mixed_ring_pattern());
  const int64_t n_new = 240;
  const Pipeline pipeline(*registry_, "heads:pattern=" + f.string() + "+sparq:mean=true");
  DecodeAttentionPolicy* policy = pipeline.decode_attention();
  ASSERT_NE(policy, nullptr);
  StepCheck check{32, 16};  // t = 32 fetched, k = t/2; r = floor(2·64·16/N) from 32 down to 6
  GenerateRequest req;
  req.prompt_ids = textwrap_ids();
  req.prompt_ids.resize(64);
  req.max_new_tokens = n_new;
  req.sampling.greedy = false;  // sampled: varied keys over a long run
  req.sampling.seed = 5;
  req.pipeline = &pipeline;
  req.budget = BudgetSpec{BudgetSpec::Unit::kFetched, 32};
  req.decode_probe = [&](const LayerEvent& ev, int64_t step) { check.run(*policy, ev.cache, ev.layer, ev.q[0], step); };
  const GenerateResult r = generate(Engine(*model_), req);
  ASSERT_EQ(r.decode_steps, n_new - 1);
  // 9 streaming heads, each checked at every decode step.
  check.expect_clean(9 * (n_new - 1));
  // v̄ for the 7 retrieval heads only (fp32 rows of D = 64).
  EXPECT_EQ(policy->side_store_bytes(), 7 * 64 * 4);
  fs::remove(f);
}

}  // namespace
}  // namespace kvscope
