// The time-resolved record of cache decisions (timeline.h, timeline_recorder.h) through generate()
// on pycode-16m: eviction steps against the ring buffer's formula and against the kept sets,
// per-step selections against a brute-force recomputation of each policy's formula from the step's
// queries and keys, recall against a brute-force value per head, the recorded exact top-k against a
// brute-force top-k of the same logits (and recall as its share selected), multi-turn step numbering.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include <unistd.h>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/head_pattern.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/timeline_recorder.h"
#include "pycode_fixture.h"
#include "topk_reference.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

/// What the test probe saw in one layer of one decode step: the queries and each KV head's live
/// keys (fp64, storage order) with their positions.
struct StepLayer {
  at::Tensor q;                           // [n_head, D] fp64
  std::vector<at::Tensor> keys;           // per KV head [n, D] fp64
  std::vector<std::vector<int64_t>> pos;  // per KV head, storage order
};
using Probe = std::map<std::pair<int64_t, int64_t>, StepLayer>;  // (step, layer)

std::vector<int64_t> to_vec(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

using test::topk_ref;

std::vector<double> logits_of(const at::Tensor& K, const at::Tensor& q) {
  const at::Tensor s = at::mv(K, q).contiguous();
  return {s.data_ptr<double>(), s.data_ptr<double>() + s.numel()};
}

/// HSA (RocketKV §3.4) / SparQ (page 1) selection rows by brute force: channels by group-summed
/// |q|, page bounds by the group's sign, temperature sqrt(D·Σ|q_sel|/Σ|q|), softmax over tokens,
/// group sum, top-k2.
std::vector<int64_t> hsa_rows(const at::Tensor& K, const at::Tensor& q, int64_t h, int64_t G, int64_t page, int64_t k1,
                              int64_t k2) {
  const int64_t N = K.size(0), D = K.size(1);
  const at::Tensor qg = q.narrow(0, h * G, G);
  const at::Tensor abs_sum = qg.abs().sum(0);
  const auto chan = topk_ref(std::vector<double>(abs_sum.data_ptr<double>(), abs_sum.data_ptr<double>() + D), k1);
  std::vector<double> total(N, 0.0);
  for (int64_t g = 0; g < G; ++g) {
    const at::Tensor qh = qg[g];
    std::vector<double> s(N, 0.0);
    for (int64_t p = 0; p * page < N; ++p) {
      const at::Tensor rows = K.narrow(0, p * page, std::min(page, N - p * page));
      const at::Tensor mx = std::get<0>(rows.max(0)), mn = std::get<0>(rows.min(0));
      double b = 0;
      for (int64_t c : chan) {
        const bool use_max = qg.select(1, c).sum().item<double>() >= 0;
        b += qh[c].item<double>() * (use_max ? mx[c] : mn[c]).item<double>();
      }
      for (int64_t i = p * page; i < std::min(N, (p + 1) * page); ++i) s[i] = b;
    }
    double sel_abs = 0;
    for (int64_t c : chan) sel_abs += std::abs(qh[c].item<double>());
    const double scale = std::sqrt(D * sel_abs / qh.abs().sum().item<double>());
    double m = -1e300, z = 0;
    for (double& x : s) m = std::max(m, x /= scale);
    for (double& x : s) z += (x = std::exp(x - m));
    for (int64_t i = 0; i < N; ++i) total[i] += s[i] / z;
  }
  return topk_ref(total, k2);
}

/// Quest (Tang et al. 2024 §3.2) rows: u[P] = Σ_g Σ_j max(q_j·Kmax[P,j], q_j·Kmin[P,j]), top pages.
std::vector<int64_t> quest_rows(const at::Tensor& K, const at::Tensor& q, int64_t h, int64_t G, int64_t page,
                                int64_t k) {
  const int64_t N = K.size(0);
  std::vector<double> u((N + page - 1) / page, 0.0);
  for (int64_t p = 0; p < static_cast<int64_t>(u.size()); ++p) {
    const at::Tensor rows = K.narrow(0, p * page, std::min(page, N - p * page));
    const at::Tensor mx = std::get<0>(rows.max(0)), mn = std::get<0>(rows.min(0));
    for (int64_t g = 0; g < G; ++g) {
      const at::Tensor qh = q[h * G + g];
      u[p] += at::maximum(qh * mx, qh * mn).sum().item<double>();
    }
  }
  std::vector<int64_t> out;
  for (int64_t p : topk_ref(u, (k + page - 1) / page))
    for (int64_t i = p * page; i < std::min(N, (p + 1) * page); ++i) out.push_back(i);
  return out;
}

/// Exact-TopK: each query head's own top-k; the KV head reads their union.
std::vector<int64_t> exact_rows(const at::Tensor& K, const at::Tensor& q, int64_t h, int64_t G, int64_t k) {
  std::set<int64_t> u;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r : topk_ref(logits_of(K, q[h * G + g]), k)) u.insert(r);
  return {u.begin(), u.end()};
}

