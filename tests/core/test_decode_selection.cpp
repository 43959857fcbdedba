// S5 decode-time selection (hsa, quest, sparq, exacttopk) and RocketKV's budget decomposition:
// (a) rocketkv_split reproduces the worked examples of docs/methods.md §1.2 and the paper's c = 64
//     example (RocketKV §3.6);
// (b) with a budget that covers every entry, attend() equals dense fp32 attention (lengths 1, 37,
//     300; GQA groups 1 and 3; uniform and ragged heads);
// (c) small budgets: each policy's selection equals a brute-force computation of its formula
//     (exacttopk: per-head true top-k; hsa with p = 1, k1 = D: group Exact-TopK of the summed
//     softmax; hsa / quest / sparq in general: page bounds recomputed from the raw keys), after
//     decode appends that update the side stores incrementally;
// (d) end to end through generate() on pycode-16m with the RocketKV pipeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/kv_cache.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policies/rocketkv_budget.h"
#include "kvscope/core/policy.h"
#include "policies/decode_selection.h"
#include "small_config.h"
#include "test_support.h"
#include "topk_reference.h"

namespace kvscope {
namespace {

using policies::DecodeSelectionBase;
using policies::rocketkv_split;

// ---- (a) budget decomposition --------------------------------------------------------------------

struct SplitRow {
  int64_t S, t;
  double c, r, stage1;
  int64_t C, page, k1, k2;
  double storage;
};

TEST(RocketKvSplit, WorkedExamplesOfMethodsTable) {
  // docs/methods.md §1.2 (D = 128). "8K" = 8192 and "32K" = 32768 tokens; "109K" is S = 426·256 = 109056
  // (c = 426; 109·1024 = 111616 would give C = 1352). S counts prompt + generated tokens; n_gen only
  // matters through the floor min(2·n_gen, S), inactive here, so P = C - n_gen for any n_gen <= C/2.
  const SplitRow rows[] = {
      {8192, 256, 32, 0.50, 5.7, 1448, 3, 67, 128, 0.33},
      {32768, 256, 128, 0.62, 20.3, 1618, 3, 60, 128, 0.089},
      {32768, 4096, 8, 0.38, 2.2, 14868, 2, 70, 2048, 0.93},
      {109056, 256, 426, 0.72, 80, 1360, 3, 72, 128, 0.023},
  };
  for (const auto& row : rows) {
    for (int64_t n_gen : {0, 1, 128, 512}) {
      SCOPED_TRACE("S=" + std::to_string(row.S) + " t=" + std::to_string(row.t) + " n_gen=" + std::to_string(n_gen));
      const auto s = rocketkv_split(row.S, row.t, 128, n_gen);
      EXPECT_NEAR(s.c, row.c, 0.5);
      EXPECT_NEAR(s.r, row.r, 0.005);
      EXPECT_NEAR(s.stage1_ratio, row.stage1, 0.05 * row.stage1);
      EXPECT_EQ(s.capacity, row.C);
      EXPECT_EQ(s.prompt_keep, row.C - n_gen);
      EXPECT_EQ(s.page, row.page);
      EXPECT_EQ(s.k1, row.k1);
      EXPECT_EQ(s.k2, row.k2);
      EXPECT_NEAR(s.storage_rel, row.storage, 0.006);
    }
  }
  // 109,000 tokens give the same row.
  const auto s = rocketkv_split(109000, 256, 128, 128);
  EXPECT_EQ(s.capacity, 1360);
  EXPECT_EQ(s.k1, 72);
}

TEST(RocketKvSplit, PapersC64Example) {
  // RocketKV §3.6: c = 64 -> r = 0.56, stage 1 10.3x, stage 2 6.2x, page 3, 2.1x along the head dim.
  const auto s = rocketkv_split(64 * 256, 256, 128, 0);
  EXPECT_DOUBLE_EQ(s.c, 64.0);
  EXPECT_NEAR(s.r, 0.56, 1e-12);
  EXPECT_NEAR(s.stage1_ratio, 10.3, 0.05);
  EXPECT_NEAR(s.stage2_ratio, 6.2, 0.05);
  EXPECT_EQ(s.page, 3);
  EXPECT_NEAR(s.c2 / static_cast<double>(s.page), 2.1, 0.05);
  EXPECT_EQ(s.k1, 61);  // trunc(128 · 3 / 6.23)
}

TEST(RocketKvSplit, EdgeCasesAndFloor) {
  // t >= S: nothing to compress.
  auto s = rocketkv_split(100, 256, 64, 10);
  EXPECT_DOUBLE_EQ(s.c, 1.0);
  EXPECT_DOUBLE_EQ(s.r, 0.2);
  EXPECT_EQ(s.capacity, 100);
  EXPECT_EQ(s.prompt_keep, 90);
  EXPECT_EQ(s.page, 1);
  EXPECT_EQ(s.k1, 64);
  // Floor at min(2·n_gen, S): a long generation keeps at least n_gen prompt entries.
  s = rocketkv_split(8192, 16, 128, 1000);
  EXPECT_EQ(s.capacity, 2000);
  EXPECT_EQ(s.prompt_keep, 1000);
  // r is capped at 0.8.
  EXPECT_DOUBLE_EQ(rocketkv_split(1 << 30, 1, 128, 0).r, 0.8);
  // HSA alone: c2 = S/t.
  const auto h = policies::hsa_split(8192, 256, 128);
  EXPECT_DOUBLE_EQ(h.c2, 32.0);
  EXPECT_EQ(h.page, 6);
  EXPECT_EQ(h.k1, 24);
  EXPECT_EQ(h.k2, 128);
  EXPECT_THROW(rocketkv_split(0, 1, 1, 0), std::invalid_argument);
  // Budget conversion.
  RunBudget b{BudgetSpec{BudgetSpec::Unit::kFetched, 256}, 100, 8};
  EXPECT_EQ(policies::decode_fetch_budget(b), 256);
  b.spec = BudgetSpec{BudgetSpec::Unit::kCompressionRatio, 0.75};
  EXPECT_EQ(policies::decode_fetch_budget(b), 25);
  b.spec = BudgetSpec{BudgetSpec::Unit::kFraction, 0.001};
  EXPECT_EQ(policies::decode_fetch_budget(b), 1);
}

// ---- helpers -------------------------------------------------------------------------------------

PolicyRegistry registry() {
  PolicyRegistry r;
  register_builtin_policies(r);
  return r;
}

ModelConfig small_config(int64_t n_head_kv, int64_t group) {
  ModelConfig c = test::small_config(2, n_head_kv, group, 16);
  c.max_position_embeddings = 1 << 20;
  return c;
}

std::unique_ptr<DecodeSelectionBase> make_policy(const std::string& name, const ParamValues& params) {
  static const PolicyRegistry reg = registry();
  auto p = reg.make(name, params);
  auto* d = dynamic_cast<DecodeSelectionBase*>(p.get());
  EXPECT_NE(d, nullptr) << name;
  p.release();
  return std::unique_ptr<DecodeSelectionBase>(d);
}

/// A cache whose layer 1 (layer 0 stays empty) gets n prompt rows per KV head, optionally made
/// ragged by KvCache::retain (head h keeps a random subset of about n·(1 - h/(2·Hkv)) rows, possibly
/// none), then single decode rows through append_one(). Random normal values; keys scaled by 2 so
/// attention is peaked.
struct TestCache {
  ModelConfig cfg;
  KvCache cache;
  at::Generator gen;
  at::ScalarType dtype;
  TestCache(const ModelConfig& c, uint64_t seed, at::ScalarType dt = at::kFloat)
      : cfg(c), cache(c, 8, at::kCPU, dt), gen(at::detail::createCPUGenerator(seed)), dtype(dt) {}
  at::Tensor randn(at::IntArrayRef shape) {
    return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
  }
  void prefill(int64_t n, bool ragged) {
    if (n > 0) {
      cache.append(1, randn({cfg.n_head_kv, n, cfg.head_dim}) * 2.0, randn({cfg.n_head_kv, n, cfg.head_dim}),
                   at::arange(n, at::kLong));
      cache.advance_position(n);
    }
    if (!ragged) return;
    std::vector<at::Tensor> kept;
    for (int64_t h = 0; h < cfg.n_head_kv; ++h) {
      const int64_t m = h == 0 ? n : std::max<int64_t>(0, n - (n * h) / (2 * cfg.n_head_kv) - h);
      at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, m);
      kept.push_back(std::get<0>(perm.sort()));
    }
    cache.retain(1, kept, 4);
  }
  void append_one() {
    const int64_t p = cache.next_position();
    cache.append(1, randn({cfg.n_head_kv, 1, cfg.head_dim}) * 2.0, randn({cfg.n_head_kv, 1, cfg.head_dim}),
                 at::full({1}, p, at::kLong));
    cache.advance_position(1);
  }
  at::Tensor query() { return randn({cfg.n_head, cfg.head_dim}); }
  LayerPrefill layer_prefill() const { return LayerPrefill{cfg, 1, at::Tensor(), at::Tensor(), at::Tensor()}; }
};

/// fp64 attention of query head hq over the rows `rows` of its KV head (all rows if empty).
at::Tensor reference_head(const KvCache& cache, const at::Tensor& q, int64_t hq, int64_t G,
                          const std::vector<int64_t>& rows = {}) {
  const int64_t h = hq / G;
  at::Tensor K = cache.head_keys(1, h).to(at::kDouble), V = cache.head_values(1, h).to(at::kDouble);
  if (!rows.empty()) {
    at::Tensor idx = at::tensor(rows, at::kLong);
    K = K.index_select(0, idx);
    V = V.index_select(0, idx);
  }
  at::Tensor s = at::mv(K, q[hq].to(at::kDouble)) / std::sqrt(static_cast<double>(q.size(1)));
  return at::mv(V.t(), at::softmax(s, 0));
}

at::Tensor reference_dense(const KvCache& cache, const at::Tensor& q, int64_t G) {
  std::vector<at::Tensor> out;
  for (int64_t hq = 0; hq < q.size(0); ++hq) out.push_back(reference_head(cache, q, hq, G));
  return at::stack(out, 0);
}

std::vector<int64_t> to_vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

using test::topk_ref;

RunBudget fetched(double t, int64_t n_prompt = 300, int64_t n_gen = 8) {
  return RunBudget{BudgetSpec{BudgetSpec::Unit::kFetched, t}, n_prompt, n_gen};
}

// ---- (b) full budget == dense attention ----------------------------------------------------------

struct DenseCase {
  std::string name;
  ParamValues params;
};

TEST(DecodeSelection, FullBudgetEqualsDenseAttention) {
  const std::vector<DenseCase> cases = {
      {"hsa", {{"k2", "100000"}}},     // t = 8 gives p, k1 > 1, but k2 covers all
      {"hsa", {{"stage1", "false"}}},  // t = 1e6 -> k2 = 5e5
      {"quest", {{"k", "100000"}, {"page", "4"}}},
      {"quest", {}},
      {"sparq", {{"k", "100000"}, {"mean", "true"}}},
      {"sparq", {{"r", "3"}}},
      {"exacttopk", {{"k", "100000"}}},
      {"exacttopk", {}},
  };
  int64_t seed = 1;
  for (const auto& pc : cases)
    for (int64_t n : {1, 37, 300})
      for (int64_t G : {1, 3})
        for (bool ragged : {false, true}) {
          SCOPED_TRACE(pc.name + " n=" + std::to_string(n) + " G=" + std::to_string(G) + (ragged ? " ragged" : ""));
          TestCache tc(small_config(2, G), ++seed);
          tc.prefill(n, ragged);
          auto policy = make_policy(pc.name, pc.params);
          const bool explicit_k = pc.params.count("k") || pc.params.count("k2");
          policy->configure(fetched(explicit_k ? 8 : 1e6, n), tc.cfg);
          policy->on_prefill(1, tc.layer_prefill(), tc.cache);
          for (int step = 0; step < 3; ++step) {
            tc.append_one();
            const at::Tensor q = tc.query();
            const at::Tensor y = policy->attend(1, q, tc.cache);
            ASSERT_EQ(y.sizes(), q.sizes());
            EXPECT_TRUE(at::allclose(y.to(at::kDouble), reference_dense(tc.cache, q, G), 1e-5, 1e-5))
                << (y.to(at::kDouble) - reference_dense(tc.cache, q, G)).abs().max().item<double>();
            // Dense: every row of every head, K and V.
            int64_t rows = 0;
            for (int64_t h = 0; h < 2; ++h) rows += tc.cache.layer(1).length[h];
            EXPECT_EQ(policy->bytes_read_last(), rows * 2 * 16 * 4);
          }
        }
}

TEST(DecodeSelection, Bf16CacheKeepsTheQueryDtype) {
  // Side stores in the cache dtype, scores and softmax in fp32, output in q's dtype.
  const std::vector<DenseCase> cases = {{"hsa", {{"k2", "9"}}},
                                        {"quest", {{"k", "9"}, {"page", "4"}}},
                                        {"sparq", {{"k", "9"}, {"mean", "true"}}},
                                        {"exacttopk", {{"k", "9"}}}};
  for (const auto& pc : cases)
    for (bool ragged : {false, true}) {
      SCOPED_TRACE(pc.name + (ragged ? " ragged" : ""));
      TestCache tc(small_config(2, 3), 900 + ragged, at::kBFloat16);
      tc.prefill(90, ragged);
      auto policy = make_policy(pc.name, pc.params);
      policy->configure(fetched(32, 90), tc.cfg);
      policy->on_prefill(1, tc.layer_prefill(), tc.cache);
      tc.append_one();
      const at::Tensor q = tc.query();
      const at::Tensor y = policy->attend(1, q, tc.cache);
      EXPECT_EQ(y.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(y.to(at::kFloat).isfinite().all().item<bool>());
      EXPECT_GT(policy->bytes_read_last(), 0);
      // bf16 side store and rows: 2 bytes per value.
      if (pc.name == "hsa" || pc.name == "quest") EXPECT_EQ(policy->side_store_bytes() % (2 * 16 * 2), 0);
    }
}

// ---- (c) small budgets: selections against brute force -------------------------------------------

/// Page-bound logits of query head hq over pages of `page` rows of its KV head, from the raw keys,
/// on channels `chan` with per-channel choice of max (sign >= 0) or min; Quest takes both bounds.
std::vector<double> page_bounds(const KvCache& cache, int64_t h, const at::Tensor& qh, int64_t page,
                                const std::vector<int64_t>& chan, const std::vector<bool>& use_max, bool quest) {
  at::Tensor K = cache.head_keys(1, h).to(at::kDouble);
  const int64_t N = K.size(0), P = (N + page - 1) / page;
  std::vector<double> out(P, 0.0);
  for (int64_t p = 0; p < P; ++p) {
    at::Tensor rows = K.narrow(0, p * page, std::min(page, N - p * page));
    at::Tensor mx = std::get<0>(rows.max(0)), mn = std::get<0>(rows.min(0));
    for (size_t c = 0; c < chan.size(); ++c) {
      const double qj = qh[chan[c]].item<double>();
      const double a = qj * mx[chan[c]].item<double>(), b = qj * mn[chan[c]].item<double>();
      out[p] += quest ? std::max(a, b) : (use_max[c] ? a : b);
    }
  }
  return out;
}

std::vector<int64_t> channels_by_group_abs(const at::Tensor& q, int64_t h, int64_t G, int64_t r) {
  at::Tensor a = q.narrow(0, h * G, G).to(at::kDouble).abs().sum(0);
  std::vector<double> x(a.data_ptr<double>(), a.data_ptr<double>() + a.numel());
  return topk_ref(x, r);
}

TEST(DecodeSelection, ExactTopKIsPerHeadTrueTopK) {
  for (int64_t G : {1, 3})
    for (bool ragged : {false, true}) {
      TestCache tc(small_config(2, G), 100 + G + ragged);
      tc.prefill(300, ragged);
      auto policy = make_policy("exacttopk", {{"k", "5"}});
      policy->configure(fetched(64), tc.cfg);
      policy->on_prefill(1, tc.layer_prefill(), tc.cache);
      tc.append_one();
      const at::Tensor q = tc.query();
      const at::Tensor y = policy->attend(1, q, tc.cache);
      const auto sel = policy->last_selection();
      ASSERT_EQ(sel.size(), 2u);
      for (int64_t hq = 0; hq < tc.cfg.n_head; ++hq) {
        const int64_t h = hq / G;
        at::Tensor s = at::mv(tc.cache.head_keys(1, h).to(at::kDouble), q[hq].to(at::kDouble));
        const auto want = topk_ref(std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + s.numel()), 5);
        EXPECT_EQ(to_vec(sel[h][hq % G]), want) << "head " << hq;
        EXPECT_TRUE(at::allclose(y[hq].to(at::kDouble), reference_head(tc.cache, q, hq, G, want), 1e-5, 1e-5));
      }
      EXPECT_EQ(policy->side_store_bytes(), 0);
      EXPECT_GT(policy->bytes_read_last(), 0);
      EXPECT_LE(policy->bytes_read_last(), 2 * G * 5 * 2 * 16 * 4);
    }
}

/// HSA's selection by brute force: channels by group-summed |q|, group sign, page bounds from the
/// raw keys, temperature, softmax over the tokens (pages repeated), group sum, top-k2.
std::vector<int64_t> hsa_reference(const KvCache& cache, const at::Tensor& q, int64_t h, int64_t G, int64_t page,
                                   int64_t k1, int64_t k2) {
  const int64_t D = q.size(1), N = cache.layer(1).length[h];
  const auto chan = channels_by_group_abs(q, h, G, k1);
  std::vector<bool> use_max;
  for (int64_t c : chan) use_max.push_back(q.narrow(0, h * G, G).select(1, c).sum().item<double>() >= 0);
  std::vector<double> total(N, 0.0);
  for (int64_t g = 0; g < G; ++g) {
    const at::Tensor qh = q[h * G + g].to(at::kDouble);
    const auto pb = page_bounds(cache, h, qh, page, chan, use_max, false);
    double sel_abs = 0;
    for (int64_t c : chan) sel_abs += std::abs(qh[c].item<double>());
    const double scale = std::sqrt(D * sel_abs / qh.abs().sum().item<double>());
    std::vector<double> s(N);
    for (int64_t i = 0; i < N; ++i) s[i] = pb[i / page] / scale;
    const double m = *std::max_element(s.begin(), s.end());
    double z = 0;
    for (double& x : s) z += (x = std::exp(x - m));
    for (int64_t i = 0; i < N; ++i) total[i] += s[i] / z;
  }
  return topk_ref(total, k2);
}

void check_shared_selection(DecodeSelectionBase& policy, TestCache& tc, int64_t G, const at::Tensor& q,
                            const at::Tensor& y, const std::function<std::vector<int64_t>(int64_t)>& want_of) {
  const auto sel = policy.last_selection();
  ASSERT_EQ(sel.size(), 2u);
  for (int64_t h = 0; h < 2; ++h) {
    const auto want = want_of(h);
    ASSERT_EQ(sel[h].size(0), 1);
    EXPECT_EQ(to_vec(sel[h][0]), want) << "kv head " << h;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t hq = h * G + g;
      EXPECT_TRUE(at::allclose(y[hq].to(at::kDouble), reference_head(tc.cache, q, hq, G, want), 1e-5, 1e-5))
          << "query head " << hq;
    }
  }
}

