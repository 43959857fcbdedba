// S4 key-channel pruning: "spark" (SPARK, Liao et al. 2025 §4) and "think" (ThinK, Xu et al. 2024 §3).
// (a) ratio 0 is dense attention; (b) SPARK's masks, recovery statistics and logits against a
// brute-force loop on a small random (ragged) cache; (c) ThinK prunes the same channels for every
// entry; (d) end to end on pycode-16m after SnapKV at compression ratio 0.5: mean KL to the full
// cache, SPARK below ThinK at channel ratio 0.8 (the paper's headline claim).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/attention.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/kv_cache.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "policies/channel_pruning.h"
#include "policy_registry.h"
#include "small_config.h"
#include "test_support.h"

namespace kvscope {
namespace {

using policies::ChannelPruningBase;

const PolicyRegistry& registry() { return test::builtin_registry(); }

std::unique_ptr<ChannelPruningBase> make_pruner(const std::string& name, const ParamValues& p) {
  auto pol = registry().make(name, p);
  if (!dynamic_cast<ChannelPruningBase*>(pol.get())) throw std::logic_error(name + " is not a ChannelPruningBase");
  return std::unique_ptr<ChannelPruningBase>(static_cast<ChannelPruningBase*>(pol.release()));
}

/// A small random two-layer cache: layer 0 uniform, layer 1 ragged after eviction (20 / 13 of 24
/// entries kept), each with a decode reserve; plus the pre-eviction LayerPrefill of each layer.
struct RandomSetup {
  ModelConfig cfg;
  std::unique_ptr<KvCache> cache;
  std::vector<LayerPrefill> in;
  std::vector<std::vector<at::Tensor>> orig;  // [layer][kv head]: the keys prefill pruned, as they were
  static constexpr int64_t kTok = 24;

  RandomSetup() {
    cfg = test::small_config(2, 2, 2, 16);
    at::manual_seed(1234);
    cache = std::make_unique<KvCache>(cfg, kTok + 4, c10::Device(c10::kCPU), at::kFloat);
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      at::Tensor k = at::randn({cfg.n_head_kv, kTok, cfg.head_dim});
      at::Tensor v = at::randn({cfg.n_head_kv, kTok, cfg.head_dim});
      cache->append(l, k, v, at::arange(kTok, at::kLong));
      in.push_back(LayerPrefill{cfg, l, at::randn({kTok, cfg.n_head, cfg.head_dim}), k, v});
    }
    cache->advance_position(kTok);
    // Layer 1: ragged eviction (what a head-wise budget leaves).
    const std::vector<int64_t> some = {0, 1, 3, 4, 6, 8, 9, 12, 15, 17, 20, 22, 23};
    cache->retain(1, {at::arange(4, kTok, at::kLong), at::tensor(some, at::kLong)}, 4);
  }

  void prefill(ChannelPruningBase& p) {
    p.configure(RunBudget{}, cfg);
    orig.assign(cfg.n_layer, {});
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      for (int64_t h = 0; h < cfg.n_head_kv; ++h) orig[l].push_back(cache->head_keys(l, h).clone());
      p.on_prefill(l, in[l], *cache);
    }
  }

  /// The keys of (l, h) as they were before pruning, then the dense decode-time ones.
  at::Tensor original_keys(int64_t l, int64_t h) const {
    const at::Tensor now = cache->head_keys(l, h);
    const int64_t n = orig[l][h].size(0);
    return at::cat({orig[l][h], now.narrow(0, n, now.size(0) - n)}).contiguous();
  }

  /// Appends one decode entry to every head of every layer.
  void append_decode_step() {
    const int64_t pos = cache->next_position();
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      cache->append(l, at::randn({cfg.n_head_kv, 1, cfg.head_dim}), at::randn({cfg.n_head_kv, 1, cfg.head_dim}),
                    at::full({1}, pos, at::kLong));
    cache->advance_position(1);
  }