class Timelines : public test::PycodeSuite {
 protected:
  static GenerateRequest request(const Pipeline* p, BudgetSpec b, int64_t n_new) {
    GenerateRequest r;
    r.prompt_ids = textwrap_ids();
    r.max_new_tokens = n_new;
    r.pipeline = p;
    r.budget = b;
    r.capture = CaptureLevel::kSummary;
    return r;
  }
  /// Runs `req` with a probe recording every decode step's queries and keys.
  static GenerateResult run_probed(GenerateRequest req, Probe& probe) {
    req.decode_probe = [&](const LayerEvent& ev, int64_t step) {
      StepLayer& s = probe[{step, ev.layer}];
      s.q = ev.q[0].to(at::kDouble).clone();
      for (int64_t h = 0; h < ev.cache.n_head_kv(); ++h) {
        s.keys.push_back(ev.cache.head_keys(ev.layer, h).to(at::kDouble).clone());
        s.pos.push_back(to_vec(ev.cache.head_positions(ev.layer, h)));
      }
    };
    return generate(Engine(*model_), req);
  }
  static fs::path write_pattern(const HeadPattern& p) {
    const fs::path f = fs::temp_directory_path() / ("kvscope_timeline_" + std::to_string(::getpid()) + ".json");
    save_head_pattern(f, p);
    return f;
  }
};

/// Streaming heads (sink S, window W) against the ring buffer's formula: position p >= S leaves when
/// position p + W is appended, at decode step p + W - n + 1 (n prompt tokens), or at the prefill if
/// that is <= 0; sinks and dense heads never leave.
void expect_ring_formula(const Timeline& t, int64_t n, int64_t S, int64_t W, const std::vector<bool>& streaming_head) {
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h)
      for (int64_t p = 0; p < t.n_positions; ++p) {
        int64_t want = -1;
        if (streaming_head[h] && p >= S) {
          const int64_t s = p + W - n + 1;
          want = s <= 0 ? 0 : (s <= t.n_steps ? s : -1);
        }
        ASSERT_EQ(t.evicted_step(l, h, p), want) << "layer " << l << " head " << h << " position " << p;
        const auto by = static_cast<EvictionCause>(t.evicted_by[(l * t.n_head_kv + h) * t.n_positions + p]);
        EXPECT_EQ(by, want < 0 ? EvictionCause::kNone : want == 0 ? EvictionCause::kPrefill : EvictionCause::kRing);
      }
}