TEST(DecodeSelection, HsaWithPage1AndFullChannelsIsGroupExactTopK) {
  for (int64_t G : {1, 3})
    for (bool ragged : {false, true}) {
      SCOPED_TRACE("G=" + std::to_string(G) + (ragged ? " ragged" : ""));
      TestCache tc(small_config(2, G), 200 + G + ragged);
      tc.prefill(300, ragged);
      auto policy = make_policy("hsa", {{"page", "1"}, {"k1", "16"}, {"k2", "7"}});
      policy->configure(fetched(64), tc.cfg);
      policy->on_prefill(1, tc.layer_prefill(), tc.cache);
      for (int step = 0; step < 3; ++step) {
        tc.append_one();
        const at::Tensor q = tc.query();
        const at::Tensor y = policy->attend(1, q, tc.cache);
        check_shared_selection(*policy, tc, G, q, y, [&](int64_t h) {
          // Group Exact-TopK: top-k2 of Σ_g softmax(q_g K^T / sqrt(D)).
          const int64_t N = tc.cache.layer(1).length[h];
          std::vector<double> total(N, 0.0);
          for (int64_t g = 0; g < G; ++g) {
            const at::Tensor K = tc.cache.head_keys(1, h).to(at::kDouble);
            const at::Tensor p = at::softmax(at::mv(K, q[h * G + g].to(at::kDouble)) / 4.0, 0);  // sqrt(16)
            for (int64_t i = 0; i < N; ++i) total[i] += p[i].item<double>();
          }
          return topk_ref(total, 7);
        });
      }
    }
}