  /// Dense GQA attention of one decode query q [H, D] over layer l (head by head: ragged).
  at::Tensor dense(int64_t l, const at::Tensor& q) const {
    const int64_t G = cfg.n_head / cfg.n_head_kv, D = cfg.head_dim;
    std::vector<at::Tensor> outs;
    for (int64_t h = 0; h < cfg.n_head_kv; ++h)
      outs.push_back(gqa_attention(q.narrow(0, h * G, G).unsqueeze(0), cache->head_keys(l, h).unsqueeze(0),
                                   cache->head_values(l, h).unsqueeze(0))
                         .view({G, D}));
    return at::cat(outs, 0);
  }
};

// ---- (a) ratio 0 is dense attention ---------------------------------------------------------------

TEST(ChannelPruning, RatioZeroIsDenseAttention) {
  for (const std::string name : {"spark", "think"}) {
    SCOPED_TRACE(name);
    RandomSetup s;
    auto p = make_pruner(name, {{"ratio", "0"}, {"window", "8"}});
    s.prefill(*p);
    for (int step = 0; step < 3; ++step) {
      s.append_decode_step();
      for (int64_t l = 0; l < s.cfg.n_layer; ++l) {
        const at::Tensor q = at::randn({s.cfg.n_head, s.cfg.head_dim});
        const at::Tensor got = p->attend(l, q, *s.cache);
        EXPECT_LT((got - s.dense(l, q)).abs().max().item<double>(), 1e-5) << "layer " << l << " step " << step;
        for (int64_t h = 0; h < s.cfg.n_head_kv; ++h) {
          EXPECT_TRUE(p->channel_mask(l, h, *s.cache).all().item<bool>());
          EXPECT_EQ(p->recovery_bias(l, h).abs().max().item<double>(), 0.0);
        }
      }
    }
  }
}

// ---- (b) SPARK against brute force ----------------------------------------------------------------

/// Brute-force |q̄| (query=mean) or window RMS (query=rms) aggregated over the group of KV head h:
/// [D] (window = last w queries).
std::vector<double> group_qbar_abs(const at::Tensor& queries, int64_t h, int64_t G, int64_t w, const std::string& gqa,
                                   const std::string& query) {
  const int64_t T = queries.size(0), D = queries.size(2);
  auto acc = queries.accessor<float, 3>();
  std::vector<double> a(D, gqa == "max" ? -1.0 : 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < D; ++j) {
      double m = 0;
      for (int64_t t = T - w; t < T; ++t) {
        const double x = acc[t][h * G + g][j];
        m += query == "rms" ? x * x : x;
      }
      m = query == "rms" ? std::sqrt(m / double(w)) : std::abs(m / double(w));
      if (gqa == "max")
        a[j] = std::max(a[j], m);
      else
        a[j] += gqa == "mean" ? m / double(G) : m;
    }
  return a;
}