TEST_F(Timelines, StreamingHeadEvictionsFollowTheRingFormula) {
  const int64_t S = 4, W = 60, n_new = 40;
  HeadPattern pattern;
  pattern.layers.assign(8, {HeadPlan{true, S, W}, HeadPlan{}});
  const fs::path f = write_pattern(pattern);
  const Pipeline heads(*registry_, "heads:pattern=" + f.string());
  const GenerateResult r = generate(Engine(*model_), request(&heads, {}, n_new));
  fs::remove(f);
  const Timeline& t = r.timeline;
  ASSERT_EQ(t.check(), "");
  const int64_t n = static_cast<int64_t>(textwrap_ids().size());
  EXPECT_EQ(t.n_steps, r.decode_steps);
  EXPECT_EQ(t.n_positions, n + r.decode_steps);
  for (int64_t p = 0; p < t.n_positions; ++p) EXPECT_EQ(t.entered_at[p], p < n ? 0 : p - n + 1);
  expect_ring_formula(t, n, S, W, {true, false});
  // The live set of a streaming head is always S sinks + the W most recent positions.
  TimelineCursor c(t, 3, 0);
  for (int64_t s = 0; s <= t.n_steps; ++s) {
    c.advance_to(s);
    ASSERT_EQ(c.live(), t.live_positions(3, 0, s));
    ASSERT_EQ(static_cast<int64_t>(c.live().size()), S + W) << "step " << s;
    EXPECT_EQ(c.live()[S], n + s - W) << "oldest non-sink at step " << s;
  }
}

TEST_F(Timelines, RingThatIsNotFullAfterPrefillStartsEvictingWhenFull) {
  const int64_t S = 4, W = 50, n_new = 40;
  HeadPattern pattern;
  pattern.layers.assign(8, {HeadPlan{}, HeadPlan{true, S, W}});
  const fs::path f = write_pattern(pattern);
  const Pipeline heads(*registry_, "heads:pattern=" + f.string());
  GenerateRequest req = request(&heads, {}, n_new);
  req.prompt_ids.resize(40);
  const GenerateResult r = generate(Engine(*model_), req);
  fs::remove(f);
  ASSERT_EQ(r.timeline.check(), "");
  ASSERT_GT(r.timeline.n_steps, 20) << "the ring must fill and wrap";
  expect_ring_formula(r.timeline, 40, S, W, {false, true});
}

TEST_F(Timelines, PrefillEvictionsAreTheComplementOfTheKeptSets) {
  const Pipeline snap(*registry_, "snapkv:window=16");
  const GenerateResult r = generate(Engine(*model_), request(&snap, {BudgetSpec::Unit::kStored, 100}, 6));
  const Timeline& t = r.timeline;
  ASSERT_EQ(t.check(), "");
  const int64_t n = static_cast<int64_t>(textwrap_ids().size());
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
      const std::set<int64_t> kept(r.kept[l][h].begin(), r.kept[l][h].end());
      for (int64_t p = 0; p < t.n_positions; ++p)
        ASSERT_EQ(t.evicted_step(l, h, p), p < n && !kept.count(p) ? 0 : -1) << l << ":" << h << " position " << p;
      std::vector<int64_t> live0(kept.begin(), kept.end());
      EXPECT_EQ(t.live_positions(l, h, 0), live0);
    }
  EXPECT_TRUE(t.pages.empty() && t.tokens.empty()) << "no decode-time selection policy";
}

struct SelectionCase {
  std::string spec;
  std::function<std::vector<int64_t>(const at::Tensor& K, const at::Tensor& q, int64_t h, int64_t G)> rows;
};