TEST(DecodeSelection, HsaMatchesBruteForceWithPagesAndChannels) {
  for (int64_t G : {1, 3})
    for (bool ragged : {false, true}) {
      SCOPED_TRACE("G=" + std::to_string(G) + (ragged ? " ragged" : ""));
      TestCache tc(small_config(2, G), 300 + G + ragged);
      tc.prefill(101, ragged);
      auto policy = make_policy("hsa", {{"page", "3"}, {"k1", "5"}, {"k2", "11"}});
      policy->configure(fetched(64), tc.cfg);
      policy->on_prefill(1, tc.layer_prefill(), tc.cache);
      for (int step = 0; step < 5; ++step) {  // appends cross page boundaries: incremental updates
        tc.append_one();
        const at::Tensor q = tc.query();
        const at::Tensor y = policy->attend(1, q, tc.cache);
        check_shared_selection(*policy, tc, G, q, y,
                               [&](int64_t h) { return hsa_reference(tc.cache, q, h, G, 3, 5, 11); });
        // Side store: ceil(len/3) pages of min + max; read: pages·k1 bounds + k2 K/V rows per head.
        int64_t side = 0, read = 0;
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t pages = (tc.cache.layer(1).length[h] + 2) / 3;
          side += pages * 2 * 16 * 4;
          read += pages * 5 * 4 + 11 * 2 * 16 * 4;
        }
        EXPECT_EQ(policy->side_store_bytes(), side);
        EXPECT_EQ(policy->bytes_read_last(), read);
      }
    }
}

