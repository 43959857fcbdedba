// The Attention view's figure: why a head kept what it kept. Three stacked panels on one shared
// position axis (viz Figure::share_x), over the selection's position window (zoom):
//   1. every KV head of the layer: the decisive score (what the budget stage ranked, capture full's
//      "policy_score"), always-kept entries hatched; or the window-mean attention of capture;
//   2. the selected head: its score per position (per pixel bucket the highest evicted and the
//      highest kept), the cutoff (lowest kept score) as a dashed line, the always-kept regions
//      (observation window, sinks, recent tokens) shaded, the selected token as a vertical line;
//   3. its kept/evicted strip in one row (per pixel: the share of its tokens kept).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "figures.h"
#include "score_rank.h"

namespace kvscope::figures {

PositionWindow position_window(const Selection& sel, std::int64_t n_tok) {
  PositionWindow w;
  if (n_tok <= 0) return w;
  w.lo = 0;
  w.hi = n_tok - 1;
  if (sel.pos_hi >= 0) {
    w.lo = std::clamp<std::int64_t>(sel.pos_lo, 0, n_tok - 1);
    w.hi = std::clamp<std::int64_t>(sel.pos_hi, w.lo, n_tok - 1);
  }
  w.zoomed = w.lo > 0 || w.hi < n_tok - 1;
  return w;
}

viz::TokenStrip kept_strip_row(const RunData& a, const Selection& sel, const PositionWindow& w, std::string title,
                               bool one_row) {
  viz::TokenStrip t;
  t.title = std::move(title);
  t.first_position = w.lo;
  if (!one_row) {  // categories: text boxes or wrapped rows with a kept / evicted key
    t.categories = {{"evicted", kEvictedColor}, {"kept", kKeptColor}};
    t.category.assign(static_cast<std::size_t>(std::max<std::int64_t>(w.size(), 0)), a.has_kept ? 0 : 1);
    if (const auto* k = a.has_kept ? a.kept_set(sel.layer, sel.head) : nullptr)
      for (std::int64_t p : *k)
        if (p >= w.lo && p <= w.hi) t.category[static_cast<std::size_t>(p - w.lo)] = 1;
    t.aggregate = viz::Aggregate::Max;
    return t;
  }
  // One row: 1 = kept, 0 = evicted, reduced per pixel to the share kept (not "any kept", which
  // would paint a 30%-kept head all green at 32K tokens).
  t.values.assign(static_cast<std::size_t>(std::max<std::int64_t>(w.size(), 0)), a.has_kept ? 0.0f : 1.0f);
  if (const auto* k = a.has_kept ? a.kept_set(sel.layer, sel.head) : nullptr)
    for (std::int64_t p : *k)
      if (p >= w.lo && p <= w.hi) t.values[static_cast<std::size_t>(p - w.lo)] = 1.0f;
  t.colormap = "keptshare";
  t.value_range = viz::Range{0, 1};
  t.colorbar_label = "kept";
  t.aggregate = viz::Aggregate::Mean;
  t.single_row = true;
  return t;
}

std::string decisive_score_name(const RunData& a) {
  const std::string s = a.scorer();
  return (s.empty() ? std::string("policy") : s) + " score";
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string head_label(const Selection& s) { return "L" + std::to_string(s.layer) + " H" + std::to_string(s.head); }

std::string range_text(const PositionWindow& w) {
  return w.zoomed ? ", positions " + std::to_string(w.lo) + "-" + std::to_string(w.hi) : std::string();
}

}  // namespace

viz::Figure attention_figure(const RunData& a, const AttentionOptions& o, const Selection& sel, int width_px) {
  const PositionWindow w = position_window(sel, a.n_tok);
  const bool score = o.decisive_score && a.has_score && a.layer_values(Part::kScore, sel.layer);
  const Part part = score ? Part::kScore : Part::kAttention;
  const std::string what = score ? decisive_score_name(a) + " (what the budget ranked)" : "window-mean attention";
  viz::Figure f;
  f.title = (score ? "Decisive score" : "Window attention") + std::string(" over the prompt, layer ") +
            std::to_string(sel.layer) + range_text(w);
  f.caption = a.caption();
  f.columns = 1;
  f.share_x = true;
  const std::int64_t T = a.n_tok, H = a.n_head_kv;
  const std::vector<float>* layer_values = a.layer_values(part, sel.layer);
  if (!layer_values || T == 0 || w.size() <= 0) {
    f.panels.push_back(note_panel("no attention or decisive score captured for layer " + std::to_string(sel.layer) +
                                  " (run with capture full)"));
    f.panels.push_back(kept_strip_row(a, sel, w, "kept by " + head_label(sel)));
    f.row_weights = {3, 1};
    return f;
  }
  const auto& vals = *layer_values;
  // Log scale only when every shown value is positive (attention, H2O; not KeyDiff's -cos).
  bool positive = true;
  for (std::int64_t h = 0; h < H && positive; ++h)
    for (std::int64_t j = w.lo; j <= w.hi; ++j) {
      const float v = vals[static_cast<std::size_t>(h * T + j)];
      if (std::isfinite(v) && !always_kept_score(v) && v <= 0) {
        positive = false;
        break;
      }
    }
  const bool log = o.log_scale && positive;

  // 1. Every KV head of the layer; always-kept entries hatched (no score to compare).
  viz::Heatmap hm;
  hm.title = "all KV heads of layer " + std::to_string(sel.layer) + ": " + what +
             (log ? " (log10, max per pixel)" : " (max per pixel)");
  hm.rows = H;
  hm.cols = w.size();
  hm.x_origin = static_cast<double>(w.lo);
  hm.values.resize(static_cast<std::size_t>(H * w.size()));
  bool any_always = false;
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t j = w.lo; j <= w.hi; ++j) {
      const float v = vals[static_cast<std::size_t>(h * T + j)];
      const auto k = static_cast<std::size_t>(h * w.size() + (j - w.lo));
      if (always_kept_score(v)) {
        if (hm.mask.empty()) hm.mask.assign(hm.values.size(), 0);
        hm.mask[k] = 1;
        any_always = true;
        hm.values[k] = std::numeric_limits<float>::quiet_NaN();
      } else {
        hm.values[k] = log ? std::log10(std::max(v, 1e-9f)) : v;
      }
    }
  if (any_always) {
    hm.mask_style = viz::MaskStyle::Hatch;
    hm.mask_label = "always kept";
  }
  hm.x.label = "prompt position";
  hm.y.label = "KV head";
  hm.colormap = "magma";
  hm.colorbar_label = (log ? "log10 " : "") + std::string(score ? "score" : "attention");
  hm.aggregate = viz::Aggregate::Max;
  f.panels.push_back(std::move(hm));