TEST_F(Timelines, RecordedSelectionsEqualBruteForcePerStepAndHead) {
  const std::vector<SelectionCase> cases = {
      {"quest:page=4,k=10", [](auto& K, auto& q, int64_t h, int64_t G) { return quest_rows(K, q, h, G, 4, 10); }},
      {"hsa:stage1=false,page=3,k1=5,k2=11",
       [](auto& K, auto& q, int64_t h, int64_t G) { return hsa_rows(K, q, h, G, 3, 5, 11); }},
      {"sparq:r=4,k=9", [](auto& K, auto& q, int64_t h, int64_t G) { return hsa_rows(K, q, h, G, 1, 4, 9); }},
      {"exacttopk:k=5", [](auto& K, auto& q, int64_t h, int64_t G) { return exact_rows(K, q, h, G, 5); }},
  };
  for (const SelectionCase& c : cases) {
    SCOPED_TRACE(c.spec);
    const Pipeline p(*registry_, c.spec);
    Probe probe;
    GenerateRequest req = request(&p, {BudgetSpec::Unit::kFetched, 64}, 5);
    req.prompt_ids.resize(200);
    const GenerateResult r = run_probed(req, probe);
    const Timeline& t = r.timeline;
    ASSERT_EQ(t.check(), "");
    ASSERT_EQ(t.n_steps, 4);
    const int64_t G = model_->config.n_head / model_->config.n_head_kv;
    Timeline pages_only = t;
    pages_only.tokens.clear();
    int64_t compared = 0;
    for (const auto& [key, s] : probe) {
      const auto [step, layer] = key;
      for (int64_t h = 0; h < t.n_head_kv; ++h) {
        std::vector<int64_t> want;
        for (int64_t row : c.rows(s.keys[h], s.q, h, G)) want.push_back(s.pos[h][row]);
        std::sort(want.begin(), want.end());
        const auto got = t.selected_positions(layer, h, step);
        ASSERT_TRUE(got.has_value()) << "step " << step << " layer " << layer << " head " << h;
        ASSERT_TRUE(t.has_tokens(layer, h, step)) << "a small run records every head per token";
        EXPECT_EQ(*got, want) << "step " << step << " layer " << layer << " head " << h;
        // The page record holds every live position of the pages the selection touched.
        std::vector<int64_t> live = s.pos[h];
        std::sort(live.begin(), live.end());
        std::set<int64_t> want_pages;
        for (int64_t pos : want)
          want_pages.insert((std::lower_bound(live.begin(), live.end(), pos) - live.begin()) / t.page);
        std::vector<int64_t> page_positions;
        for (int64_t pg : want_pages)
          for (int64_t rank = pg * t.page; rank < std::min<int64_t>(live.size(), (pg + 1) * t.page); ++rank)
            page_positions.push_back(live[rank]);
        EXPECT_EQ(*pages_only.selected_positions(layer, h, step), page_positions);
        ++compared;
      }
    }
    EXPECT_EQ(compared, t.n_steps * t.n_layer * t.n_head_kv);
  }
}

TEST_F(Timelines, PinnedHeadsAloneArePerTokenInALargeRecord) {
  const Pipeline p(*registry_, "quest:page=16,k=32");
  GenerateRequest req = request(&p, {BudgetSpec::Unit::kFetched, 64}, 3);
  req.pinned_heads = {{2, 1}};
  // positions_needed x steps x heads is small here: make the record "large" through the recorder.
  TimelineOptions o;
  o.pinned = req.pinned_heads;
  o.all_tokens_bytes = 0;
  o.page = 16;
  o.recall = true;  // the exact top-k too, for the pinned head only
  TimelineRecorder rec(model_->config.n_layer, model_->config.n_head_kv, 600, 4, o);
  KvCache cache = Engine(*model_).new_cache(600);
  Engine(*model_).prefill(cache, req.prompt_ids);
  rec.after_prefill(cache.host_positions(), 0, static_cast<int64_t>(req.prompt_ids.size()));
  rec.begin_step();
  const int32_t tok[1] = {5};
  auto policy = registry_->make("quest", {{"page", "16"}, {"k", "32"}});
  auto* d = dynamic_cast<DecodeAttentionPolicy*>(policy.get());
  d->configure(RunBudget{req.budget, static_cast<int64_t>(req.prompt_ids.size()), 3}, model_->config);
  for (int64_t l = 0; l < model_->config.n_layer; ++l)
    d->on_prefill(l, LayerPrefill{model_->config, l, {}, {}, {}}, cache);
  Engine(*model_).forward(
      cache, tok, false,
      [&](const LayerEvent& ev) {
        rec.after_layer(ev.cache, ev.layer, ev.cache.next_position());
        rec.on_selection(ev.cache, ev.layer, d->last_selection(), ev.q[0]);
      },
      d);
  rec.after_decode(cache, cache.next_position() - 1);
  const Timeline t = rec.finish(cache.next_position());
  ASSERT_EQ(t.check(), "");
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
      EXPECT_EQ(t.has_tokens(l, h, 1), l == 2 && h == 1) << l << ":" << h;
      EXPECT_EQ(t.has_exact(l, h, 1), l == 2 && h == 1) << l << ":" << h;
      EXPECT_FALSE(std::isnan(t.recall_at(1, l, h))) << "recall of every head, exact top-k of the pinned one";
      ASSERT_TRUE(t.selected_positions(l, h, 1).has_value());
      EXPECT_LE(t.selected_positions(l, h, 1)->size(), 32u) << "ceil(32 / 16) pages";
    }
  // Quest's pages are the record's pages: the token and the page record of the pinned head agree.
  Timeline pages_only = t;
  pages_only.tokens.clear();
  EXPECT_EQ(*t.selected_positions(2, 1, 1), *pages_only.selected_positions(2, 1, 1));
  ASSERT_EQ(t.exact.size(), static_cast<size_t>(t.n_layer));
  EXPECT_EQ(t.exact_positions(2, 1, 1)->size(), t.selected_positions(2, 1, 1)->size()) << "k = entries selected";
}

