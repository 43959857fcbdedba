#include "synthetic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <random>

#include "kvscope/core/tokenizer.h"
#include "kvscope/sessions/session_store.h"
#include "kvscope/sessions/timeline_blobs.h"
#include "run_data.h"

namespace kvscope::gui {
namespace {

using sessions::Blob;

struct Layer {
  std::vector<float> att, cos;        // [H, T]
  std::vector<float> pca;             // [H, T, 2]
  std::vector<float> ch_mean, ch_cv;  // [H, D]
  std::vector<float> summary;         // [H, 7]
};

std::mt19937_64 rng_for(std::uint64_t seed, std::int64_t a, std::int64_t b) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b)};
  return std::mt19937_64(seq);
}

Layer make_layer(const SyntheticSpec& sp, std::int64_t l, const std::vector<float>& importance) {
  const std::int64_t H = sp.n_head_kv, T = sp.n_tok, D = sp.head_dim;
  Layer L;
  L.att.resize(static_cast<std::size_t>(H * T));
  L.cos.resize(static_cast<std::size_t>(H * T));
  L.pca.resize(static_cast<std::size_t>(H * T * 2));
  L.ch_mean.resize(static_cast<std::size_t>(H * D));
  L.ch_cv.resize(static_cast<std::size_t>(H * D));
  L.summary.resize(static_cast<std::size_t>(H * 7));
  const double depth = sp.n_layer > 1 ? static_cast<double>(l) / static_cast<double>(sp.n_layer - 1) : 0.5;
  std::vector<float> sorted(static_cast<std::size_t>(T));
  for (std::int64_t h = 0; h < H; ++h) {
    auto rng = rng_for(sp.seed, l, h);
    std::uniform_real_distribution<double> U(0, 1);
    std::normal_distribution<double> N(0, 1);
    const double u1 = U(rng), u2 = U(rng), u3 = U(rng), u4 = U(rng);
    const double sink = std::min(0.85, (0.03 + 0.55 * u1 * u1) * (0.4 + 1.2 * depth));
    const double tau = static_cast<double>(T) * (0.002 + 0.15 * u2 * u2);
    const double recency = 0.2 + 1.5 * u3;
    const double focus = 0.6 + 2.6 * u4 * (0.3 + depth);  // concentration on heavy hitters
    float* a = L.att.data() + h * T;
    float* c = L.cos.data() + h * T;
    double body = 0;
    for (std::int64_t i = 0; i < T; ++i) {
      const double g = std::pow(importance[static_cast<std::size_t>(i)], focus) * std::exp(0.35 * N(rng));
      const double r =
          recency * std::exp(-static_cast<double>(T - 1 - i) / tau) * importance[static_cast<std::size_t>(T - 1)];
      a[i] = static_cast<float>(g + r);
      body += a[i];
      const double outlier = std::log(importance[static_cast<std::size_t>(i)]) > 1.2 ? 0.22 : 0.0;
      c[i] = static_cast<float>(std::clamp(0.55 + 0.1 * (u1 - 0.5) + 0.11 * N(rng) - outlier, -1.0, 1.0));
    }
    const std::int64_t ns = std::min<std::int64_t>(4, T);
    const double sink_w[4] = {0.72, 0.14, 0.09, 0.05};
    for (std::int64_t i = 0; i < T; ++i) a[i] = static_cast<float>(a[i] / body * (1.0 - sink));
    for (std::int64_t i = 0; i < ns; ++i) {
      a[i] += static_cast<float>(sink * sink_w[i]);
      c[i] = static_cast<float>(0.04 + 0.05 * U(rng));  // sinks: keys far from the mean key
    }
    // Keys on two principal axes: the first follows the cosine to the mean key, the second is noise
    // with a slow drift over positions (RoPE-like).
    float* pc = L.pca.data() + h * T * 2;
    for (std::int64_t i = 0; i < T; ++i) {
      pc[2 * i] = static_cast<float>(4.0 * (c[i] - 0.5) + 0.6 * N(rng));
      pc[2 * i + 1] =
          static_cast<float>(1.2 * std::sin(6.28 * static_cast<double>(i) / static_cast<double>(T)) + 0.7 * N(rng));
    }
    // Channel saliency: log-normal with a few outlier channels (SPARK Fig. 2).
    double cv_sum = 0;
    for (std::int64_t j = 0; j < D; ++j) {
      const bool outlier = (j % 16 == 3) || (j % 29 == 11);
      L.ch_mean[static_cast<std::size_t>(h * D + j)] =
          static_cast<float>(std::exp(0.5 * N(rng)) * (outlier ? 5.0 : 1.0) * 0.1);
      const float cv = static_cast<float>(0.35 + 0.4 * std::exp(0.6 * N(rng)) + (outlier ? 1.2 : 0.0));
      L.ch_cv[static_cast<std::size_t>(h * D + j)] = cv;
      cv_sum += cv;
    }
    // Summary metrics, as core/src/capture.cpp computes them.
    double ent = 0, cos_sum = 0, sink_share = 0;
    for (std::int64_t i = 0; i < T; ++i) {
      ent -= a[i] > 0 ? a[i] * std::log(static_cast<double>(a[i])) : 0.0;
      cos_sum += c[i];
      if (i < 4) sink_share += a[i];
    }
    std::copy(a, a + T, sorted.begin());
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    auto mass_at = [&](double frac) {
      const auto k = std::min<std::int64_t>(
          T, std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(frac * static_cast<double>(T)))));
      return std::accumulate(sorted.begin(), sorted.begin() + k, 0.0);
    };
    double cum = 0;
    std::int64_t below = 0;
    for (std::int64_t i = 0; i < T; ++i) {
      cum += sorted[static_cast<std::size_t>(i)];
      if (cum < 0.95) ++below;
    }
    float* s = L.summary.data() + h * 7;
    s[0] = static_cast<float>(ent);
    s[1] = static_cast<float>(mass_at(0.01));
    s[2] = static_cast<float>(mass_at(0.05));
    s[3] = static_cast<float>(std::min<std::int64_t>(below + 1, T)) / static_cast<float>(T);
    s[4] = static_cast<float>(sink_share);
    s[5] = static_cast<float>(cos_sum / static_cast<double>(T));
    s[6] = static_cast<float>(cv_sum / static_cast<double>(std::max<std::int64_t>(D, 1)));
  }
  return L;
}

