// Eviction while decoding (S6 `decoding`, Pipeline::evict_decode) on pycode-16m (fp32, CPU), 512
// greedy tokens (256 for the rolling window and DecodingPress) after a 300-token prompt at 48
// entries per KV head. At every step and layer the
// cache the attention read is checked against a brute-force recomputation kept by the test itself:
// the previous step's kept positions plus the step's own entry, where the previous kept set is
// recomputed in fp64 from that step's query and keys by the paper's rule (TOVA §3.3: the top
// entries by the newest query's attention averaged over every query head, the newest always kept;
// StreamingLLM §3.2: the sinks and the newest entries), every `interval` steps (kvpress
// DecodingPress). The cache never holds more than max(budget, target) + interval entries per KV head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <ATen/ATen.h>

#include "kvscope/core/capture.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/policy.h"
#include "pycode_fixture.h"
#include "test_support.h"

namespace kvscope {
namespace {

std::vector<int64_t> to_vec(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

enum class Rule { kTova, kStreaming };

/// The rows (indices into `positions`) a rule keeps out of one layer's live entries.
std::vector<int64_t> reference_keep(Rule rule, const at::Tensor& q, const std::vector<at::Tensor>& keys, int64_t keep,
                                    int64_t sink) {
  const int64_t n = keys[0].size(0);
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  if (rule == Rule::kStreaming) {  // sinks + the newest
    std::vector<int64_t> out(rows.begin(), rows.begin() + sink);
    out.insert(out.end(), rows.end() - (keep - sink), rows.end());
    return out;
  }
  const int64_t H = q.size(1), D = q.size(2), Hkv = static_cast<int64_t>(keys.size()), G = H / Hkv;
  const at::Tensor qd = q[0].to(at::kDouble);
  std::vector<double> mean(static_cast<size_t>(n), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    const at::Tensor logits =
        at::matmul(keys[static_cast<size_t>(h / G)].to(at::kDouble), qd[h]) / std::sqrt(double(D));
    const at::Tensor p = at::softmax(logits, 0).contiguous();
    for (int64_t j = 0; j < n; ++j) mean[static_cast<size_t>(j)] += p.data_ptr<double>()[j] / double(H);
  }
  mean[static_cast<size_t>(n - 1)] = 1e300;  // the newest entry is always kept
  std::stable_sort(rows.begin(), rows.end(),
                   [&](int64_t a, int64_t b) { return mean[static_cast<size_t>(a)] > mean[static_cast<size_t>(b)]; });
  rows.resize(static_cast<size_t>(keep));
  std::sort(rows.begin(), rows.end());
  return rows;
}

class DecodeEviction : public test::PycodeSuite {
 protected:
  /// The first n tokens of the golden argparse prompt.
  static std::vector<int32_t> prompt_ids(size_t n) {
    auto ids =
        test::read_json(test::pycode_dir() / "golden/argparse_head.json")["input_ids"].get<std::vector<int32_t>>();
    ids.resize(n);
    return ids;
  }
  /// Prefills `ids` into `cache` under `p` at `budget` per head with room for `steps` more.
  static at::Tensor prefill_compressed(const Pipeline& p, KvCache& cache, const std::vector<int32_t>& ids,
                                       int64_t budget, int64_t steps) {
    const int64_t n_kept = p.begin_run(
        RunBudget{BudgetSpec{BudgetSpec::Unit::kStored, double(budget)}, static_cast<int64_t>(ids.size()), steps},
        model_->config);
    EXPECT_EQ(n_kept, budget);
    return Engine(*model_).prefill(cache, ids, 0, false,
                                   [&](const LayerEvent& ev) { p.compress_layer(ev, n_kept, steps); });
  }
  /// Every layer of `a` and `b` holds the same lengths, positions, keys and values.
  static void expect_same_cache(const KvCache& a, const KvCache& b, const std::string& what) {
    for (int64_t l = 0; l < a.n_layer(); ++l) {
      ASSERT_EQ(a.layer(l).length, b.layer(l).length) << what << " layer " << l;
      EXPECT_TRUE(at::equal(a.positions(l), b.positions(l))) << what << " layer " << l;
      EXPECT_TRUE(at::equal(a.keys(l), b.keys(l))) << what << " layer " << l;
      EXPECT_TRUE(at::equal(a.values(l), b.values(l))) << what << " layer " << l;
    }
  }
  /// Generates `tokens` tokens under `spec` at `budget` per head; checks every step against `rule`.
  static void check(const std::string& spec, Rule rule, int64_t budget, int64_t interval, int64_t target,
                    int64_t tokens = 512, int64_t sink = 4) {
    const auto g = test::read_json(test::pycode_dir() / "golden/argparse_head.json");
    auto ids = g["input_ids"].get<std::vector<int32_t>>();
    ids.resize(300);
    const Engine engine(*model_);
    const Pipeline pipeline(*registry_, spec);
    ASSERT_TRUE(pipeline.evicts_during_decode());
    const ModelConfig& cfg = model_->config;
    // Prefill leaves `budget`; between evictions a head grows by at most `interval`.
    const int64_t cap = std::max(budget, target) + interval;
    // Per layer: the positions the previous step left, by the reference (empty before the first step).
    std::map<int64_t, std::vector<int64_t>> expected;
    int64_t checked = 0, evictions = 0, most = 0;
    std::map<std::pair<int64_t, int64_t>, int64_t> evicted_at;  // (layer, position) -> step, by the reference
    GenerateRequest req;
    req.prompt_ids = ids;
    req.max_new_tokens = tokens;
    req.pipeline = &pipeline;
    req.budget = BudgetSpec{BudgetSpec::Unit::kStored, double(budget)};
    req.capture = CaptureLevel::kSummary;  // the timeline
    req.decode_probe = [&](const LayerEvent& ev, int64_t step) {
      const int64_t decode_step = step - 1;  // step 0 is the prefill
      std::vector<at::Tensor> keys;
      std::vector<int64_t> live;
      for (int64_t h = 0; h < cfg.n_head_kv; ++h) {
        keys.push_back(ev.cache.head_keys(ev.layer, h));
        const auto p = to_vec(ev.cache.head_positions(ev.layer, h));
        if (h == 0) live = p;
        EXPECT_EQ(p, live) << "heads of a layer differ (both rules keep the same entries in every head)";
      }
      const auto n = static_cast<int64_t>(live.size());
      most = std::max(most, n);
      ASSERT_LE(n, cap) << "step " << decode_step << " layer " << ev.layer;
      if (auto it = expected.find(ev.layer); it != expected.end()) {
        std::vector<int64_t> want = it->second;
        // This step's own entry, the newest (the cache's next position advances after the last layer).
        ASSERT_GT(live.back(), want.back());
        EXPECT_EQ(live.back(), static_cast<int64_t>(ids.size()) + decode_step);
        want.push_back(live.back());
        if (live != want) {
          std::vector<int64_t> only_cache, only_ref;
          std::set_difference(live.begin(), live.end(), want.begin(), want.end(), std::back_inserter(only_cache));
          std::set_difference(want.begin(), want.end(), live.begin(), live.end(), std::back_inserter(only_ref));
          FAIL() << "step " << decode_step << " layer " << ev.layer << ": " << only_cache.size()
                 << " positions only in the cache (first " << (only_cache.empty() ? -1 : only_cache[0]) << "), "
                 << only_ref.size() << " only in the reference (first " << (only_ref.empty() ? -1 : only_ref[0])
                 << "), " << live.size() << " vs " << want.size() << " entries";
        }
        ++checked;
      }
      std::vector<int64_t> next = live;
      if ((decode_step + 1) % interval == 0 && n > target) {
        next.clear();
        for (int64_t r : reference_keep(rule, ev.q, keys, target, sink)) next.push_back(live[static_cast<size_t>(r)]);
        for (int64_t p : live)
          if (!std::binary_search(next.begin(), next.end(), p)) evicted_at[{ev.layer, p}] = step;
        ++evictions;
      }
      expected[ev.layer] = next;
    };
    const GenerateResult r = generate(engine, req);
    const int64_t steps = tokens - 1;  // the first token comes from the prefill's logits
    EXPECT_EQ(r.decode_steps, steps);
    EXPECT_EQ(checked, (steps - 1) * cfg.n_layer);
    EXPECT_GE(evictions, steps / interval * cfg.n_layer - cfg.n_layer);
    EXPECT_EQ(most, cap);
    // The timeline holds every decode-time eviction at the step whose attention last read the entry.
    const Timeline& t = r.timeline;
    ASSERT_EQ(t.n_layer, cfg.n_layer);
    int64_t decode_evicted = 0;
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      for (int64_t h = 0; h < cfg.n_head_kv; ++h)
        for (int64_t p = 0; p < t.n_positions; ++p) {
          const size_t i = static_cast<size_t>((l * cfg.n_head_kv + h) * t.n_positions + p);
          const auto it = evicted_at.find({l, p});
          if (it == evicted_at.end()) {
            EXPECT_NE(t.evicted_by[i], static_cast<uint8_t>(EvictionCause::kDecode)) << l << " " << h << " " << p;
            continue;
          }
          ASSERT_EQ(t.evicted_by[i], static_cast<uint8_t>(EvictionCause::kDecode)) << l << " " << h << " " << p;
          ASSERT_EQ(t.evicted_at[i], it->second) << l << " " << h << " " << p;
          ++decode_evicted;
        }
    EXPECT_EQ(decode_evicted, static_cast<int64_t>(evicted_at.size()) * cfg.n_head_kv);
  }
};

TEST_F(DecodeEviction, TovaEvictsTheLeastAttendedEntryEveryStep) { check("tova+decoding", Rule::kTova, 48, 1, 48); }

TEST_F(DecodeEviction, StreamingLlmIsARollingWindowWhileDecoding) {
  check("streamingllm:sink=4+decoding", Rule::kStreaming, 48, 1, 48, 256);
}

TEST_F(DecodeEviction, DecodingPressCompressesEveryIntervalToItsTarget) {
  check("tova+decoding:interval=8,target=40", Rule::kTova, 48, 8, 40, 256);
}

// H2O while decoding (Zhang et al. 2023 §4, Alg. 1): every entry's score is the attention every
// query so far paid it, the prompt's and each generated token's, summed (norm=sum) and averaged
// over the GQA group; every step the cache keeps the top `budget` by that total, the newest
// `recent` always. The reference keeps its own fp64 totals per (layer, KV head, position): the
// prompt's column sums from an uncompressed prefill, then at each step the step query's attention
// over the entries the cache holds. Each head's kept set is checked at every step and layer.
TEST_F(DecodeEviction, H2oAccumulatesEveryStepsAttention) {
  const auto g = test::read_json(test::pycode_dir() / "golden/argparse_head.json");
  auto ids = g["input_ids"].get<std::vector<int32_t>>();
  ids.resize(300);
  const Engine engine(*model_);
  const ModelConfig& cfg = model_->config;
  const int64_t budget = 48, recent = 16, n = static_cast<int64_t>(ids.size());
  const int64_t H = cfg.n_head, Hkv = cfg.n_head_kv, G = H / Hkv, D = cfg.head_dim;
  // totals[layer][kv head][position], fp64
  std::vector<std::vector<std::map<int64_t, double>>> totals(cfg.n_layer, std::vector<std::map<int64_t, double>>(Hkv));
  auto add_attention = [&](int64_t layer, const at::Tensor& q /*[T, H, D]*/, int64_t h,
                           const at::Tensor& keys /*[m, D]*/, const std::vector<int64_t>& pos, int64_t first) {
    const at::Tensor k = keys.to(at::kDouble);
    for (int64_t g2 = 0; g2 < G; ++g2)
      for (int64_t t = 0; t < q.size(0); ++t) {
        const int64_t visible = first + t + 1;  // causal: key rows 0 .. first + t
        const at::Tensor logits =
            at::matmul(k.narrow(0, 0, visible), q[t][h * G + g2].to(at::kDouble)) / std::sqrt(double(D));
        const at::Tensor p = at::softmax(logits, 0).contiguous();
        for (int64_t j = 0; j < visible; ++j)
          totals[layer][h][pos[static_cast<size_t>(j)]] += p.data_ptr<double>()[j] / double(G);
      }
  };
  {  // the prompt's column sums, from an uncompressed prefill
    KvCache full = engine.new_cache(n);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    engine.prefill(full, ids, 0, false, [&](const LayerEvent& ev) {
      for (int64_t h = 0; h < Hkv; ++h) add_attention(ev.layer, ev.q, h, ev.cache.head_keys(ev.layer, h), pos, 0);
    });
  }
  // The kept set the rule leaves out of `live` (positions, ascending), for one head.
  auto keep = [&](int64_t layer, int64_t h, const std::vector<int64_t>& live) {
    std::vector<int64_t> order(live);
    const auto& tot = totals[layer][h];
    const int64_t newest_from = live[live.size() - static_cast<size_t>(recent)];
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double sa = a >= newest_from ? 1e300 : tot.at(a), sb = b >= newest_from ? 1e300 : tot.at(b);
      return sa > sb;
    });
    order.resize(static_cast<size_t>(budget));
    std::sort(order.begin(), order.end());
    return order;
  };
  std::vector<std::vector<std::vector<int64_t>>> expected(cfg.n_layer, std::vector<std::vector<int64_t>>(Hkv));
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    for (int64_t h = 0; h < Hkv; ++h) {
      std::vector<int64_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      expected[l][h] = keep(l, h, all);  // the prefill's eviction
    }
  const Pipeline pipeline(*registry_, "h2o:recent=16+decoding");
  GenerateRequest req;
  req.prompt_ids = ids;
  req.max_new_tokens = 96;
  req.pipeline = &pipeline;
  req.budget = BudgetSpec{BudgetSpec::Unit::kStored, double(budget)};
  int64_t checked = 0;
  req.decode_probe = [&](const LayerEvent& ev, int64_t) {
    for (int64_t h = 0; h < Hkv; ++h) {
      const std::vector<int64_t> live = to_vec(ev.cache.head_positions(ev.layer, h));
      std::vector<int64_t> want = expected[ev.layer][h];
      want.push_back(live.back());  // the step's own entry
      ASSERT_EQ(live, want) << "layer " << ev.layer << " kv head " << h << " after " << checked << " checks";
      add_attention(ev.layer, ev.q, h, ev.cache.head_keys(ev.layer, h), live, static_cast<int64_t>(live.size()) - 1);
      expected[ev.layer][h] = keep(ev.layer, h, live);
      ++checked;
    }
  };
  const GenerateResult r = generate(engine, req);
  EXPECT_EQ(checked, (r.decode_steps) * cfg.n_layer * Hkv);
  EXPECT_EQ(r.decode_steps, 95);
}

// The CUDA graph's eviction (Pipeline::evict_decode_device: rank, then KvCache::drop_lowest on
// the device, the host lengths committed after the step) keeps what evict_decode's retain keeps,
// in the same order: at every step and layer of a run at its cap, both applied to copies of the
// cache the attention read (here on the CPU; CudaDecodeGraph runs it captured).
TEST_F(DecodeEviction, InPlaceDropKeepsWhatRetainKeeps) {
  const std::vector<int32_t> ids = prompt_ids(200);
  const Engine engine(*model_);
  const ModelConfig& cfg = model_->config;
  const int64_t budget = 48;
  for (const std::string spec : {"tova+decoding", "keydiff+decoding", "streamingllm:sink=4+decoding", "knorm+decoding",
                                 "tova:gqa=max+decoding"}) {
    const Pipeline pipeline(*registry_, spec);
    ASSERT_TRUE(pipeline.evicts_in_place()) << spec;
    int64_t compared = 0;
    GenerateRequest req;
    req.prompt_ids = ids;
    req.max_new_tokens = 12;
    req.pipeline = &pipeline;
    req.budget = BudgetSpec{BudgetSpec::Unit::kStored, double(budget)};
    req.decode_probe = [&](const LayerEvent& ev, int64_t) {
      KvCache retained = ev.cache.clone(), dropped = ev.cache.clone();
      const int64_t n = ev.cache.layer(ev.layer).length[0];
      ASSERT_EQ(n, budget + 1) << spec;  // the step's entry past the cap
      pipeline.evict_decode(LayerEvent{ev.config, ev.layer, ev.q, retained}, 0, budget);
      const at::Tensor length = at::full({cfg.n_head_kv}, n, at::kLong);
      pipeline.evict_decode_device(ev.config, ev.layer, ev.q[0], dropped, budget, length);
      EXPECT_TRUE(at::equal(length, at::full({cfg.n_head_kv}, budget, at::kLong))) << spec;
      dropped.commit_drop(ev.layer);
      ASSERT_EQ(dropped.layer(ev.layer).length, retained.layer(ev.layer).length) << spec;
      EXPECT_TRUE(at::equal(dropped.positions(ev.layer), retained.positions(ev.layer))) << spec << " " << ev.layer;
      EXPECT_TRUE(at::equal(dropped.keys(ev.layer), retained.keys(ev.layer))) << spec << " " << ev.layer;
      EXPECT_TRUE(at::equal(dropped.values(ev.layer), retained.values(ev.layer))) << spec << " " << ev.layer;
      ++compared;
    };
    (void)generate(engine, req);
    EXPECT_EQ(compared, 11 * cfg.n_layer) << spec;
  }
  // An Ada-KV head budget drops unevenly: not in place. Interval 8 keeps the top-40 of 48 in place.
  EXPECT_TRUE(Pipeline(*registry_, "tova+decoding:interval=8,target=40").evicts_in_place());
  EXPECT_FALSE(Pipeline(*registry_, "tova+adakv+decoding").evicts_in_place());
  // H2O's running totals follow in a device buffer (begin_decode_device): in place too, at
  // interval 1 only (its totals grow at every step, evicting or not).
  EXPECT_TRUE(Pipeline(*registry_, "h2o:recent=16+decoding").evicts_in_place());
  EXPECT_FALSE(Pipeline(*registry_, "h2o:recent=16+decoding:interval=4").evicts_in_place());
}

// kvpress DecodingPress in place (the CUDA graph's path: evict_decode_device at every interval-th
// step, KvCache::keep_in_place) against the eager path (evict_decode: retain re-packs): the same
// tokens through both caches, every layer's positions, keys and values equal after every step.
TEST_F(DecodeEviction, IntervalInPlaceKeepsWhatTheEagerPathKeepsEveryStep) {
  const std::vector<int32_t> ids = prompt_ids(200);
  const Engine engine(*model_);
  const ModelConfig& cfg = model_->config;
  const int64_t budget = 48, steps = 20;
  for (const std::string spec : {"tova+decoding:interval=4", "keydiff+decoding:interval=8"}) {
    const Pipeline eager(*registry_, spec), in_place(*registry_, spec);
    ASSERT_TRUE(in_place.evicts_in_place()) << spec;
    const int64_t interval = in_place.decode_interval();
    KvCache a = engine.new_cache(static_cast<int64_t>(ids.size()) + steps + 1);
    KvCache b = engine.new_cache(static_cast<int64_t>(ids.size()) + steps + 1);
    at::Tensor la = prefill_compressed(eager, a, ids, budget, steps);
    at::Tensor lb = prefill_compressed(in_place, b, ids, budget, steps);
    ASSERT_TRUE(at::equal(la, lb)) << spec;
    int64_t evictions = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const int32_t tok[1] = {static_cast<int32_t>(la.argmax().item<int64_t>())};
      la = engine.forward(a, tok, false, [&](const LayerEvent& ev) { eager.evict_decode(ev, step, budget); });
      lb = engine.forward(b, tok, false, [&](const LayerEvent& ev) {
        if ((step + 1) % interval != 0) return;
        const at::Tensor length = at::full({cfg.n_head_kv}, budget + interval, at::kLong);
        in_place.evict_decode_device(ev.config, ev.layer, ev.q[0], ev.cache, budget, length);
        EXPECT_TRUE(at::equal(length, at::full({cfg.n_head_kv}, budget, at::kLong)));
        ev.cache.commit_drop(ev.layer, interval);
        ++evictions;
      });
      ASSERT_TRUE(at::equal(la, lb)) << spec << " step " << step;
      expect_same_cache(a, b, spec + " step " + std::to_string(step));
    }
    EXPECT_EQ(evictions, steps / interval * cfg.n_layer) << spec;
  }
  // keep_in_place refuses what it cannot do, and commit_drop a count past a head's entries.
  KvCache c = engine.new_cache(64);
  const std::vector<int32_t> few(ids.begin(), ids.begin() + 10);
  (void)engine.prefill(c, few);
  const at::Tensor kept = at::arange(4, at::kLong).repeat({cfg.n_head_kv, 1});
  EXPECT_THROW(c.keep_in_place(0, kept, 65), std::logic_error);                       // past the capacity
  EXPECT_THROW(c.keep_in_place(0, kept, 3), std::invalid_argument);                   // more kept than live
  EXPECT_THROW(c.keep_in_place(0, kept.narrow(0, 0, 1), 10), std::invalid_argument);  // one head's rows
  EXPECT_THROW(c.commit_drop(0, 11), std::logic_error);                               // 10 live entries
  c.keep_in_place(0, kept.narrow(1, 1, 3), 10);                                       // rows 1, 2, 3
  c.commit_drop(0, 7);
  EXPECT_EQ(to_vec(c.positions(0)[0]), (std::vector<int64_t>{1, 2, 3}));
}