/// The share of `a` (sorted) in `b` (sorted).
int64_t common(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return static_cast<int64_t>(both.size());
}

TEST_F(Timelines, ExactTopKEqualsBruteForcePerStepAndRecallIsItsShareSelected) {
  // Capture full records, for every per-token head (a small run: all of them), the exact top-k the
  // recall is measured against: against a brute-force fp64 top-k of the probe's queries and keys.
  struct Case {
    std::string spec;
    bool per_query_head;  // [G, k] selections (Exact-TopK): the union of each query head's own top-k
  };
  for (const Case& c : {Case{"quest:page=4,k=10", false}, Case{"hsa:stage1=false,page=3,k1=5,k2=11", false},
                        Case{"exacttopk:k=5", true}}) {
    SCOPED_TRACE(c.spec);
    const Pipeline p(*registry_, c.spec);
    Probe probe;
    GenerateRequest req = request(&p, {BudgetSpec::Unit::kFetched, 64}, 6);
    req.prompt_ids.resize(200);
    req.capture = CaptureLevel::kFull;
    req.pinned_heads = {{3, 1}};
    const GenerateResult r = run_probed(req, probe);
    const Timeline& t = r.timeline;
    ASSERT_EQ(t.check(), "");
    ASSERT_EQ(t.exact.size(), static_cast<size_t>(t.n_layer));
    const int64_t G = model_->config.n_head / model_->config.n_head_kv;
    int64_t same = 0, total = 0;
    for (const auto& [key, s] : probe) {
      const auto [step, layer] = key;
      for (int64_t h = 0; h < t.n_head_kv; ++h) {
        const std::string where =
            "step " + std::to_string(step) + " layer " + std::to_string(layer) + " head " + std::to_string(h);
        const auto sel = t.selected_positions(layer, h, step);
        const auto got = t.exact_positions(layer, h, step);
        ASSERT_TRUE(sel && got) << where;
        ASSERT_TRUE(std::is_sorted(got->begin(), got->end())) << where;
        // Brute force over the probe's fp64 logits, in storage rows -> positions.
        std::vector<std::vector<double>> logits;
        for (int64_t g = 0; g < G; ++g) logits.push_back(logits_of(s.keys[h], s.q[h * G + g]));
        std::vector<std::vector<int64_t>> tops;  // row sets the oracle is made of
        std::vector<int64_t> want;
        int64_t k = 0;
        if (c.per_query_head) {
          k = 5;
          std::set<int64_t> u;
          for (int64_t g = 0; g < G; ++g) {
            tops.push_back(topk_ref(logits[g], k));
            u.insert(tops.back().begin(), tops.back().end());
          }
          want.assign(u.begin(), u.end());
        } else {
          k = static_cast<int64_t>(sel->size());
          std::vector<double> sum(logits[0].size(), 0.0);
          for (const auto& l : logits)
            for (size_t i = 0; i < l.size(); ++i) sum[i] += l[i];
          tops.push_back(topk_ref(sum, k));
          want = tops.back();
          logits = {sum};
        }
        for (int64_t& row : want) row = s.pos[h][row];
        std::sort(want.begin(), want.end());
        ++total;
        same += *got == want;
        // Where fp32 and fp64 order two near-equal logits differently, the recorded set is still a
        // top-k: per oracle row set, nothing outside beats what is inside by more than rounding.
        std::map<int64_t, int64_t> row_of;
        for (size_t row = 0; row < s.pos[h].size(); ++row) row_of[s.pos[h][row]] = static_cast<int64_t>(row);
        std::set<int64_t> got_rows;
        for (int64_t pos : *got) got_rows.insert(row_of.at(pos));
        if (!c.per_query_head) {
          ASSERT_EQ(static_cast<int64_t>(got->size()), k) << where;
          double low = 1e300, high = -1e300, scale = 1;
          for (size_t row = 0; row < logits[0].size(); ++row) {
            const double v = logits[0][row];
            scale = std::max(scale, std::abs(v));
            if (got_rows.count(static_cast<int64_t>(row)))
              low = std::min(low, v);
            else
              high = std::max(high, v);
          }
          EXPECT_GE(low, high - 1e-4 * scale) << where;
          // recall = |selected ∩ exact| / k, with the very set recorded.
          EXPECT_FLOAT_EQ(t.recall_at(step, layer, h), float(common(*sel, *got)) / float(k)) << where;
        } else {
          EXPECT_LE(static_cast<int64_t>(got->size()), G * k) << where;
          EXPECT_GE(static_cast<int64_t>(got->size()), k) << where;
          // Exact-TopK selects its own oracle: everything of it is selected.
          EXPECT_EQ(common(*sel, *got), static_cast<int64_t>(got->size())) << where;
          EXPECT_NEAR(t.recall_at(step, layer, h), 1.0f, 1e-6) << where;
        }
      }
    }
    EXPECT_EQ(total, t.n_steps * t.n_layer * t.n_head_kv);
    EXPECT_GE(same, total * 95 / 100) << "exact top-k off by a boundary swap too often";
  }
}