void check_spark(const std::string& gqa, const std::string& mode, const std::string& recovery,
                 const std::string& query = "mean", const std::string& sign = "positive") {
  SCOPED_TRACE("gqa=" + gqa + " mode=" + mode + " recovery=" + recovery + " query=" + query + " sign=" + sign);
  const bool key_sign = sign == "key" && recovery == "degenerate";
  RandomSetup s;
  const int64_t W = 8, D = s.cfg.head_dim, G = s.cfg.n_head / s.cfg.n_head_kv;
  const double ratio = 0.5, threshold = 0.9;
  auto p = make_pruner("spark", {{"ratio", "0.5"},
                                 {"window", std::to_string(W)},
                                 {"gqa", gqa},
                                 {"mode", mode},
                                 {"recovery", recovery},
                                 {"threshold", "0.9"},
                                 {"query", query},
                                 {"sign", sign}});
  s.prefill(*p);
  const int64_t T = policies::kept_channels(ratio, D);
  ASSERT_EQ(T, 8);
  s.append_decode_step();
  int64_t expect_side = 0, dense_k = 0;
  for (int64_t l = 0; l < s.cfg.n_layer; ++l) {
    const at::Tensor q = at::randn({s.cfg.n_head, D});
    std::vector<at::Tensor> hand_out;
    int64_t expect_read = 0;
    for (int64_t h = 0; h < s.cfg.n_head_kv; ++h) {
      SCOPED_TRACE("layer " + std::to_string(l) + " kv head " + std::to_string(h));
      const auto a = group_qbar_abs(s.in[l].queries, h, G, W, gqa, query);
      const at::Tensor keys = s.original_keys(l, h);
      const at::Tensor vals = s.cache->head_values(l, h).contiguous();
      const int64_t len = keys.size(0), n = len - 1;  // the last row is the decode-time entry
      ASSERT_EQ(p->pruned_entries(l, h), n);
      const at::Tensor mask = p->channel_mask(l, h, *s.cache).contiguous();
      const at::Tensor bias = p->recovery_bias(l, h).contiguous();
      ASSERT_EQ(mask.sizes(), (at::IntArrayRef{n, D}));
      auto K = keys.accessor<float, 2>();
      auto M = mask.accessor<bool, 2>();
      auto B = bias.accessor<float, 1>();
      std::vector<double> hand_bias(n), hand_mu(n);
      int64_t kept_total = 0, fewest_kept = D, most_kept = 0;
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> w(D);
        double total = 0;
        for (int64_t j = 0; j < D; ++j) total += (w[j] = a[j] * std::abs(double(K[t][j])));
        double min_kept = 1e300, max_pruned = -1, pruned_sum = 0, kept_sum = 0;
        int64_t kept = 0;
        for (int64_t j = 0; j < D; ++j)
          if (M[t][j]) {
            ++kept;
            kept_sum += w[j];
            min_kept = std::min(min_kept, w[j]);
          } else {
            max_pruned = std::max(max_pruned, w[j]);
            pruned_sum += w[j];
          }
        kept_total += kept;
        fewest_kept = std::min(fewest_kept, kept);
        most_kept = std::max(most_kept, kept);
        // The kept channels are the largest saliencies of the entry (SPARK-g: of each segment).
        if (mode != "g") EXPECT_GE(min_kept, max_pruned) << "token " << t;
        if (mode == "fixed") {
          EXPECT_EQ(kept, T) << "token " << t;
        } else if (mode == "g") {
          // 4 segments of the saliency ranking (D = 16: 4 channels each) pruned at 0.25, 0.5,
          // 0.75, 1.0: ranks 0-2, 4-5 and 8 kept.
          std::vector<int64_t> order(D);
          std::iota(order.begin(), order.end(), 0);
          std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return w[x] > w[y]; });
          for (int64_t r = 0; r < D; ++r) {
            const bool want = r < 3 || r == 4 || r == 5 || r == 8;
            EXPECT_EQ(M[t][order[r]], want) << "token " << t << " rank " << r;
          }
        } else {
          // SPARK-p: the fewest top channels holding >= threshold of the entry's saliency.
          std::vector<double> sorted = w;
          std::sort(sorted.rbegin(), sorted.rend());
          int64_t need = 0;
          for (double c = 0; need < D && c < threshold * total;) c += sorted[need++];
          EXPECT_EQ(kept, std::max<int64_t>(need, 1)) << "token " << t;
          EXPECT_GE(kept_sum, threshold * total * (1 - 1e-6));
        }
        const int64_t P = D - kept;
        const double mu = P > 0 ? pruned_sum / double(P) : 0.0;  // μ_pruned[t], eq. 11
        hand_mu[t] = mu;
        hand_bias[t] = recovery == "degenerate" && !key_sign ? double(P) * mu : 0.0;
        EXPECT_NEAR(B[t], hand_bias[t], 1e-5 * (1 + std::abs(hand_bias[t]))) << "token " << t;
      }
      // Logits of one decode step, by hand: ((q ⊙ m_t)·k_t + (D - T_t)·μ[t]) / sqrt(D) (sign=key:
      // Σ_{j pruned} q_j·sign(k_tj)·μ[t]/a_j instead of the bias); dense for the decode-time entry.
      const at::Tensor qg = q.narrow(0, h * G, G).contiguous();
      auto Q = qg.accessor<float, 2>();
      at::Tensor hand = at::empty({G, len}, at::kDouble);
      auto Hd = hand.accessor<double, 2>();
      for (int64_t g = 0; g < G; ++g)
        for (int64_t t = 0; t < len; ++t) {
          double s_t = 0;
          for (int64_t j = 0; j < D; ++j)
            if (t == n || M[t][j])
              s_t += double(Q[g][j]) * double(K[t][j]);
            else if (key_sign && a[j] > 0)
              s_t += double(Q[g][j]) * (K[t][j] > 0 ? 1.0 : K[t][j] < 0 ? -1.0 : 0.0) * hand_mu[t] / a[j];
          if (t < n) s_t += hand_bias[t];
          Hd[g][t] = s_t / std::sqrt(double(D));
        }
      const at::Tensor got = p->head_logits(l, h, qg, *s.cache);
      EXPECT_LT((got.to(at::kDouble) - hand).abs().max().item<double>(), 1e-4);
      hand_out.push_back(at::matmul(at::softmax(hand, -1), vals.to(at::kDouble)));
      // The keys as the cache stores them: kept fp32 values + a kept-channel bitmask per entry
      // (+ value offsets when the counts differ, SPARK-p) (+ sign=key: the pruned channels' sign
      // bits, μ per entry and 1/a per channel); the sign=positive bias is the policy's.
      const int64_t key_bytes = kept_total * 4 + n * ((D + 7) / 8) + (fewest_kept == most_kept ? 0 : (n + 1) * 8) +
                                (key_sign ? n * ((D - fewest_kept + 7) / 8) + n * 4 + D * 4 : 0);
      EXPECT_EQ(s.cache->layer(l).compact[h].bytes(), key_bytes);
      const int64_t bias_bytes = recovery == "degenerate" && !key_sign ? n * 4 : 0;
      expect_side += bias_bytes;
      dense_k += n * D * 4;
      expect_read += key_bytes + bias_bytes + 1 * D * 4 + len * D * 4;  // + the dense decode-time key + all values
    }
    const at::Tensor out = p->attend(l, q, *s.cache);
    EXPECT_LT((out.to(at::kDouble) - at::cat(hand_out, 0)).abs().max().item<double>(), 1e-5);
    EXPECT_EQ(p->bytes_read_last(), expect_read);
  }
  EXPECT_EQ(p->side_store_bytes(), expect_side);
  EXPECT_EQ(p->dense_key_bytes(), dense_k);
}