// Ada-KV-like selection over one layer: every head keeps the observation window and a floor of
// alpha * average budget by its own scores; the rest of the layer's budget goes to the globally
// highest scores (Feng et al. 2024, §3.3 with the safeguard of §3.4).
std::vector<std::vector<std::int64_t>> adakv_select(const Layer& L, std::int64_t H, std::int64_t T, std::int64_t avg) {
  const std::int64_t window = std::min<std::int64_t>(32, avg);
  const std::int64_t floor = std::max<std::int64_t>(window, static_cast<std::int64_t>(0.2 * static_cast<double>(avg)));
  std::vector<std::vector<std::int64_t>> order(static_cast<std::size_t>(H)), kept(static_cast<std::size_t>(H));
  std::vector<std::size_t> next(static_cast<std::size_t>(H), 0);
  for (std::int64_t h = 0; h < H; ++h) {
    auto& o = order[static_cast<std::size_t>(h)];
    o.resize(static_cast<std::size_t>(T));
    std::iota(o.begin(), o.end(), 0);
    const float* a = L.att.data() + h * T;
    auto score = [&](std::int64_t i) { return i >= T - window ? 1e30f : a[i]; };
    std::sort(o.begin(), o.end(), [&](std::int64_t x, std::int64_t y) { return score(x) > score(y); });
    auto& k = kept[static_cast<std::size_t>(h)];
    for (std::int64_t i = 0; i < std::min(floor, T); ++i) k.push_back(o[static_cast<std::size_t>(i)]);
    next[static_cast<std::size_t>(h)] = k.size();
  }
  std::int64_t left = std::max<std::int64_t>(0, avg * H - floor * H);
  using Item = std::pair<float, std::int64_t>;  // score, head
  std::priority_queue<Item> pq;
  for (std::int64_t h = 0; h < H; ++h)
    if (next[static_cast<std::size_t>(h)] < static_cast<std::size_t>(T))
      pq.push({L.att[static_cast<std::size_t>(h * T +
                                              order[static_cast<std::size_t>(h)][next[static_cast<std::size_t>(h)]])],
               h});
  while (left > 0 && !pq.empty()) {
    const auto [sc, h] = pq.top();
    pq.pop();
    auto& n = next[static_cast<std::size_t>(h)];
    kept[static_cast<std::size_t>(h)].push_back(order[static_cast<std::size_t>(h)][n]);
    ++n;
    --left;
    if (n < static_cast<std::size_t>(T))
      pq.push({L.att[static_cast<std::size_t>(h * T + order[static_cast<std::size_t>(h)][n])], h});
  }
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

std::vector<std::int64_t> streaming_select(std::int64_t T, std::int64_t avg) {
  std::vector<std::int64_t> k;
  const std::int64_t sinks = std::min<std::int64_t>(4, avg);
  for (std::int64_t i = 0; i < sinks; ++i) k.push_back(i);
  for (std::int64_t i = std::max(sinks, T - (avg - sinks)); i < T; ++i) k.push_back(i);
  return k;
}

sessions::RunInfo info_for(const SyntheticSpec& sp, const std::vector<std::int32_t>& ids, const std::string& prompt,
                           const std::string& name, const std::string& spec,
                           std::vector<sessions::PipelineStage> stages) {
  sessions::RunInfo info;
  info.name = name;
  info.model = {sp.model_path, "synthetic", "llama", sp.n_layer, sp.n_head, sp.n_head_kv, sp.head_dim, "fp32", "cpu"};
  info.pipeline = {spec, std::move(stages)};
  info.budget = {sessions::BudgetUnit::kFraction, sp.keep_fraction};
  info.prompt = {prompt, ids};
  info.env = {"0.1.0", "synthetic", "cpu", ""};
  return info;
}

}  // namespace