// H2O in place (the CUDA graph's path: begin_decode_device, then evict_decode_device every step
// with the running totals in a buffer of target + 1 columns) against the eager path (evict_decode:
// retain, the totals re-packed): the same tokens through both caches, every layer's positions,
// keys and values equal after every step, and the same logits.
TEST_F(DecodeEviction, H2oInPlaceKeepsWhatTheEagerPathKeepsEveryStep) {
  const std::vector<int32_t> ids = prompt_ids(200);
  const Engine engine(*model_);
  const ModelConfig& cfg = model_->config;
  const int64_t budget = 48, steps = 24;
  const Pipeline eager(*registry_, "h2o:recent=16+decoding"), in_place(*registry_, "h2o:recent=16+decoding");
  ASSERT_TRUE(in_place.evicts_in_place());
  KvCache a = engine.new_cache(static_cast<int64_t>(ids.size()) + steps + 1);
  KvCache b = engine.new_cache(static_cast<int64_t>(ids.size()) + steps + 1);
  at::Tensor la = prefill_compressed(eager, a, ids, budget, steps);
  at::Tensor lb = prefill_compressed(in_place, b, ids, budget, steps);
  ASSERT_TRUE(at::equal(la, lb));
  EXPECT_FALSE(in_place.begin_decode_device(cfg, budget + 1));  // the totals cover 48 entries, not 49
  ASSERT_TRUE(in_place.begin_decode_device(cfg, budget));
  for (int64_t step = 0; step < steps; ++step) {
    const int32_t tok[1] = {static_cast<int32_t>(la.argmax().item<int64_t>())};
    la = engine.forward(a, tok, false, [&](const LayerEvent& ev) { eager.evict_decode(ev, step, budget); });
    lb = engine.forward(b, tok, false, [&](const LayerEvent& ev) {
      const at::Tensor length = at::full({cfg.n_head_kv}, budget + 1, at::kLong);
      in_place.evict_decode_device(ev.config, ev.layer, ev.q[0], ev.cache, budget, length);
      EXPECT_TRUE(at::equal(length, at::full({cfg.n_head_kv}, budget, at::kLong)));
      ev.cache.commit_drop(ev.layer);
    });
    ASSERT_TRUE(at::equal(la, lb)) << "step " << step;
    expect_same_cache(a, b, "step " + std::to_string(step));
  }
  in_place.end_decode_device();
  // The totals are back where the eager steps read them: one more step each way agrees.
  const int32_t tok[1] = {static_cast<int32_t>(la.argmax().item<int64_t>())};
  la = engine.forward(a, tok, false, [&](const LayerEvent& ev) { eager.evict_decode(ev, steps, budget); });
  lb = engine.forward(b, tok, false, [&](const LayerEvent& ev) { in_place.evict_decode(ev, steps, budget); });
  EXPECT_TRUE(at::equal(la, lb));
  for (int64_t l = 0; l < cfg.n_layer; ++l) EXPECT_TRUE(at::equal(a.positions(l), b.positions(l))) << l;
  EXPECT_THROW(in_place.evict_decode_device(cfg, 0, at::zeros({cfg.n_head, cfg.head_dim}), b, budget,
                                            at::full({cfg.n_head_kv}, budget + 1, at::kLong)),
               std::logic_error);  // after end_decode_device: no buffers
}

TEST_F(DecodeEviction, ScorersWithoutADecodeStepRuleAndDecodeTimeStagesAreRefused) {
  EXPECT_THROW(Pipeline(*registry_, "snapkv+decoding"), InputError);         // ranks with its last 32 queries
  EXPECT_THROW(Pipeline(*registry_, "h2o:norm=mean+decoding"), InputError);  // a mean needs query counts
  EXPECT_THROW(Pipeline(*registry_, "h2o:gqa=max+decoding"), InputError);    // a max does not add up
  EXPECT_NO_THROW(Pipeline(*registry_, "h2o:recent=16+decoding"));
  EXPECT_THROW(Pipeline(*registry_, "h2o:recent=16+pyramid+decoding"), InputError);  // one budget per layer
  EXPECT_THROW(Pipeline(*registry_, "decoding"), InputError);
  EXPECT_THROW(Pipeline(*registry_, "tova+decoding+quest"), InputError);
  EXPECT_NO_THROW(Pipeline(*registry_, "keydiff+decoding"));
  EXPECT_NO_THROW(Pipeline(*registry_, "knorm+decoding:interval=16,target=128"));
}

}  // namespace
}  // namespace kvscope