TEST(ChannelPruning, SparkMaskRecoveryAndLogitsMatchBruteForce) {
  check_spark("mean", "fixed", "degenerate");
  check_spark("sum", "fixed", "degenerate");
  check_spark("max", "fixed", "zero");
  check_spark("mean", "p", "degenerate");
  check_spark("mean", "g", "degenerate", "mean", "key");
  check_spark("mean", "fixed", "degenerate", "rms");
  check_spark("mean", "fixed", "degenerate", "mean", "key");
  check_spark("max", "p", "degenerate", "rms", "key");
}

TEST(ChannelPruning, SparkMasksDifferAcrossTokens) {
  RandomSetup s;
  auto p = make_pruner("spark", {{"ratio", "0.5"}, {"window", "8"}});
  s.prefill(*p);
  const at::Tensor m = p->channel_mask(0, 0, *s.cache);
  EXPECT_FALSE(m.eq(m[0].unsqueeze(0)).all().item<bool>()) << "unstructured: per-token channel sets";
}

// ---- (c) ThinK: one channel set per KV head -------------------------------------------------------

TEST(ChannelPruning, ThinkDropsTheSameChannelsForEveryEntry) {
  RandomSetup s;
  const int64_t W = 8, D = s.cfg.head_dim, G = s.cfg.n_head / s.cfg.n_head_kv;
  auto p = make_pruner("think", {{"ratio", "0.75"}, {"window", std::to_string(W)}});
  s.prefill(*p);
  const int64_t T = policies::kept_channels(0.75, D);
  ASSERT_EQ(T, 4);
  s.append_decode_step();
  for (int64_t l = 0; l < s.cfg.n_layer; ++l)
    for (int64_t h = 0; h < s.cfg.n_head_kv; ++h) {
      SCOPED_TRACE("layer " + std::to_string(l) + " kv head " + std::to_string(h));
      const at::Tensor mask = p->channel_mask(l, h, *s.cache);
      const int64_t n = mask.size(0);
      ASSERT_GT(n, 0);
      EXPECT_TRUE(mask.eq(mask[0].unsqueeze(0)).all().item<bool>());
      EXPECT_EQ(mask[0].sum().item<int64_t>(), T);
      EXPECT_EQ(p->recovery_bias(l, h).abs().max().item<double>(), 0.0);
      // Brute force: score_j = ||Q_group,window[:, j]|| * ||K[:, j]||, top T.
      const at::Tensor keys = s.orig[l][h].contiguous();
      auto K = keys.accessor<float, 2>();
      auto Qa = s.in[l].queries.accessor<float, 3>();
      const int64_t Tq = s.in[l].queries.size(0);
      std::vector<double> score(D);
      for (int64_t j = 0; j < D; ++j) {
        double qs = 0, ks = 0;
        for (int64_t g = 0; g < G; ++g)
          for (int64_t t = Tq - W; t < Tq; ++t) qs += double(Qa[t][h * G + g][j]) * Qa[t][h * G + g][j];
        for (int64_t t = 0; t < n; ++t) ks += double(K[t][j]) * K[t][j];
        score[j] = std::sqrt(qs) * std::sqrt(ks);
      }
      double min_kept = 1e300, max_pruned = -1;
      for (int64_t j = 0; j < D; ++j) {
        if (mask[0][j].item<bool>())
          min_kept = std::min(min_kept, score[j]);
        else
          max_pruned = std::max(max_pruned, score[j]);
      }
      EXPECT_GE(min_kept, max_pruned);
      // Logits: the query sliced to the kept channels, no recovery; the decode entry dense.
      const at::Tensor q = at::randn({G, D});
      const at::Tensor all_k = s.cache->head_keys(l, h);
      at::Tensor hand = at::matmul(q * mask[0].to(at::kFloat), keys.t());
      hand = at::cat({hand, at::matmul(q, all_k.narrow(0, n, all_k.size(0) - n).t())}, 1) / std::sqrt(double(D));
      EXPECT_LT((p->head_logits(l, h, q, *s.cache) - hand).abs().max().item<double>(), 1e-5);
    }
  // Storage: T values per entry + one kept-channel bitmask per head; no bias.
  for (int64_t l = 0; l < s.cfg.n_layer; ++l)
    for (int64_t h = 0; h < s.cfg.n_head_kv; ++h)
      EXPECT_EQ(s.cache->layer(l).compact[h].bytes(), p->pruned_entries(l, h) * T * 4 + (D + 7) / 8);
  EXPECT_EQ(p->side_store_bytes(), 0);
}