TEST(DecodeSelection, RocketKvMtSelectionNamesFullCacheRows) {
  // rocketkv-mt decodes with HSA over a per-turn copy (the SnapKV-kept rows, then the turn's decoded
  // entries); last_selection() must name rows of the full cache attend() was given.
  static const PolicyRegistry reg = registry();
  for (int64_t G : {1, 3}) {
    SCOPED_TRACE("G=" + std::to_string(G));
    TestCache tc(small_config(2, G), 700 + G);
    tc.prefill(300, false);
    auto made = reg.make("rocketkv-mt", {{"window", "16"}, {"kernel", "5"}});
    auto* policy = dynamic_cast<DecodeAttentionPolicy*>(made.get());
    ASSERT_NE(policy, nullptr);
    policy->configure(fetched(32), tc.cfg);
    const LayerPrefill in{tc.cfg, 1, tc.randn({300, tc.cfg.n_head, tc.cfg.head_dim}), tc.cache.keys(1),
                          tc.cache.values(1)};
    policy->on_prefill(1, in, tc.cache);
    for (int step = 0; step < 3; ++step) {
      at::Tensor q = tc.query();
      if (step < 2) {
        tc.append_one();
      } else {  // every query head of a group equal, the new key far along its signs: HSA reads it
        q = q.view({2, G, 16}).select(1, 0).unsqueeze(1).expand({2, G, 16}).reshape({2 * G, 16}).contiguous();
        const at::Tensor k = q.view({2, G, 16}).select(1, 0).sign().mul(20.0).unsqueeze(1);  // [2, 1, 16]
        const int64_t p = tc.cache.next_position();
        tc.cache.append(1, k, tc.randn({2, 1, 16}), at::full({1}, p, at::kLong));
        tc.cache.advance_position(1);
      }
      const at::Tensor y = policy->attend(1, q, tc.cache);
      const auto sel = policy->last_selection();
      ASSERT_EQ(sel.size(), 2u);
      const int64_t n = tc.cache.layer(1).length[0];
      for (int64_t h = 0; h < 2; ++h) {
        ASSERT_EQ(sel[h].size(0), 1);
        const auto rows = to_vec(sel[h][0]);
        ASSERT_FALSE(rows.empty());
        EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
        EXPECT_LT(rows.back(), n);
        EXPECT_LT(static_cast<int64_t>(rows.size()), n / 2) << "a fraction of the history";
        if (step == 2) EXPECT_EQ(rows.back(), n - 1) << "the step's own entry";
        for (int64_t g = 0; g < G; ++g)
          EXPECT_TRUE(
              at::allclose(y[h * G + g].to(at::kDouble), reference_head(tc.cache, q, h * G + g, G, rows), 1e-5, 1e-5))
              << "kv head " << h << ", query head " << h * G + g;
      }
    }
  }
}