TEST_F(Timelines, OnExactRecordsASecondProducersRowsAsRanks) {
  // A producer other than on_selection: storage rows in any order, duplicates; earlier heads padded.
  TimelineOptions o;
  o.page = 4;
  KvCache cache = Engine(*model_).new_cache(64);
  const std::vector<int32_t> ids = textwrap_ids();
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 20);
  Engine(*model_).prefill(cache, prompt);
  TimelineRecorder rec(model_->config.n_layer, model_->config.n_head_kv, 64, 4, o);
  rec.after_prefill(cache.host_positions(), 0, 20);
  rec.on_exact(cache, 0, 0, {1, 2});  // before the first decode step: ignored
  rec.begin_step();
  const int32_t tok[1] = {7};
  Engine(*model_).forward(cache, tok, false,
                          [&](const LayerEvent& ev) { rec.after_layer(ev.cache, ev.layer, ev.cache.next_position()); });
  rec.after_decode(cache, cache.next_position() - 1);
  rec.on_exact(cache, 2, 1, {20, 3, 3, 0});
  EXPECT_THROW(rec.on_exact(cache, 2, 0, {1}), std::logic_error) << "a head before one already recorded";
  EXPECT_THROW(rec.on_exact(cache, 2, 1, {1}), std::logic_error) << "twice";
  EXPECT_THROW(rec.on_exact(cache, 3, 0, {21}), std::logic_error) << "past the head's 21 rows";
  const Timeline t = rec.finish(cache.next_position());
  ASSERT_EQ(t.check(), "");
  EXPECT_EQ(t.exact_positions(2, 1, 1), (std::vector<int64_t>{0, 3, 20}));
  EXPECT_FALSE(t.exact_positions(2, 0, 1).has_value());
  EXPECT_FALSE(t.exact_positions(0, 0, 1).has_value());
  EXPECT_TRUE(t.pages.empty() && t.tokens.empty()) << "no selection given";
}