// ---- Memory: the pruned channels are really freed --------------------------------------------------

// SPARK (§1: ">30% less KV at equal length") and ThinK store only the kept channels: the cache's
// allocation drops by the pruned share of the keys, less the bitmask and recovery statistics.
TEST(ChannelPruning, CacheBytesFallByThePrunedShare) {
  const int64_t D = 128, Hkv = 2, n = 256;
  const ModelConfig cfg = test::small_config(1, Hkv, 2, D);
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat})
    for (const std::string name : {"spark", "think"})
      for (const double ratio : {0.3, 0.5, 0.8}) {
        SCOPED_TRACE(name + " ratio " + std::to_string(ratio) + (dtype == at::kFloat ? " fp32" : " bf16"));
        at::manual_seed(7);
        KvCache cache(cfg, n, c10::Device(c10::kCPU), dtype);  // no decode reserve: K of the prompt only
        const at::Tensor k = at::randn({Hkv, n, D}).to(dtype), v = at::randn({Hkv, n, D}).to(dtype);
        cache.append(0, k, v, at::arange(n, at::kLong));
        cache.advance_position(n);
        const int64_t item = at::elementSize(dtype), before = cache.bytes_allocated();
        ASSERT_EQ(before, 2 * Hkv * n * D * item);
        auto p = make_pruner(name, {{"ratio", std::to_string(ratio)}, {"window", "8"}});
        p->configure(RunBudget{}, cfg);
        p->on_prefill(0, LayerPrefill{cfg, 0, at::randn({16, cfg.n_head, D}).to(dtype), k, v}, cache);
        const int64_t T = policies::kept_channels(ratio, D);
        // Per entry: T values + the kept bitmask (SPARK; ThinK: one per head) + SPARK's sign bits
        // of the D - T pruned channels and μ; per head, SPARK's 1/a (fp32 [D]).
        const int64_t per_head =
            name == "spark" ? n * (T * item + D / 8 + (D - T + 7) / 8 + 4) + D * 4 : n * T * item + D / 8;
        EXPECT_EQ(cache.bytes_allocated(), Hkv * n * D * item + Hkv * per_head);
        const double dense_k = double(Hkv * n * D * item), k_now = double(cache.bytes_allocated() - Hkv * n * D * item);
        std::printf("[channel] %-5s %s ratio %.1f: keys %.0f -> %.0f bytes (%.1f%% freed; pruned share %.0f%%)\n",
                    name.c_str(), dtype == at::kFloat ? "fp32" : "bf16", ratio, dense_k, k_now,
                    100.0 * (1.0 - k_now / dense_k), 100.0 * double(D - T) / double(D));
        // The metadata costs at most 14% of the dense keys (SPARK, bf16, D = 128, λ = 0.8: 16 bitmask
        // + 13 sign + 4 μ bytes per 256-byte key).
        EXPECT_LT(k_now, dense_k * (double(T) / double(D) + 0.14));
        // Reads give the recovered keys: the kept channels exactly as they were.
        const at::Tensor mask = p->channel_mask(0, 1, cache);
        EXPECT_TRUE(at::equal(cache.head_keys(0, 1).masked_select(mask), k[1].masked_select(mask)));
      }
}