TEST(DecodeSelection, QuestPagesMatchBruteForce) {
  for (int64_t G : {1, 3})
    for (bool ragged : {false, true}) {
      SCOPED_TRACE("G=" + std::to_string(G) + (ragged ? " ragged" : ""));
      TestCache tc(small_config(2, G), 400 + G + ragged);
      tc.prefill(150, ragged);
      auto policy = make_policy("quest", {{"page", "4"}, {"k", "10"}});  // ceil(10/4) = 3 pages
      policy->configure(fetched(64), tc.cfg);
      policy->on_prefill(1, tc.layer_prefill(), tc.cache);
      for (int step = 0; step < 6; ++step) {
        tc.append_one();
        const at::Tensor q = tc.query();
        const at::Tensor y = policy->attend(1, q, tc.cache);
        check_shared_selection(*policy, tc, G, q, y, [&](int64_t h) {
          const int64_t N = tc.cache.layer(1).length[h];
          std::vector<int64_t> all(16);
          std::iota(all.begin(), all.end(), 0);
          std::vector<double> u((N + 3) / 4, 0.0);
          for (int64_t g = 0; g < G; ++g) {
            const auto pb = page_bounds(tc.cache, h, q[h * G + g].to(at::kDouble), 4, all, {}, true);
            for (size_t p = 0; p < u.size(); ++p) u[p] += pb[p];
          }
          std::vector<int64_t> rows;
          for (int64_t p : topk_ref(u, 3))
            for (int64_t i = p * 4; i < std::min(N, p * 4 + 4); ++i) rows.push_back(i);
          return rows;
        });
      }
    }
}