TEST_F(Timelines, OnRecallStoresAStepsValuesAndReturnsTheirMean) {
  // The graph path's producer (DecodeOracle): one value per (layer, KV head), NaN where unmeasured.
  TimelineOptions o;
  o.recall = true;
  const int64_t L = 2, H = 3;
  TimelineRecorder rec(L, H, 8, 4, o);
  EXPECT_FALSE(rec.on_recall(std::vector<float>(L * H, 0.5f)).has_value()) << "before the first decode step";
  rec.begin_step();
  rec.begin_step();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {0.25f, nan, 1.0f, nan, 0.5f, nan};
  const auto mean = rec.on_recall(v);
  ASSERT_TRUE(mean.has_value());
  EXPECT_DOUBLE_EQ(*mean, (0.25 + 1.0 + 0.5) / 3);
  EXPECT_FALSE(rec.on_recall(std::vector<float>(L * H, nan)).has_value()) << "nothing measured";
  EXPECT_THROW(rec.on_recall(std::vector<float>(L * H + 1, 0.f)), std::invalid_argument);
  rec.on_recall(v);
  const Timeline t = rec.finish(8);
  EXPECT_TRUE(std::isnan(t.recall_at(1, 0, 0))) << "step 1 had no values";
  EXPECT_FLOAT_EQ(t.recall_at(2, 0, 0), 0.25f);
  EXPECT_FLOAT_EQ(t.recall_at(2, 0, 2), 1.0f);
  EXPECT_FLOAT_EQ(t.recall_at(2, 1, 1), 0.5f);
  EXPECT_TRUE(std::isnan(t.recall_at(2, 1, 2)));
}

TEST_F(Timelines, RecallEqualsBruteForcePerHead) {
  const Pipeline p(*registry_, "quest:page=4,k=10");
  Probe probe;
  GenerateRequest req = request(&p, {BudgetSpec::Unit::kFetched, 64}, 5);
  req.prompt_ids.resize(150);
  req.capture = CaptureLevel::kFull;
  const GenerateResult r = run_probed(req, probe);
  const Timeline& t = r.timeline;
  ASSERT_EQ(t.check(), "");
  ASSERT_FALSE(t.recall.empty());
  const int64_t G = model_->config.n_head / model_->config.n_head_kv;
  int64_t exact = 0, total = 0;
  std::vector<double> step_mean(static_cast<size_t>(t.n_steps), 0.0);
  for (const auto& [key, s] : probe) {
    const auto [step, layer] = key;
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
      const auto rows = quest_rows(s.keys[h], s.q, h, G, 4, 10);
      std::vector<double> logit(static_cast<size_t>(s.keys[h].size(0)), 0.0);
      for (int64_t g = 0; g < G; ++g) {
        const auto d = logits_of(s.keys[h], s.q[h * G + g]);
        for (size_t i = 0; i < d.size(); ++i) logit[i] += d[i];
      }
      const auto top = topk_ref(logit, static_cast<int64_t>(rows.size()));
      std::vector<int64_t> both;
      std::set_intersection(rows.begin(), rows.end(), top.begin(), top.end(), std::back_inserter(both));
      const double want = double(both.size()) / double(rows.size());
      const float got = t.recall_at(step, layer, h);
      // fp32 logits on the engine's side may order two near-equal keys at the boundary differently.
      EXPECT_NEAR(got, want, 1.0 / double(rows.size()) + 1e-6) << step << " " << layer << ":" << h;
      exact += std::abs(got - want) < 1e-6;
      ++total;
      step_mean[step - 1] += got / double(t.n_layer * t.n_head_kv);
    }
  }
  EXPECT_GE(exact, total * 95 / 100) << "recall off by a boundary swap too often";
  ASSERT_EQ(r.selection_recall.size(), step_mean.size());
  for (size_t i = 0; i < step_mean.size(); ++i) EXPECT_NEAR(r.selection_recall[i], step_mean[i], 1e-5);
}