// SPARK App. D: value channels pruned per entry by |v| (the others read as 0), keys as usual.
TEST(ChannelPruning, SparkValuePruningDropsTheSmallestValueChannels) {
  RandomSetup s;
  const int64_t D = s.cfg.head_dim, G = s.cfg.n_head / s.cfg.n_head_kv;
  std::vector<std::vector<at::Tensor>> v0(s.cfg.n_layer);
  for (int64_t l = 0; l < s.cfg.n_layer; ++l)
    for (int64_t h = 0; h < s.cfg.n_head_kv; ++h) v0[l].push_back(s.cache->head_values(l, h).clone());
  const int64_t before = s.cache->bytes_allocated();
  auto p = make_pruner("spark", {{"ratio", "0.5"}, {"window", "8"}, {"value_ratio", "0.75"}});
  s.prefill(*p);
  const int64_t Tv = policies::kept_channels(0.75, D);
  ASSERT_EQ(Tv, 4);
  int64_t compact = 0, entries = 0;
  for (int64_t l = 0; l < s.cfg.n_layer; ++l)
    for (int64_t h = 0; h < s.cfg.n_head_kv; ++h) {
      const LayerKv& L = s.cache->layer(l);
      compact += L.compact[h].bytes() + L.compact_v[h].bytes();
      entries += L.compact_v[h].n;
      EXPECT_EQ(L.compact_v[h].bytes(), L.compact_v[h].n * (Tv * 4 + D / 8));
    }
  EXPECT_EQ(s.cache->bytes_allocated(), before - 2 * entries * D * 4 + compact);  // both K and V rows freed
  s.append_decode_step();
  for (int64_t l = 0; l < s.cfg.n_layer; ++l) {
    const at::Tensor q = at::randn({s.cfg.n_head, D});
    std::vector<at::Tensor> hand;
    for (int64_t h = 0; h < s.cfg.n_head_kv; ++h) {
      // Brute force: each pruned entry keeps its Tv largest |v| channels; the decode entry is whole.
      const at::Tensor v = s.cache->head_values(l, h);
      const int64_t n = v0[l][h].size(0);
      at::Tensor expect = v.clone();
      for (int64_t t = 0; t < n; ++t) {
        const at::Tensor row = v0[l][h][t];
        const at::Tensor keep = at::zeros({D}, at::kBool).index_fill_(0, std::get<1>(row.abs().topk(Tv)), true);
        expect[t] = row * keep.to(at::kFloat);
      }
      EXPECT_TRUE(at::equal(v, expect)) << "layer " << l << " kv head " << h;
      const at::Tensor sc = p->head_logits(l, h, q.narrow(0, h * G, G), *s.cache);
      hand.push_back(at::matmul(at::softmax(sc, -1), expect));
    }
    EXPECT_LT((p->attend(l, q, *s.cache) - at::cat(hand, 0)).abs().max().item<double>(), 1e-5);
  }
}