TEST(DecodeSelection, SparqMatchesBruteForce) {
  for (bool mean : {false, true})
    for (int64_t G : {1, 3})
      for (bool ragged : {false, true}) {
        SCOPED_TRACE("G=" + std::to_string(G) + (ragged ? " ragged" : "") + (mean ? " mean" : ""));
        TestCache tc(small_config(2, G), 500 + G + ragged);
        tc.prefill(120, ragged);
        auto policy = make_policy("sparq", {{"r", "4"}, {"k", "9"}, {"mean", mean ? "true" : "false"}});
        policy->configure(fetched(64), tc.cfg);
        policy->on_prefill(1, tc.layer_prefill(), tc.cache);
        for (int step = 0; step < 2; ++step) {
          tc.append_one();
          const at::Tensor q = tc.query();
          const at::Tensor y = policy->attend(1, q, tc.cache);
          const auto sel = policy->last_selection();
          for (int64_t h = 0; h < 2; ++h) {
            // Page size 1 and both bounds equal the key: HSA's reference with k1 = r.
            const auto want = hsa_reference(tc.cache, q, h, G, 1, 4, 9);
            EXPECT_EQ(to_vec(sel[h][0]), want);
            for (int64_t g = 0; g < G; ++g) {
              const int64_t hq = h * G + g;
              at::Tensor ref = reference_head(tc.cache, q, hq, G, want);
              if (mean) {
                // alpha = approximate attention mass of the selection; v̄ = mean of all values.
                const auto chan = channels_by_group_abs(q, h, G, 4);
                const at::Tensor qh = q[hq].to(at::kDouble);
                at::Tensor K = tc.cache.head_keys(1, h).to(at::kDouble);
                at::Tensor ci = at::tensor(chan, at::kLong);
                const double scale =
                    std::sqrt(16 * qh.index_select(0, ci).abs().sum().item<double>() / qh.abs().sum().item<double>());
                at::Tensor p = at::softmax(at::mv(K.index_select(1, ci), qh.index_select(0, ci)) / scale, 0);
                const double alpha = p.index_select(0, at::tensor(want, at::kLong)).sum().item<double>();
                ref = alpha * ref + (1 - alpha) * tc.cache.head_values(1, h).to(at::kDouble).mean(0);
              }
              EXPECT_TRUE(at::allclose(y[hq].to(at::kDouble), ref, 1e-5, 1e-5)) << "query head " << hq;
            }
          }
        }
      }
}