/// A timeline consistent with per-head kept sets: positions a head did not keep leave at the
/// prefill; `ring` heads then evict their oldest non-sink entry (4 sinks) at every decode step, as a
/// StreamingLLM ring does; the others read about half their pages per step (head (0, 0) per token,
/// with an exact top-k of as many entries holding about 80% of them, and its recall).
static Timeline synthetic_timeline(const std::vector<std::vector<std::vector<std::int64_t>>>& kept, std::int64_t T,
                                   std::int64_t n_steps, bool ring, std::uint64_t seed) {
  Timeline t;
  t.n_layer = static_cast<std::int64_t>(kept.size());
  t.n_head_kv = kept.empty() ? 0 : static_cast<std::int64_t>(kept[0].size());
  t.n_positions = T + n_steps;
  t.n_steps = n_steps;
  t.page = 16;
  for (std::int64_t p = 0; p < t.n_positions; ++p)
    t.entered_at.push_back(static_cast<std::int32_t>(p < T ? 0 : p - T + 1));
  t.evicted_at.assign(static_cast<std::size_t>(t.n_layer * t.n_head_kv * t.n_positions), -1);
  t.evicted_by.assign(t.evicted_at.size(), 0);
  for (std::int64_t l = 0; l < t.n_layer; ++l)
    for (std::int64_t h = 0; h < t.n_head_kv; ++h) {
      const std::size_t base = static_cast<std::size_t>((l * t.n_head_kv + h) * t.n_positions);
      const auto& k = kept[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
      std::vector<bool> in(static_cast<std::size_t>(T), false);
      for (std::int64_t p : k) in[static_cast<std::size_t>(p)] = true;
      for (std::int64_t p = 0; p < T; ++p)
        if (!in[static_cast<std::size_t>(p)]) {
          t.evicted_at[base + p] = 0;
          t.evicted_by[base + p] = static_cast<std::uint8_t>(EvictionCause::kPrefill);
        }
      if (!ring) continue;
      std::vector<std::int64_t> order(k.begin(), k.end());  // oldest non-sink first
      std::size_t next = 0;
      while (next < order.size() && order[next] < 4) ++next;
      for (std::int64_t s = 1; s <= n_steps && next < order.size(); ++s, ++next) {
        t.evicted_at[base + order[next]] = static_cast<std::int32_t>(s);
        t.evicted_by[base + order[next]] = static_cast<std::uint8_t>(EvictionCause::kRing);
        order.push_back(T + s - 1);
      }
    }
  if (ring) return t;
  t.pages.resize(static_cast<std::size_t>(t.n_layer));
  t.tokens.resize(static_cast<std::size_t>(t.n_layer));
  t.exact.resize(static_cast<std::size_t>(t.n_layer));
  std::vector<float> head0_recall;
  std::mt19937_64 r(seed);
  for (std::int64_t s = 1; s <= n_steps; ++s)
    for (std::int64_t l = 0; l < t.n_layer; ++l)
      for (std::int64_t h = 0; h < t.n_head_kv; ++h) {
        const std::int64_t n =
            static_cast<std::int64_t>(kept[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)].size()) + s;
        const std::int64_t pages = (n + t.page - 1) / t.page;
        std::vector<std::int64_t> chosen;
        for (std::int64_t pg = 0; pg < pages; ++pg)
          if (pg == pages - 1 || r() % 2 == 0) chosen.push_back(pg);
        t.pages[static_cast<std::size_t>(l)].append(pages, chosen);
        if (l == 0 && h == 0) {
          std::vector<std::int64_t> ranks;
          for (std::int64_t pg : chosen)
            for (std::int64_t k = pg * t.page; k < std::min(n, (pg + 1) * t.page); ++k) ranks.push_back(k);
          t.tokens[0].append(n, ranks);
          // The exact top-k (k = |ranks|): ~80% of the selection, the rest from outside it.
          std::vector<std::uint8_t> in(static_cast<std::size_t>(n), 0);
          for (std::int64_t k : ranks) in[static_cast<std::size_t>(k)] = 1;
          std::vector<std::int64_t> exact;
          for (std::int64_t k : ranks)
            if (r() % 5 != 0) exact.push_back(k);
          const std::size_t hits = exact.size();
          for (std::int64_t k = 0; k < n && exact.size() < ranks.size(); ++k)
            if (!in[static_cast<std::size_t>(k)] && r() % 3 == 0) exact.push_back(k);
          t.exact[0].append(n, exact);
          head0_recall.push_back(static_cast<float>(hits) / static_cast<float>(std::max<std::size_t>(ranks.size(), 1)));
        } else {
          t.tokens[static_cast<std::size_t>(l)].pad_to(t.tokens[static_cast<std::size_t>(l)].entries() + 1);
          t.exact[static_cast<std::size_t>(l)].pad_to(t.exact[static_cast<std::size_t>(l)].entries() + 1);
        }
      }
  t.recall.assign(static_cast<std::size_t>(n_steps * t.n_layer * t.n_head_kv), 0.0f);
  for (float& v : t.recall) v = 0.7f + 0.3f * static_cast<float>(r() % 1000) / 1000.0f;
  for (std::int64_t s = 1; s <= n_steps; ++s)
    t.recall[static_cast<std::size_t>((s - 1) * t.n_layer * t.n_head_kv)] =
        head0_recall[static_cast<std::size_t>(s - 1)];
  return t;
}