TEST(ChannelPruning, RegistryAndPipeline) {
  const auto& e = registry().catalog().at("spark");
  EXPECT_EQ(e.stage, Stage::kChannel);
  EXPECT_EQ(registry().catalog().at("think").stage, Stage::kChannel);
  const Pipeline pipe(registry(), "snapkv:window=32,kernel=7,pool=max+spark:ratio=0.5");
  ASSERT_NE(pipe.decode_attention(), nullptr);
  EXPECT_EQ(pipe.decode_attention()->name(), "spark");
  EXPECT_NE(pipe.canonical().find("spark:gqa=mean,groups=4,mode=fixed,query=mean,ratio=0.5,recovery=degenerate,"
                                  "sign=key,"
                                  "threshold=0.99,value_ratio=0,window=32"),
            std::string::npos)
      << pipe.canonical();
  EXPECT_THROW(registry().make("spark", {{"ratio", "1.5"}}), InputError);
  EXPECT_THROW(registry().make("think", {{"gqa", "mean"}}), InputError);
}

// ---- (d) end to end on pycode-16m -----------------------------------------------------------------

class ChannelPruningModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model(load_model(test::pycode_dir(), LoadOptions{}));  // fp32, CPU
    ids_ = new std::vector<int32_t>;
    *ids_ =
        prompt_ids(*model_, test::read_text(test::pycode_dir() / "golden/prompts/textwrap_head.py"), BosMode::kAlways);
  }
  static void TearDownTestSuite() {
    delete runs_;
    delete ids_;
    delete model_;
  }
  struct Run {
    double mean_kl = 0;
    std::vector<double> kl;
    std::vector<int32_t> out;
    int64_t cache_bytes = 0, dense_k = 0;
  };
  /// Generates under `spec` once (memoised: each run prefills the prompt twice, seconds on a CPU).
  static const Run& run(const std::string& spec) {
    if (!runs_) runs_ = new std::map<std::string, Run>;
    if (auto it = runs_->find(spec); it != runs_->end()) return it->second;
    const Engine engine(*model_);
    const Pipeline pipe(registry(), spec);
    GenerateRequest req;
    req.prompt_ids = *ids_;
    req.max_new_tokens = 8;
    req.pipeline = &pipe;
    req.budget = BudgetSpec{BudgetSpec::Unit::kCompressionRatio, 0.5};
    req.reference_full = true;
    const GenerateResult r = generate(engine, req);
    Run out;
    out.kl = r.fidelity.kl;
    out.out = r.output_ids;
    out.mean_kl = std::accumulate(out.kl.begin(), out.kl.end(), 0.0) / double(std::max<size_t>(1, out.kl.size()));
    out.cache_bytes = r.cache_bytes_allocated;
    if (auto* c = dynamic_cast<const ChannelPruningBase*>(pipe.decode_attention())) out.dense_k = c->dense_key_bytes();
    return runs_->emplace(spec, std::move(out)).first->second;
  }
  static Model* model_;
  static std::vector<int32_t>* ids_;
  static std::map<std::string, Run>* runs_;
};
Model* ChannelPruningModel::model_ = nullptr;
std::vector<int32_t>* ChannelPruningModel::ids_ = nullptr;
std::map<std::string, ChannelPruningModel::Run>* ChannelPruningModel::runs_ = nullptr;