TEST(DecodeSelection, RegistryAndBudgets) {
  const PolicyRegistry r = registry();
  for (const char* n : {"hsa", "quest", "sparq", "exacttopk"})
    EXPECT_EQ(r.catalog().at(n).stage, Stage::kDecodeSelection) << n;
  // HSA: fetched t with S = n_prompt + n_gen -> P from rocketkv_split; stage1=false keeps the prompt.
  ModelConfig cfg = small_config(2, 3);
  cfg.head_dim = 64;
  auto hsa = make_policy("hsa", {});
  const RunBudget b = fetched(64, 514, 8);
  hsa->configure(b, cfg);
  EXPECT_EQ(hsa->eviction_budget(b), rocketkv_split(522, 64, 64, 8).prompt_keep);
  auto alone = make_policy("hsa", {{"stage1", "false"}});
  alone->configure(b, cfg);
  EXPECT_EQ(alone->eviction_budget(b), 514);
  EXPECT_THROW(make_policy("hsa", {{"stage1", "maybe"}}), InputError);
  // A decode-time stage without configure() refuses to run.
  TestCache tc(small_config(2, 1), 7);
  tc.prefill(10, false);
  auto q = make_policy("quest", {});
  EXPECT_THROW(q->attend(1, tc.query(), tc.cache), std::logic_error);
}