SyntheticRuns write_synthetic_session(const std::string& path, const SyntheticSpec& sp, const Tokenizer* tokenizer) {
  using sessions::ParamType;
  const std::int64_t T = std::max<std::int64_t>(sp.n_tok, 8), H = sp.n_head_kv, D = sp.head_dim;
  SyntheticSpec spec = sp;
  spec.n_tok = T;
  // Prompt ids (and text).
  std::vector<std::int32_t> ids;
  std::string prompt = sp.prompt_text;
  std::vector<float> importance(static_cast<std::size_t>(T));
  auto rng = rng_for(sp.seed, -1, -1);
  std::lognormal_distribution<double> LN(0.0, 0.8);
  std::uniform_real_distribution<double> U(0, 1);
  if (tokenizer && !sp.prompt_text.empty()) {
    const auto once = tokenizer->encode(sp.prompt_text);
    while (!once.empty() && static_cast<std::int64_t>(ids.size()) < T) ids.insert(ids.end(), once.begin(), once.end());
    ids.resize(static_cast<std::size_t>(T));
    prompt = tokenizer->decode(ids);
  }
  if (ids.empty()) {
    std::uniform_int_distribution<std::int32_t> tok(3, 511);
    for (std::int64_t i = 0; i < T; ++i) ids.push_back(tok(rng));
    if (prompt.empty()) prompt = "synthetic prompt of " + std::to_string(T) + " tokens";
  }
  for (std::int64_t i = 0; i < T; ++i) {
    double g = LN(rng);
    bool spike = U(rng) < 0.02;
    if (tokenizer) {
      const std::string t = tokenizer->token_text(ids[static_cast<std::size_t>(i)]);
      spike = spike || t.find('\n') != std::string::npos || t.find(':') != std::string::npos ||
              t.find("def") != std::string::npos;
    }
    importance[static_cast<std::size_t>(i)] = static_cast<float>(spike ? g * 12.0 : g);
  }

  auto store = sessions::SessionStore::open(path);
  SyntheticRuns runs;
  // Failed attempt first, then StreamingLLM, then SnapKV + Ada-KV (the newest).
  runs.failed =
      store.begin_run(info_for(spec, ids, prompt, "cancelled attempt", "snapkv:gqa=mean,kernel=5,pool=avg,window=32",
                               {{"scoring",
                                 "snapkv",
                                 {{"gqa", ParamType::kChoice, "mean"},
                                  {"kernel", ParamType::kInt, "5"},
                                  {"pool", ParamType::kChoice, "avg"},
                                  {"window", ParamType::kInt, "32"}}}}));
  store.fail_run(runs.failed, "cancelled by the user");
  runs.streaming = store.begin_run(
      info_for(spec, ids, prompt, "streaming baseline", "streamingllm:sink=4+uniform",
               {{"scoring", "streamingllm", {{"sink", ParamType::kInt, "4"}}}, {"budget", "uniform", {}}}));
  runs.snapkv = store.begin_run(info_for(spec, ids, prompt, "snapkv + adakv",
                                         "snapkv:gqa=mean,kernel=5,pool=avg,window=32+adakv:alpha=0.2",
                                         {{"scoring",
                                           "snapkv",
                                           {{"gqa", ParamType::kChoice, "mean"},
                                            {"kernel", ParamType::kInt, "5"},
                                            {"pool", ParamType::kChoice, "avg"},
                                            {"window", ParamType::kInt, "32"}}},
                                          {"budget", "adakv", {{"alpha", ParamType::kFloat, "0.2"}}}}));

  const std::int64_t avg =
      std::clamp<std::int64_t>(static_cast<std::int64_t>(sp.keep_fraction * static_cast<double>(T)), 1, T);
  double kept_a = 0, kept_b = 0;
  std::vector<std::vector<std::vector<std::int64_t>>> all_a, all_b;
  for (std::int64_t l = 0; l < sp.n_layer; ++l) {
    const Layer L = make_layer(spec, l, importance);
    const auto ka = adakv_select(L, H, T, avg);
    const auto kb = streaming_select(T, avg);
    all_a.emplace_back(ka.begin(), ka.end());
    all_b.emplace_back(H, std::vector<std::int64_t>(kb.begin(), kb.end()));
    for (std::int64_t h = 0; h < H; ++h) {
      const auto& a = ka[static_cast<std::size_t>(h)];
      store.add_blob(runs.snapkv,
                     Blob::of<std::int64_t>("kept_positions", l, h, {static_cast<std::int64_t>(a.size())}, a));
      store.add_blob(runs.streaming,
                     Blob::of<std::int64_t>("kept_positions", l, h, {static_cast<std::int64_t>(kb.size())}, kb));
      kept_a += static_cast<double>(a.size());
      kept_b += static_cast<double>(kb.size());
    }
    for (std::int64_t run : {runs.snapkv, runs.streaming}) {
      store.add_blob(run, Blob::of<float>("head_summary", l, -1, {H, 7}, L.summary));
      if (sp.full_capture) {
        store.add_blob(run, Blob::of<float>("attention", l, -1, {H, T}, L.att));
        store.add_blob(run, Blob::of<float>("cos_to_mean", l, -1, {H, T}, L.cos));
        store.add_blob(run, Blob::of<float>("channel_mean", l, -1, {H, D}, L.ch_mean));
        store.add_blob(run, Blob::of<float>("channel_cv", l, -1, {H, D}, L.ch_cv));
        store.add_blob(run, Blob::of<float>("keys_pca", l, -1, {H, T, 2}, L.pca));
      }
    }
    if (sp.full_capture) {
      // The decisive scores the selections above ranked: attention with the observation window
      // always kept (SnapKV + Ada-KV), position with 4 sinks always kept (StreamingLLM).
      constexpr float kKeep = std::numeric_limits<float>::max();
      std::vector<float> snap = L.att, stream(static_cast<std::size_t>(H * T));
      const std::int64_t window = std::min<std::int64_t>(32, avg);
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < T; ++i) {
          if (i >= T - window) snap[static_cast<std::size_t>(h * T + i)] = kKeep;
          stream[static_cast<std::size_t>(h * T + i)] = i < 4 ? kKeep : static_cast<float>(i);
        }
      store.add_blob(runs.snapkv, Blob::of<float>("policy_score", l, -1, {H, T}, snap));
      store.add_blob(runs.streaming, Blob::of<float>("policy_score", l, -1, {H, T}, stream));
    }
  }
  for (const auto& b : sessions::timeline_blobs(synthetic_timeline(all_a, T, sp.n_steps, false, sp.seed)))
    store.add_blob(runs.snapkv, b);
  for (const auto& b : sessions::timeline_blobs(synthetic_timeline(all_b, T, sp.n_steps, true, sp.seed)))
    store.add_blob(runs.streaming, b);
  {
    std::vector<std::int64_t> uniq;
    auto r = rng_for(sp.seed, 2000, 0);
    std::uniform_int_distribution<std::int64_t> u(256, std::min<std::int64_t>(T, 256 + 8 * sp.n_steps));
    for (std::int64_t i = 0; i < sp.n_layer * sp.n_head; ++i) uniq.push_back(u(r));
    store.add_blob(runs.snapkv, Blob::of<std::int64_t>("topk_unique", -1, -1, {sp.n_layer, sp.n_head}, uniq));
  }
  // Per-step fidelity and bytes; summary metrics.
  for (int k = 0; k < 2; ++k) {
    const std::int64_t run = k == 0 ? runs.snapkv : runs.streaming;
    const double kept = k == 0 ? kept_a : kept_b;
    auto r = rng_for(sp.seed, 1000 + k, 0);
    std::normal_distribution<double> N(0, 1);
    std::vector<sessions::StepMetric> steps;
    double kl_sum = 0, top1_sum = 0, bytes_sum = 0;
    for (std::int64_t s = 0; s < sp.n_steps; ++s) {
      if (k == 0) steps.push_back({s, "selection_recall", std::clamp(0.86 + 0.05 * N(r), 0.0, 1.0)});
      const double kl = std::exp((k == 0 ? -4.2 : -2.3) + 0.9 * N(r) + 0.02 * static_cast<double>(s));
      const double top1 = U(r) < (k == 0 ? 0.94 : 0.78) ? 1.0 : 0.0;
      const double bytes = (kept + static_cast<double>(sp.n_layer * H * (s + 1))) * static_cast<double>(D) * 2 * 4;
      steps.push_back({s, "kl", kl});
      steps.push_back({s, "top1", top1});
      steps.push_back({s, "bytes_read", bytes});
      kl_sum += kl, top1_sum += top1, bytes_sum += bytes;
    }
    store.add_step_metrics(run, steps);
    const double n = static_cast<double>(std::max<std::int64_t>(sp.n_steps, 1));
    store.set_summary(run, "mean_kl", kl_sum / n);
    store.set_summary(run, "top1_agreement", top1_sum / n);
    store.set_summary(run, "prefill_ms", static_cast<double>(T) * 0.04 * (k == 0 ? 1.15 : 1.0));
    store.set_summary(run, "decode_tokens_per_s", k == 0 ? 61.0 : 66.5);
    store.set_summary(run, "kv_bytes_live", kept * static_cast<double>(D) * 2 * 4);
    store.set_summary(run, "side_store_bytes", 0);
    store.set_summary(run, "bytes_read_mean", bytes_sum / n);
    store.set_summary(run, "kept_per_head_mean", kept / static_cast<double>(std::max<std::int64_t>(1, sp.n_layer * H)));
    store.set_summary(run, "n_prompt", static_cast<double>(T));
    store.finish_run(run, {{42, 43, 44}, " synthetic output"});
  }
  store.add_note(runs.snapkv, "Ada-KV moves budget from the sink-dominated deep heads to the broad early heads.");
  store.add_note(runs.streaming, "Baseline: sinks + recent window.");
  sessions::Bookmark b;
  b.run_id = runs.snapkv;
  b.label = "broad head";
  b.layer = std::min<std::int64_t>(1, sp.n_layer - 1);
  b.head = std::min<std::int64_t>(2, H - 1);
  b.token = std::min<std::int64_t>(17, T - 1);
  store.add_bookmark(b);
  return runs;
}

}  // namespace kvscope::gui