constexpr const char* kSnap = "snapkv:window=32,kernel=7,pool=max";

TEST_F(ChannelPruningModel, RatioZeroMatchesEvictionAlone) {
  const Run& base = run(kSnap);
  for (const std::string name : {"spark", "think"}) {
    const Run& r = run(std::string(kSnap) + "+" + name + ":ratio=0");
    EXPECT_EQ(r.out, base.out) << name;
    ASSERT_EQ(r.kl.size(), base.kl.size());
    for (size_t i = 0; i < r.kl.size(); ++i) EXPECT_NEAR(r.kl[i], base.kl[i], 1e-5) << name << " step " << i;
  }
}

TEST_F(ChannelPruningModel, SparkBeatsThinkAtHighRatio) {
  ASSERT_EQ(ids_->front(), 0);
  const Run& base = run(kSnap);
  std::printf("[channel] pycode-16m, textwrap_head (%zu tokens), snapkv @ compression 0.5, 8 new tokens\n",
              ids_->size());
  std::printf("[channel] %-18s mean KL %.6f\n", "snapkv alone", base.mean_kl);
  std::map<std::string, double> kl;
  for (const std::string ratio : {"0.5", "0.8"})
    for (const std::string name : {"spark", "think"}) {
      const std::string stage = name + ":ratio=" + ratio;
      const Run& r = run(std::string(kSnap) + "+" + stage);
      const int64_t freed = base.cache_bytes - r.cache_bytes;
      std::printf(
          "[channel] %-18s mean KL %.6f  cache %lld bytes, %lld fewer than snapkv alone (%.1f%% of the "
          "pruned entries' dense keys)\n",
          stage.c_str(), r.mean_kl, static_cast<long long>(r.cache_bytes), static_cast<long long>(freed),
          r.dense_k ? 100.0 * double(freed) / double(r.dense_k) : 0.0);
      EXPECT_TRUE(std::isfinite(r.mean_kl)) << stage;
      EXPECT_EQ(r.kl.size(), 8u) << stage;
      EXPECT_GT(freed, r.dense_k * (ratio == "0.5" ? 0.3 : 0.6)) << stage;
      kl[stage] = r.mean_kl;
    }
  EXPECT_LT(kl["spark:ratio=0.8"], kl["think:ratio=0.8"])
      << "SPARK (unstructured, recovered) should lose less than ThinK (structured) at λ = 0.8";
}

}  // namespace
}  // namespace kvscope