  // 2. The selected head: max per bucket of positions, kept entries as markers over the same buckets.
  const float* row = score ? a.score_row(sel.layer, sel.head) : a.attention_row(sel.layer, sel.head);
  if (!row) {
    f.panels.push_back(note_panel("no KV head " + std::to_string(sel.head) + " in layer " + std::to_string(sel.layer)));
    f.row_weights = {3, 2};
    return f;
  }
  const auto* kept = a.has_kept ? a.kept_set(sel.layer, sel.head) : nullptr;
  const HeadRanking rk = rank_head(row, T, kept, /*ranks=*/false);  // kept mask, cutoff, regions: O(T)
  const std::int64_t nb = std::clamp<std::int64_t>(width_px / 2, 16, 4096);
  const std::int64_t per = std::max<std::int64_t>(1, (w.size() + nb - 1) / nb);
  // Per bucket, the highest evicted and the highest kept score: zoomed out, evicted entries stay
  // visible under the kept ones instead of hiding behind a max over all tokens.
  const std::string bucket = per > 1 ? " (max per " + std::to_string(per) + ")" : "";
  viz::Series all, kept_pts;
  all.name = "evicted" + bucket;
  all.color = viz::Color::hex(0x777777);
  all.width = 1.1;  // a line through the evicted maxima (buckets without evicted skipped)
  kept_pts.name = "kept by " + head_label(sel) + bucket;
  kept_pts.color = kKeptColor;
  kept_pts.line = viz::LineStyle::None;
  kept_pts.marker = viz::Marker::Circle;
  kept_pts.marker_size = 2.2;
  auto shown = [&](std::int64_t i) {
    const float v = row[i];
    return std::isfinite(v) && !always_kept_score(v) && (!log || v > 0) ? double(v) : kNaN;
  };
  for (std::int64_t s = w.lo; s <= w.hi; s += per) {
    const std::int64_t e = std::min(w.hi + 1, s + per);
    double mx = kNaN, mk = kNaN;
    for (std::int64_t i = s; i < e; ++i) {
      const double v = shown(i);
      if (std::isnan(v)) continue;
      double& m = rk.kept[static_cast<std::size_t>(i)] ? mk : mx;
      m = std::isnan(m) ? v : std::max(m, v);
    }
    const double x = per > 1 ? 0.5 * static_cast<double>(s + e - 1) : static_cast<double>(s);
    if (!std::isnan(mx)) {
      all.x.push_back(x);
      all.y.push_back(mx);
    }
    if (!std::isnan(mk)) {
      kept_pts.x.push_back(x);
      kept_pts.y.push_back(mk);
    }
  }
  viz::LinePlot lp;
  lp.title = head_label(sel) + ": " + what + ", kept " + std::to_string(rk.n_kept) + " of " + std::to_string(T);
  lp.x.label = "prompt position";
  lp.y.label = score ? "score" : "attention";
  lp.y.log = log;
  lp.x.range = viz::Range{static_cast<double>(w.lo) - 0.5, static_cast<double>(w.hi) + 0.5};
  lp.series = {std::move(all), std::move(kept_pts)};
  if (score && std::isfinite(rk.cutoff_kept) && rk.n_kept < T && (!log || rk.cutoff_kept > 0))
    lp.rules.push_back({false, rk.cutoff_kept, viz::Color::hex(0xb2182b), viz::LineStyle::Dashed, 1.3,
                        "cutoff: lowest kept score (rank " + std::to_string(rk.n_kept) + ")"});
  const std::string scorer = a.scorer();
  const viz::Color span_colors[] = {viz::Color::hex(0x56b4e9), viz::Color::hex(0xcc79a7)};
  std::vector<std::string> named;
  for (const auto& [first, last] : rk.always_kept) {
    if (last < w.lo || first > w.hi) continue;
    const std::string name = always_kept_name(scorer, first, last, T) + " (always kept)";
    const bool sink = first == 0;
    const bool first_of_kind = std::find(named.begin(), named.end(), name) == named.end();
    if (first_of_kind) named.push_back(name);
    lp.spans.push_back({static_cast<double>(std::max(first, w.lo)), static_cast<double>(std::min(last, w.hi)),
                        span_colors[sink ? 1 : 0], first_of_kind ? name : std::string()});
  }
  if (sel.token >= w.lo && sel.token <= w.hi)
    lp.rules.push_back({true, static_cast<double>(sel.token), viz::Color::hex(0x222222), viz::LineStyle::Dotted, 1.2,
                        "selected token " + std::to_string(sel.token)});
  lp.legend = viz::LegendPos::Outside;
  f.panels.push_back(std::move(lp));
  f.panels.push_back(kept_strip_row(a, sel, w,
                                    "kept by " + head_label(sel) + " (" +
                                        std::to_string(a.kept_count(sel.layer, sel.head)) + " of " + std::to_string(T) +
                                        ")"));
  f.row_weights = {2.2, 2.6, 1.0};
  return f;
}

}  // namespace kvscope::figures