// ---- (d) end to end ------------------------------------------------------------------------------

class DecodeSelectionModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new Model(load_model(test::pycode_dir(), LoadOptions{})); }
  static void TearDownTestSuite() { delete model_; }
  static GenerateResult run(const std::string& spec, double t, std::vector<int32_t>* ids_out = nullptr) {
    const auto g = test::read_json(test::pycode_dir() / "golden/textwrap_head.json");
    const auto ids = g["input_ids"].get<std::vector<int32_t>>();
    if (ids_out) *ids_out = ids;
    static const PolicyRegistry reg = registry();
    const Pipeline pipeline(reg, spec);
    GenerateRequest req;
    req.prompt_ids = ids;
    req.max_new_tokens = 8;
    req.pipeline = &pipeline;
    req.budget = BudgetSpec{BudgetSpec::Unit::kFetched, t};
    req.reference_full = true;
    const Engine engine(*model_);
    return generate(engine, req);
  }
  static Model* model_;
};
Model* DecodeSelectionModel::model_ = nullptr;

TEST_F(DecodeSelectionModel, RocketKvPipelineRuns) {
  std::vector<int32_t> ids;
  const GenerateResult res = run("snapkv:window=32,kernel=63,pool=max,gqa=sum+hsa", 64, &ids);
  const ModelConfig& c = model_->config;
  const int64_t S = static_cast<int64_t>(ids.size()) + 8;
  const auto split = rocketkv_split(S, 64, c.head_dim, 8);
  ASSERT_LT(split.prompt_keep, static_cast<int64_t>(ids.size()));
  ASSERT_EQ(res.kept.size(), static_cast<size_t>(c.n_layer));
  for (const auto& layer : res.kept)
    for (const auto& head : layer) EXPECT_EQ(static_cast<int64_t>(head.size()), split.prompt_keep);
  EXPECT_EQ(res.output_ids.size(), 8u);
  ASSERT_EQ(res.fidelity.kl.size(), 8u);
  double mean = 0;
  for (double kl : res.fidelity.kl) {
    EXPECT_TRUE(std::isfinite(kl));
    mean += kl / 8;
  }
  std::printf("rocketkv t=64: S=%lld C=%lld P=%lld page=%lld k1=%lld k2=%lld mean KL %.4f top1 %d/8\n",
              static_cast<long long>(S), static_cast<long long>(split.capacity),
              static_cast<long long>(split.prompt_keep), static_cast<long long>(split.page),
              static_cast<long long>(split.k1), static_cast<long long>(split.k2), mean,
              std::accumulate(res.fidelity.top1.begin(), res.fidelity.top1.end(), 0));
  EXPECT_LT(mean, 1.0);
}

TEST_F(DecodeSelectionModel, BaselinesRun) {
  for (const char* spec : {"hsa:stage1=false", "quest", "sparq", "sparq:mean=true", "exacttopk"}) {
    const GenerateResult res = run(spec, 64);
    ASSERT_EQ(res.fidelity.kl.size(), 8u) << spec;
    double mean = 0;
    for (double kl : res.fidelity.kl) mean += kl / 8;
    EXPECT_TRUE(std::isfinite(mean)) << spec;
    std::printf("%-18s t=64: mean KL %.4f top1 %d/8\n", spec, mean,
                std::accumulate(res.fidelity.top1.begin(), res.fidelity.top1.end(), 0));
    // Smoke bounds only: at t = 64 on a 522-token sequence the one-axis baselines lose more
    // (measured: quest ~1.2, sparq ~0.8, sparq with the mean-value term ~2.1 nats); the oracle
    // must stay close to the full cache.
    EXPECT_LT(mean, std::string(spec) == "exacttopk" ? 0.25 : 5.0) << spec;
  }
}

}  // namespace
}  // namespace kvscope