TEST_F(Timelines, TopkUnionCountsDistinctExactTopKPositionsPerQueryHead) {
  // RocketKV Fig. 2's statistic (capture full): per (layer, query head), the distinct positions
  // Exact-TopK(256) picks over the decode steps, against a brute-force union from the probe.
  Probe probe;
  GenerateRequest req = request(nullptr, {}, 6);
  req.prompt_ids.resize(300);
  req.capture = CaptureLevel::kFull;
  const GenerateResult r = run_probed(req, probe);
  ASSERT_TRUE(r.topk_unique.defined());
  const int64_t H = model_->config.n_head, G = H / model_->config.n_head_kv;
  std::map<std::pair<int64_t, int64_t>, std::set<int64_t>> seen;
  for (const auto& [key, s] : probe)
    for (int64_t hq = 0; hq < H; ++hq) {
      const int64_t h = hq / G;
      for (int64_t row : topk_ref(logits_of(s.keys[h], s.q[hq]), 256)) seen[{key.second, hq}].insert(s.pos[h][row]);
    }
  int64_t exact = 0;
  for (const auto& [lh, set] : seen) {
    const int64_t got = r.topk_unique[lh.first][lh.second].item<int64_t>();
    EXPECT_NEAR(got, static_cast<int64_t>(set.size()), 2) << "layer " << lh.first << " head " << lh.second;
    exact += got == static_cast<int64_t>(set.size());
  }
  EXPECT_GE(exact, static_cast<int64_t>(seen.size()) * 9 / 10) << "fp32 vs fp64 boundary ties only";
  EXPECT_GT(r.topk_unique.max().item<int64_t>(), 256) << "the steps pick different positions";
}

TEST_F(Timelines, LaterTurnsAreStepsOfTheirOwn) {
  const Pipeline snap(*registry_, "snapkv:window=16");
  GenerateRequest req = request(&snap, {BudgetSpec::Unit::kStored, 80}, 4);
  req.follow_up_turns = {std::vector<int32_t>(req.prompt_ids.begin() + 1, req.prompt_ids.begin() + 40)};
  const GenerateResult r = generate(Engine(*model_), req);
  const Timeline& t = r.timeline;
  ASSERT_EQ(t.check(), "");
  const int64_t first_decode = static_cast<int64_t>(r.turn_output_ids[0].size()) - 1;
  const int64_t turn_step = first_decode + 1;
  EXPECT_EQ(t.n_steps, r.decode_steps + 1);
  const int64_t n = static_cast<int64_t>(req.prompt_ids.size());
  // The turn's block: the last token of turn 1 and the 39 new ones.
  for (int64_t p = n + first_decode; p < n + first_decode + 40; ++p) EXPECT_EQ(t.entered_at[p], turn_step) << p;
  int64_t by_turn = 0;
  for (size_t i = 0; i < t.evicted_at.size(); ++i) {
    const auto cause = static_cast<EvictionCause>(t.evicted_by[i]);
    EXPECT_EQ(cause == EvictionCause::kTurn, t.evicted_at[i] == turn_step);
    by_turn += cause == EvictionCause::kTurn;
  }
  EXPECT_GT(by_turn, 0) << "the second turn's compression evicts";
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h)
      EXPECT_EQ(static_cast<int64_t>(t.live_positions(l, h, turn_step).size()), 80) << "budget after the turn";
}

TEST_F(Timelines, CaptureOffRecordsNothingAndBadPinsAreRefused) {
  const Pipeline p(*registry_, "quest");
  GenerateRequest req = request(&p, {BudgetSpec::Unit::kFetched, 64}, 3);
  req.capture = CaptureLevel::kOff;
  const GenerateResult off = generate(Engine(*model_), req);
  EXPECT_TRUE(off.timeline.empty());
  ASSERT_EQ(off.bytes_read.size(), 2u);
  for (int64_t b : off.bytes_read) EXPECT_GT(b, 0) << "without capture the policy still counts what it read";
  req.capture = CaptureLevel::kSummary;
  req.pinned_heads = {{8, 0}};
  EXPECT_THROW(generate(Engine(*model_), req), InputError);
}

}  // namespace
}  // namespace kvscope
