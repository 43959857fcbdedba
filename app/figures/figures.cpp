// The figure builders of figures.h: one viz::Figure per GUI view (and its A - B variant), shared
// by the GUI views, its "export all" and kvscope-cli export (through the figure table,
// figure_table.cpp). Sections (search for "// ---- NAME"):
//   helpers        NaN constants, number formatting, figure base, note panel, kept strip
//   head metrics   heads_metric_names, heads_metric_values, jaccard
//   heads          heads_map, heads_figure
//   tokens         tokens_figure
//   (attention     attention_figure.cpp)
//   keys           keys_figure
//   channels       channel_bars, channels_figure
//   budgets        head-pattern panels, budgets_figure, head_pattern_file, resolve_head_pattern_file
//   fidelity       fidelity_figure
//   selection      selection_figure
//   A - B views    kept_diff, diff strip and captions, tokens / attention / keys / channels _diff_figure
//   compare        compare_figure
//   export all     all_figures (the figure table's "export all" entries)
#include "figures.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <variant>

#include "figure_table.h"
#include "head_pattern_figure.h"
#include "identity_elide.h"
#include "score_rank.h"

namespace kvscope::figures {

// ---- helpers ------------------------------------------------------------------------------------

namespace {

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string head_name(const Selection& s) { return "L" + std::to_string(s.layer) + " H" + std::to_string(s.head); }

viz::Figure base(const RunData& a, std::string title) {
  viz::Figure f;
  f.title = std::move(title);
  f.caption = a.caption();
  return f;
}

// A run's pipeline as shown next to its id ("full cache" for none).
std::string pipeline_text(const RunData& r) {
  return r.record.row.pipeline_spec.empty() ? "full cache" : r.record.row.pipeline_spec;
}

// Kept/evicted strip of one head (category 1 = kept, so Max aggregation shows any kept token).
viz::TokenStrip kept_strip(const RunData& a, const Selection& sel, std::string title) {
  viz::TokenStrip t;
  t.title = std::move(title);
  t.categories = {{"evicted", kEvictedColor}, {"kept", kKeptColor}};
  t.category.assign(static_cast<std::size_t>(a.n_tok), 0);
  if (!a.has_kept) {
    std::fill(t.category.begin(), t.category.end(), 1);
  } else if (const auto* k = a.kept_set(sel.layer, sel.head)) {
    for (std::int64_t p : *k)
      if (p >= 0 && p < a.n_tok) t.category[static_cast<std::size_t>(p)] = 1;
  }
  t.aggregate = viz::Aggregate::Max;
  return t;
}

bool valid_head(const RunData& a, const Selection& s) {
  return s.layer >= 0 && s.layer < a.n_layer && s.head >= 0 && s.head < a.n_head_kv;
}

}  // namespace

viz::LinePlot note_panel(std::string text) {
  viz::LinePlot p;
  p.title = std::move(text);
  p.x.range = viz::Range{0, 1};
  p.y.range = viz::Range{0, 1};
  p.x.grid = p.y.grid = false;
  p.x.ticks = {0.0};
  p.x.tick_labels = {""};
  p.y.ticks = {0.0};
  p.y.tick_labels = {""};
  p.legend = viz::LegendPos::None;
  return p;
}

// ---- head metrics -------------------------------------------------------------------------------

const std::array<const char*, 9>& heads_metric_names() {
  static const std::array<const char*, 9> names = {"entropy",       "mass_top1pct", "mass_top5pct",
                                                   "tokens95_frac", "sink_share",   "cos_mean",
                                                   "channel_cv",    "kept",         "kept_frac"};
  return names;
}

std::vector<float> heads_metric_values(const RunData& run, int metric) {
  const std::int64_t L = run.n_layer, H = run.n_head_kv;
  std::vector<float> v(static_cast<std::size_t>(L * H), kNaNf);
  const auto& names = heads_metric_names();
  if (metric < 0 || metric >= static_cast<int>(names.size())) return v;
  const std::string name = names[static_cast<std::size_t>(metric)];
  const auto mi = run.metric_index(name);
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t h = 0; h < H; ++h) {
      float x = kNaNf;
      if (name == "kept")
        x = static_cast<float>(run.kept_count(l, h));
      else if (name == "kept_frac")
        x = run.n_tok > 0 ? static_cast<float>(run.kept_count(l, h)) / static_cast<float>(run.n_tok) : kNaNf;
      else if (mi)
        x = run.metric(l, h, *mi);
      v[static_cast<std::size_t>(l * H + h)] = x;
    }
  return v;
}

double jaccard(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  std::size_t i = 0, j = 0, inter = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j])
      ++i;
    else if (b[j] < a[i])
      ++j;
    else
      ++inter, ++i, ++j;
  }
  return static_cast<double>(inter) / static_cast<double>(a.size() + b.size() - inter);
}

// ---- heads --------------------------------------------------------------------------------------

namespace {

// One layers x KV heads map of metric m (A, B or A - B).
viz::Heatmap heads_map(const RunData& a, const RunData* b, int m, Side side, bool small) {
  const std::string name = heads_metric_names()[static_cast<std::size_t>(m)];
  viz::Heatmap h;
  h.rows = a.n_layer;
  h.cols = a.n_head_kv;
  if (side == Side::kA) {
    h.values = heads_metric_values(a, m);
  } else if (side == Side::kB) {
    h.values = heads_metric_values(*b, m);
  } else {
    const auto va = heads_metric_values(a, m), vb = heads_metric_values(*b, m);
    h.values.resize(va.size());
    for (std::size_t i = 0; i < va.size(); ++i) h.values[i] = va[i] - vb[i];
    h.colormap = kDiffColormap;
  }
  if (name == "entropy" && side != Side::kDiff) h.colormap = "magma";
  const bool has = std::any_of(h.values.begin(), h.values.end(), [](float x) { return std::isfinite(x); });
  h.title =
      small ? name + (has ? "" : " (not captured)") : (has ? "" : "not captured in this run (capture summary or full)");
  h.x.label = small ? "" : "KV head";
  h.y.label = small ? "" : "layer";
  h.colorbar_label = small ? "" : (side == Side::kDiff ? "\xce\x94 " + name : name);
  h.aggregate = viz::Aggregate::Mean;
  return h;
}

}  // namespace

viz::Figure heads_figure(const RunData& a, const RunData* b, const HeadsOptions& o, const Selection& sel) {
  const auto& names = heads_metric_names();
  const int n = static_cast<int>(names.size());
  const bool comparable = b && b->n_layer == a.n_layer && b->n_head_kv == a.n_head_kv;
  const Side side = comparable ? o.side : Side::kA;
  const std::string which = side == Side::kA   ? ""
                            : side == Side::kB ? " (run B)"
                                               : std::string(" (A \xe2\x88\x92 B)") + kDiffKey;
  const RunData& shown = side == Side::kB ? *b : a;
  if (o.metric < 0 || o.metric >= n) {
    // Every metric as a small map: rows = layers (top = 0), columns = KV heads.
    viz::Figure f = base(
        shown, "Per-head statistics, layers (rows) x KV heads (columns)" + which +
                   (valid_head(a, sel) ? "; selected L" + std::to_string(sel.layer) + " H" + std::to_string(sel.head)
                                       : std::string()));
    f.columns = 4;  // room for the metrics' human names as titles
    for (int m = 0; m < n; ++m) {
      // Each map titled by the metric's human name (as the Heads view's metric list), not its id.
      viz::Heatmap h = heads_map(a, comparable ? b : nullptr, m, side, true);
      const std::string id = names[static_cast<std::size_t>(m)];
      if (h.title.starts_with(id)) h.title = metric_label(id) + h.title.substr(id.size());
      f.panels.push_back(std::move(h));
    }
    return f;
  }
  const std::string name = names[static_cast<std::size_t>(o.metric)];
  viz::Figure f = base(shown, metric_label(name) + " per layer and KV head" + which);
  viz::Heatmap h = heads_map(a, comparable ? b : nullptr, o.metric, side, false);
  h.colorbar_label = (side == Side::kDiff ? "\xce\x94 " : "") + metric_label(name);
  if (h.title.empty() && valid_head(a, sel)) h.title = "selected: " + head_name(sel);  // no "L-1 H-1" (export)
  f.panels.push_back(std::move(h));
  return f;
}

// ---- tokens -------------------------------------------------------------------------------------

std::string needle_text(const RunData& a, const Selection& sel) {
  if (a.needles.empty()) return {};
  std::string s = "needle: tokens ";
  std::vector<std::int64_t> pos;
  for (const auto& [lo, hi] : a.needles) {
    s += (pos.empty() ? "" : ", ") + std::to_string(lo) + "-" + std::to_string(hi - 1);
    for (std::int64_t p = lo; p < hi; ++p) pos.push_back(p);
  }
  std::sort(pos.begin(), pos.end());
  pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
  const auto n = static_cast<std::int64_t>(pos.size());
  s += " (" + std::to_string(n) + ")";
  if (!a.has_kept) return s + ": full cache, kept by every head";
  // Needle tokens kept by (l, h), or -1 while its layer's kept sets are not decoded.
  auto kept = [&](std::int64_t l, std::int64_t h) -> std::int64_t {
    const auto* k = a.kept_set(l, h);
    if (!k) return -1;
    std::int64_t m = 0;
    for (std::int64_t p : pos) m += std::binary_search(k->begin(), k->end(), p);
    return m;
  };
  std::string sep = ": ";
  if (valid_head(a, sel))
    if (const std::int64_t k = kept(sel.layer, sel.head); k >= 0)
      s += sep + head_name(sel) + " kept " + std::to_string(k) + " of " + std::to_string(n), sep = "; ";
  auto whole = [&](std::int64_t l) -> std::int64_t {  // KV heads of layer l that kept every needle token
    std::int64_t m = 0;
    for (std::int64_t h = 0; h < a.n_head_kv; ++h) {
      const std::int64_t k = kept(l, h);
      if (k < 0) return -1;
      m += k == n;
    }
    return m;
  };
  if (sel.layer >= 0 && sel.layer < a.n_layer)
    if (const std::int64_t m = whole(sel.layer); m >= 0) {
      s += sep + "kept whole by " + std::to_string(m) + " of " + std::to_string(a.n_head_kv) + " KV heads of layer " +
           std::to_string(sel.layer);
      sep = ", ";
    }
  std::int64_t all = 0;
  for (std::int64_t l = 0; l < a.n_layer && all >= 0; ++l) {
    const std::int64_t m = whole(l);
    all = m < 0 ? -1 : all + m;
  }
  if (all >= 0 && a.n_layer > 0)
    s += (sep == ": " ? ": kept whole by " : sep) + std::to_string(all) + " of " +
         std::to_string(a.n_layer * a.n_head_kv) + " KV heads of all layers";
  return s;
}

viz::TokenStrip needle_strip_row(const RunData& a, const PositionWindow& w, std::string title) {
  viz::TokenStrip t;
  t.title = std::move(title);
  t.first_position = w.lo;
  t.categories = {{"prompt", viz::Color::hex(0xffffff)}, {"needle", kNeedleColor}};
  t.category.assign(static_cast<std::size_t>(std::max<std::int64_t>(w.size(), 0)), 0);
  for (const auto& [lo, hi] : a.needles)
    for (std::int64_t p = std::max(lo, w.lo); p < hi && p <= w.hi; ++p)
      t.category[static_cast<std::size_t>(p - w.lo)] = 1;
  t.aggregate = viz::Aggregate::Max;  // a needle token shows at any width
  t.single_row = true;
  return t;
}

namespace {

// The strip of tokens_figure (kept / keep rate / decisive score / attention), into f.panels.
void add_tokens_strip(viz::Figure& f, const RunData& a, const TokensOptions& o, const Selection& sel) {
  f.title.clear();
  const PositionWindow w = position_window(sel, a.n_tok);
  const std::string range =
      w.zoomed ? ", positions " + std::to_string(w.lo) + "-" + std::to_string(w.hi) : std::string();
  // Long windows as one row of pixels under a position axis (zoom in for single tokens).
  const bool one_row = w.size() > 400;
  if (o.coloring == TokenColoring::kKeptSelectedHead || !a.has_kept) {
    f.panels.push_back(kept_strip_row(a, sel, w,
                                      "kept by " + head_name(sel) + ": " +
                                          std::to_string(a.kept_count(sel.layer, sel.head)) + " of " +
                                          std::to_string(a.n_tok) + " tokens" + range,
                                      one_row));
    return;
  }
  viz::TokenStrip t;
  t.first_position = w.lo;
  t.single_row = one_row;
  t.values.resize(static_cast<std::size_t>(std::max<std::int64_t>(w.size(), 0)), kNaNf);
  auto at = [&](std::int64_t i) -> float& { return t.values[static_cast<std::size_t>(i - w.lo)]; };
  if (o.coloring == TokenColoring::kKeepRate) {
    const double heads = static_cast<double>(std::max<std::int64_t>(1, a.n_layer * a.n_head_kv));
    if (const auto* kc = a.keep_count())
      for (std::int64_t i = w.lo; i <= w.hi; ++i)
        at(i) = static_cast<float>((*kc)[static_cast<std::size_t>(i)] / heads);
    t.title = "fraction of the " + std::to_string(a.n_layer * a.n_head_kv) + " KV heads that kept each token" + range;
    t.value_range = viz::Range{0, 1};
    t.colorbar_label = "keep rate";
    t.aggregate = viz::Aggregate::Mean;
  } else if (o.coloring == TokenColoring::kScore) {
    const float* sc = a.score_row(sel.layer, sel.head);
    // Log when every score is positive; always-kept entries take the top of the scale.
    bool positive = sc != nullptr;
    float top = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = w.lo; sc && i <= w.hi; ++i)
      if (std::isfinite(sc[i]) && !always_kept_score(sc[i])) positive &= sc[i] > 0, top = std::max(top, sc[i]);
    for (std::int64_t i = w.lo; sc && i <= w.hi; ++i) {
      const float v = always_kept_score(sc[i]) ? top : sc[i];
      at(i) = positive ? std::log10(std::max(v, 1e-9f)) : v;
    }
    t.title = sc ? decisive_score_name(a) + " of " + head_name(sel) + (positive ? " (log10)" : "") +
                       ": what the budget ranked; always-kept entries at the top of the scale" + range
                 : "no decisive score recorded (capture full, a pipeline with a scoring stage)";
    t.colorbar_label = positive ? "log10 score" : "score";
    t.colormap = "magma";
    t.aggregate = viz::Aggregate::Max;
  } else {
    const float* att = a.attention_row(sel.layer, sel.head);
    if (att)
      for (std::int64_t i = w.lo; i <= w.hi; ++i) at(i) = std::log10(std::max(att[i], 1e-9f));
    t.title =
        att ? "window attention of " + head_name(sel) + " (log10)" + range : "no attention captured (capture full)";
    t.colorbar_label = "log10 attention";
    t.colormap = "magma";
    t.aggregate = viz::Aggregate::Max;
  }
  f.panels.push_back(std::move(t));
}

}  // namespace

viz::Figure tokens_figure(const RunData& a, const TokensOptions& o, const Selection& sel) {
  viz::Figure f = base(a, "Prompt tokens");
  add_tokens_strip(f, a, o, sel);
  if (!a.needles.empty()) {  // the needle marker row under the strip, on its position axis
    f.panels.push_back(needle_strip_row(a, position_window(sel, a.n_tok), needle_text(a, sel)));
    f.columns = 1;
    f.share_x = true;
    f.row_weights = {1, 1};
  }
  return f;
}

// ---- keys ---------------------------------------------------------------------------------------

viz::Figure keys_figure(const RunData& a, const KeysOptions& o, const Selection& sel) {
  viz::Figure f = base(a, "Key geometry of " + head_name(sel));
  f.columns = 2;
  const float* cos = a.cos_row(sel.layer, sel.head);
  if (!cos || a.n_tok == 0) {
    f.columns = 1;
    f.panels.push_back(note_panel("no cos_to_mean captured for " + head_name(sel) + " (run with capture full)"));
    return f;
  }
  const float* att = a.attention_row(sel.layer, sel.head);
  const std::int64_t T = a.n_tok;
  float lo = std::numeric_limits<float>::max(), hi = -lo;
  for (std::int64_t i = 0; i < T; ++i)
    if (std::isfinite(cos[i])) lo = std::min(lo, cos[i]), hi = std::max(hi, cos[i]);
  if (!(hi > lo)) hi = lo + 1e-3f;
  const int bins = std::clamp(o.bins, 4, 200);
  viz::BarChart hist;
  hist.title = "cosine of each key to the mean key (KeyDiff anchor)";
  hist.series = {{"kept", std::vector<double>(static_cast<std::size_t>(bins), 0.0), kKeptColor},
                 {"evicted", std::vector<double>(static_cast<std::size_t>(bins), 0.0), viz::Color::hex(0x999999)}};
  for (int k = 0; k < bins; ++k) {
    const double c = lo + (hi - lo) * (k + 0.5) / bins;
    hist.categories.push_back(fmt("%.2f", c));
  }
  viz::ScatterGroup gk{"kept", {}, {}, kKeptColor, viz::Marker::Circle, 2.2};
  viz::ScatterGroup ge{"evicted", {}, {}, viz::Color::hex(0x999999), viz::Marker::Circle, 2.0};
  std::int64_t nk = 0, ne = 0;
  for (std::int64_t i = 0; i < T; ++i) (a.kept_at(sel.layer, sel.head, i) ? nk : ne)++;
  const std::int64_t cap = 2000;  // points per group: a few thousand markers stay cheap per frame
  const std::int64_t sk = std::max<std::int64_t>(1, (nk + cap - 1) / cap),
                     se = std::max<std::int64_t>(1, (ne + cap - 1) / cap);
  std::int64_t ik = 0, ie = 0;
  for (std::int64_t i = 0; i < T; ++i) {
    if (!std::isfinite(cos[i])) continue;
    const bool k = a.kept_at(sel.layer, sel.head, i);
    const int bin = std::clamp(static_cast<int>((cos[i] - lo) / (hi - lo) * bins), 0, bins - 1);
    hist.series[k ? 0 : 1].values[static_cast<std::size_t>(bin)] += 1;
    if (att) {
      if (k && (ik++ % sk) == 0) gk.x.push_back(cos[i]), gk.y.push_back(std::max(att[i], 1e-9f));
      if (!k && (ie++ % se) == 0) ge.x.push_back(cos[i]), ge.y.push_back(std::max(att[i], 1e-9f));
    }
  }
  hist.x.label = "cosine to mean key";
  hist.y.label = "tokens";
  std::vector<double> ticks;
  std::vector<std::string> labels;
  for (int k = 0; k < bins; k += std::max(1, bins / 8))
    ticks.push_back(k), labels.push_back(hist.categories[static_cast<std::size_t>(k)]);
  hist.x.ticks = ticks;
  hist.x.tick_labels = labels;
  hist.legend = viz::LegendPos::TopLeft;
  f.panels.push_back(std::move(hist));
  const float* pca_keys = a.pca_row(sel.layer, sel.head);
  const bool pca = pca_keys != nullptr;
  if (pca) f.columns = 3;
  if (att) {
    viz::ScatterPlot sp;
    sp.title = "cosine to mean key vs attention" + std::string(sk > 1 || se > 1 ? " (subsampled)" : "");
    sp.x.label = "cosine to mean key";
    sp.y.label = "window-mean attention";
    sp.y.log = true;
    sp.groups = {std::move(ge), std::move(gk)};
    f.panels.push_back(std::move(sp));
  } else {
    f.panels.push_back(note_panel("no attention captured: no scatter"));
  }
  if (pca) {
    // Keys on their two principal axes (capture.cpp), kept vs evicted, same subsampling.
    const float* k = pca_keys;
    viz::ScatterPlot pp;
    pp.title = "keys on their two principal axes" + std::string(sk > 1 || se > 1 ? " (subsampled)" : "");
    pp.x.label = "PC 1";
    pp.y.label = "PC 2";
    viz::ScatterGroup pk{"kept", {}, {}, kKeptColor, viz::Marker::Circle, 2.2};
    viz::ScatterGroup pe{"evicted", {}, {}, viz::Color::hex(0x999999), viz::Marker::Circle, 2.0};
    std::int64_t jk = 0, je = 0;
    for (std::int64_t i = 0; i < T; ++i) {
      const bool kept = a.kept_at(sel.layer, sel.head, i);
      if (kept && (jk++ % sk) == 0) pk.x.push_back(k[2 * i]), pk.y.push_back(k[2 * i + 1]);
      if (!kept && (je++ % se) == 0) pe.x.push_back(k[2 * i]), pe.y.push_back(k[2 * i + 1]);
    }
    pp.groups = {std::move(pe), std::move(pk)};
    f.panels.push_back(std::move(pp));
  }
  return f;
}

// ---- channels -----------------------------------------------------------------------------------

namespace {

/// One bar per head_dim channel (values.size() channels), ticks every 1 / 8 / 16 channels.
viz::BarChart channel_bars(std::vector<double> values, std::string title, std::string ylabel, viz::Color color) {
  const auto D = static_cast<std::int64_t>(values.size());
  viz::BarChart b;
  b.title = std::move(title);
  for (std::int64_t j = 0; j < D; ++j) b.categories.push_back(std::to_string(j));
  b.series = {{"", std::move(values), color}};
  b.x.label = "channel";
  b.y.label = std::move(ylabel);
  const std::int64_t step = D <= 16 ? 1 : D <= 64 ? 8 : 16;
  for (std::int64_t j = 0; j < D; j += step)
    b.x.ticks.push_back(static_cast<double>(j)), b.x.tick_labels.push_back(std::to_string(j));
  b.legend = viz::LegendPos::None;
  return b;
}

}  // namespace

viz::Figure channels_figure(const RunData& a, const ChannelsOptions& o, const Selection& sel) {
  viz::Figure f = base(a, "Channel saliency |q\xcc\x84|\xc2\xb7|k| of layer " + std::to_string(sel.layer));
  f.columns = 1;
  const std::int64_t D = a.head_dim, H = a.n_head_kv;
  const std::vector<float>* mean = a.layer_values(Part::kChannelMean, sel.layer);
  const std::vector<float>* cvs = a.layer_values(Part::kChannelCv, sel.layer);
  const bool have = mean != nullptr;
  if (!have || D == 0) {
    f.panels.push_back(
        note_panel("no channel statistics captured for layer " + std::to_string(sel.layer) + " (capture full)"));
    return f;
  }
  static const std::vector<float> kNoValues;
  const auto& cm = *mean;
  const auto& cv = cvs ? *cvs : kNoValues;
  auto bars = [&](const std::vector<float>& src, std::string title, std::string ylabel, viz::Color col) {
    std::vector<double> v(static_cast<std::size_t>(D), kNaN);
    const std::int64_t h = std::clamp<std::int64_t>(sel.head, 0, H - 1);
    if (!src.empty())
      for (std::int64_t j = 0; j < D; ++j) v[static_cast<std::size_t>(j)] = src[static_cast<std::size_t>(h * D + j)];
    return channel_bars(std::move(v), std::move(title), std::move(ylabel), col);
  };
  f.panels.push_back(bars(cm, head_name(sel) + ": mean saliency per channel", "mean |q\xcc\x84|\xc2\xb7|k|",
                          viz::Color::hex(0x0072b2)));
  f.panels.push_back(
      bars(cv, head_name(sel) + ": coefficient of variation over tokens per channel", "CV", viz::Color::hex(0xd55e00)));
  viz::Heatmap hm;
  hm.title = std::string(o.cv ? "channel CV" : "mean channel saliency") + " of every KV head of layer " +
             std::to_string(sel.layer);
  hm.rows = H;
  hm.cols = D;
  hm.values = o.cv ? cv : cm;
  if (hm.values.size() != static_cast<std::size_t>(H * D)) hm.values.assign(static_cast<std::size_t>(H * D), kNaNf);
  hm.x.label = "channel";
  hm.y.label = "KV head";
  hm.colorbar_label = o.cv ? "CV" : "mean";
  f.panels.push_back(std::move(hm));
  f.row_weights = {1, 1, 1.3};
  return f;
}

// ---- budgets ------------------------------------------------------------------------------------

namespace {

// Budgets view of a run with a "heads" stage: its pattern's map and windows, on the run's prompt
// length, after the measured panels; a note panel when the file cannot be read.
void add_head_pattern_panels(viz::Figure& f, const RunData& r) {
  const std::string file = head_pattern_file(r);
  if (file.empty()) return;
  const std::string name = std::filesystem::path(file).filename().string();
  const std::string path = resolve_head_pattern_file(r, file);
  try {
    const HeadPattern p = run_head_pattern(r).pattern;
    viz::Figure hp = head_pattern_figure(p, {r.n_tok, -1, {}});  // n_tok 0: the pattern's widest window
    auto& map = std::get<viz::Heatmap>(hp.panels.at(0));
    map.title = "head pattern " + name + " (" + p.method + ")";
    if (static_cast<std::int64_t>(p.layers.size()) != r.n_layer)
      map.title += ": " + std::to_string(p.layers.size()) + " layers, the run " + std::to_string(r.n_layer);
    auto& windows = std::get<viz::BarChart>(hp.panels.at(1));
    windows.title = "pattern: streaming window per layer";
    windows.legend = viz::LegendPos::Outside;
    f.panels.push_back(std::move(map));
    f.panels.push_back(std::move(windows));
    f.caption += " \xc2\xb7 head pattern " + file + ": " + hp.title.substr(hp.title.find(':') + 2);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // InputError(path, problem)
    f.panels.push_back(note_panel("head pattern " + file + " cannot be read: " + why));
    f.row_weights = {1, 0.25};  // the note needs no plot area
  }
  f.height = std::max(f.height, 820);
}

}  // namespace

viz::Figure budgets_figure(const RunData& a, const RunData* b, const BudgetsOptions& o) {
  const bool comparable = b && b->n_layer == a.n_layer && b->n_head_kv == a.n_head_kv;
  const Side side = comparable ? o.side : Side::kA;
  viz::Figure f = base(side == Side::kB ? *b : a, "Budgets: entries kept per KV head after prefill");
  f.columns = 2;
  f.col_weights = {1.15, 1};
  const std::int64_t L = a.n_layer, H = a.n_head_kv;
  viz::Heatmap hm;
  hm.rows = L;
  hm.cols = H;
  const auto ka = heads_metric_values(a, 7);
  if (side == Side::kA)
    hm.values = ka;
  else if (side == Side::kB)
    hm.values = heads_metric_values(*b, 7);
  else {
    const auto kb = heads_metric_values(*b, 7);
    hm.values.resize(ka.size());
    for (std::size_t i = 0; i < ka.size(); ++i) hm.values[i] = ka[i] - kb[i];
    hm.colormap = kDiffColormap;
  }
  hm.title = side == Side::kA   ? "kept entries per layer and KV head"
             : side == Side::kB ? "kept entries (run B)"
                                : std::string("kept entries, A \xe2\x88\x92 B") + kDiffKey;
  if (!a.has_kept && side == Side::kA) hm.title += " (full cache: nothing evicted)";
  hm.x.label = "KV head";
  hm.y.label = "layer";
  hm.colorbar_label = side == Side::kDiff ? "\xce\x94 entries" : "entries";
  hm.aggregate = viz::Aggregate::Mean;
  f.panels.push_back(std::move(hm));

  viz::BarChart bc;
  bc.title = "mean, min and max kept per KV head, by layer";
  auto per_layer = [&](const RunData& r, int which) {
    std::vector<double> v(static_cast<std::size_t>(L), kNaN);
    for (std::int64_t l = 0; l < std::min(L, r.n_layer); ++l) {
      double s = 0, mn = 1e300, mx = -1e300;
      for (std::int64_t h = 0; h < r.n_head_kv; ++h) {
        const double k = static_cast<double>(r.kept_count(l, h));
        s += k, mn = std::min(mn, k), mx = std::max(mx, k);
      }
      v[static_cast<std::size_t>(l)] = which == 0 ? s / std::max<std::int64_t>(1, r.n_head_kv) : which == 1 ? mn : mx;
    }
    return v;
  };
  for (std::int64_t l = 0; l < L; ++l) bc.categories.push_back(std::to_string(l));
  if (comparable) {
    bc.title = "mean kept per KV head, by layer";
    bc.series = {{"A #" + std::to_string(a.ref.run), per_layer(a, 0), kOnlyAColor},
                 {"B #" + std::to_string(b->ref.run), per_layer(*b, 0), kOnlyBColor}};
  } else {
    bc.series = {{"min", per_layer(a, 1), viz::Color::hex(0x56b4e9)},
                 {"mean", per_layer(a, 0), viz::Color::hex(0x0072b2)},
                 {"max", per_layer(a, 2), viz::Color::hex(0x003f66)}};
  }
  bc.x.label = "layer";
  bc.y.label = "entries";
  const std::int64_t step = L <= 16 ? 1 : 4;
  for (std::int64_t l = 0; l < L; l += step)
    bc.x.ticks.push_back(static_cast<double>(l)), bc.x.tick_labels.push_back(std::to_string(l));
  bc.legend = viz::LegendPos::Outside;
  f.panels.push_back(std::move(bc));
  if (o.head_pattern) add_head_pattern_panels(f, side == Side::kB ? *b : a);
  return f;
}

std::string head_pattern_file(const RunData& r) {
  for (const auto& st : r.record.info.pipeline.stages)
    if (st.policy == "heads")
      for (const auto& p : st.params)
        if (p.key == "pattern") return p.value;
  return "";
}

HeadsStagePattern run_head_pattern(const RunData& r) {
  for (const auto& st : r.record.info.pipeline.stages) {
    if (st.policy != "heads") continue;
    ParamValues params;
    for (const auto& p : st.params) params[p.key] = p.value;
    for (const auto& d : kHeadsStageDuoDefaults) params.emplace(d.key, d.value);  // runs recorded before them
    params["pattern"] = resolve_head_pattern_file(r, params["pattern"]);
    return resolve_heads_stage(params);
  }
  throw std::invalid_argument("run " + std::to_string(r.ref.run) + ": its pipeline has no 'heads' stage");
}

std::string resolve_head_pattern_file(const RunData& r, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(file);
  if (file.empty() || fs::exists(p, ec) || p.is_absolute() || r.ref.db.empty()) return file;
  const fs::path next_to_db = fs::path(r.ref.db).parent_path() / p;
  return fs::exists(next_to_db, ec) ? next_to_db.string() : file;
}

// ---- fidelity -----------------------------------------------------------------------------------

viz::Figure fidelity_figure(const std::vector<const RunData*>& runs, const FidelityOptions& o) {
  viz::Figure f;
  f.title = "Fidelity against the full cache, per decode step";
  if (!runs.empty() && runs[0]) f.caption = runs[0]->caption();
  f.columns = 1;
  viz::LinePlot kl, top1, bytes;
  kl.title = "KL(full || compressed) of the next-token distribution";
  kl.x.label = "decode step";
  kl.y.label = "KL (nats)";
  top1.title = o.running_mean ? "top-1 agreement (running mean)" : "top-1 agreement (1 = same argmax)";
  top1.x.label = "decode step";
  top1.y.label = "agreement";
  top1.y.range = viz::Range{-0.02, 1.02};
  bytes.title = "K/V + side-store bytes read per decode step (all layers)";
  bytes.x.label = "decode step";
  bytes.y.label = "MiB";
  bool any_kl = false, any_bytes = false;
  // Legend names: the pipelines elided together, so runs that differ at the end stay apart.
  std::vector<std::string> specs;
  for (const RunData* r : runs) specs.push_back(r ? pipeline_text(*r) : "");
  specs = elide_identities(specs, 40);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData* r = runs[i];
    if (!r) continue;
    const std::string name = (i == 0   ? "A "
                              : i == 1 ? "B "
                                       : "") +
                             std::string("#") + std::to_string(r->ref.run) + " " + specs[i];
    const viz::Color col = viz::categorical(i);
    auto get = [&](const char* n) -> const std::vector<double>* {
      auto it = r->steps.find(n);
      return it == r->steps.end() ? nullptr : &it->second;
    };
    if (const auto* v = get("kl")) {
      viz::Series s{name, {}, *v, col};
      for (std::size_t k = 0; k < v->size(); ++k) s.x.push_back(static_cast<double>(k));
      kl.series.push_back(std::move(s));
      any_kl = true;
    }
    if (const auto* v = get("top1")) {
      viz::Series s{name, {}, {}, col};
      double acc = 0;
      std::int64_t n = 0;
      for (std::size_t k = 0; k < v->size(); ++k) {
        s.x.push_back(static_cast<double>(k));
        if (o.running_mean) {
          if (std::isfinite((*v)[k])) acc += (*v)[k], ++n;
          s.y.push_back(n ? acc / static_cast<double>(n) : kNaN);
        } else {
          s.y.push_back((*v)[k]);
        }
      }
      if (!o.running_mean) s.line = viz::LineStyle::None, s.marker = viz::Marker::Circle, s.marker_size = 2.5;
      top1.series.push_back(std::move(s));
    }
    if (const auto* v = get("bytes_read")) {
      viz::Series s{name, {}, {}, col};
      for (std::size_t k = 0; k < v->size(); ++k)
        s.x.push_back(static_cast<double>(k)), s.y.push_back((*v)[k] / 1048576.0);
      bytes.series.push_back(std::move(s));
      any_bytes = true;
    }
  }
  if (!any_kl) kl.title += " \xe2\x80\x94 not recorded (run with reference full)";
  if (!any_bytes) bytes.title += " \xe2\x80\x94 not recorded";
  if (!any_kl) kl.x.range = viz::Range{0, 1}, kl.y.range = viz::Range{0, 1};
  if (top1.series.empty()) top1.x.range = viz::Range{0, 1};
  if (!any_bytes) bytes.x.range = viz::Range{0, 1}, bytes.y.range = viz::Range{0, 1};
  // One step axis for the three panels, one legend (outside the data, beside the first) for a compare.
  double last = 0;
  for (const viz::LinePlot* p : {&kl, &top1, &bytes})
    for (const auto& se : p->series)
      if (!se.x.empty()) last = std::max(last, se.x.back());
  if (last > 0)
    for (viz::LinePlot* p : {&kl, &top1, &bytes})
      if (!p->series.empty()) p->x.range = viz::Range{0, last};
  kl.legend = runs.size() > 1 ? viz::LegendPos::Outside : viz::LegendPos::None;  // one run: named in the caption
  top1.legend = bytes.legend = viz::LegendPos::None;
  f.share_x = true;
  f.panels = {std::move(kl), std::move(top1), std::move(bytes)};
  return f;
}

// ---- selection ----------------------------------------------------------------------------------

viz::Figure selection_figure(const RunData& a, const Selection& sel) {
  viz::Figure f =
      base(a, "Selected head " + head_name(sel) + (sel.token >= 0 ? ", token " + std::to_string(sel.token) : ""));
  f.columns = 1;
  viz::BarChart b;
  b.title = "percentile of " + head_name(sel) + " among all " + std::to_string(a.n_layer * a.n_head_kv) + " KV heads";
  std::vector<double> pct;
  for (int m = 0; m < static_cast<int>(heads_metric_names().size()); ++m) {
    const auto v = heads_metric_values(a, m);
    const std::size_t idx = static_cast<std::size_t>(sel.layer * a.n_head_kv + sel.head);
    double p = kNaN;
    if (valid_head(a, sel) && idx < v.size() && std::isfinite(v[idx])) {
      // Mid-rank percentile: ties share the middle of their ranks (all equal: 50).
      std::int64_t below = 0, equal = 0, n = 0;
      for (float x : v)
        if (std::isfinite(x)) ++n, below += x < v[idx] ? 1 : 0, equal += x == v[idx] ? 1 : 0;
      p = n > 1
              ? 100.0 * (static_cast<double>(below) + 0.5 * static_cast<double>(equal - 1)) / static_cast<double>(n - 1)
              : 50.0;
    }
    // The value in the label: a 0th-percentile bar has no height but is not missing data.
    b.categories.push_back(std::string(heads_metric_names()[static_cast<std::size_t>(m)]) +
                           (std::isfinite(p) ? " (" + fmt("%.0f", p) + ")" : " (n/a)"));
    pct.push_back(p);
  }
  b.series = {{"", pct, viz::Color::hex(0x0072b2)}};
  b.y.range = viz::Range{0, 100};
  b.y.label = "percentile";
  b.legend = viz::LegendPos::None;
  f.panels.push_back(std::move(b));
  f.panels.push_back(kept_strip(a, sel,
                                "kept by " + head_name(sel) + " (" + std::to_string(a.kept_count(sel.layer, sel.head)) +
                                    " of " + std::to_string(a.n_tok) + ")"));
  f.row_weights = {2, 1};
  // Decode-time sparse selection (HSA, Quest, SparQ, Exact-TopK) when the run recorded it.
  const auto recall = a.steps.find("selection_recall");
  if (recall != a.steps.end() || !a.topk_unique.empty()) {
    f.columns = 2;
    f.row_weights = {2, 1.4};
    // Absent data is said, not drawn as empty axes.
    viz::Panel r = note_panel(
        "decode-time selection: no recall recorded (a sparse decode stage - HSA, Quest, SparQ, Exact-TopK - at "
        "capture full)");
    if (recall != a.steps.end()) {
      viz::LinePlot lp;
      lp.title = "decode-time selection: recall of the exact top-k per step";
      lp.x.label = "decode step";
      lp.y.label = "recall";
      lp.y.range = viz::Range{0, 1.02};
      lp.legend = viz::LegendPos::None;
      viz::Series sr{"recall", {}, recall->second, viz::Color::hex(0x0072b2)};
      for (std::size_t k = 0; k < recall->second.size(); ++k) sr.x.push_back(static_cast<double>(k));
      lp.series.push_back(std::move(sr));
      r = std::move(lp);
    }
    viz::Panel u = note_panel("distinct positions Exact-TopK picked over decode: not recorded (capture full)");
    if (!a.topk_unique.empty()) {
      viz::Heatmap hm;
      hm.title = "distinct positions Exact-TopK picked over decode";
      hm.rows = a.topk_rows;
      hm.cols = a.topk_cols;
      hm.values = a.topk_unique;
      hm.x.label = "query head";
      hm.y.label = "layer";
      hm.colorbar_label = "positions";
      hm.aggregate = viz::Aggregate::Mean;
      u = std::move(hm);
    }
    // Grid: percentile bars | recall; kept strip | top-k map.
    viz::Panel bars = std::move(f.panels[0]), strip = std::move(f.panels[1]);
    f.panels = {std::move(bars), std::move(r), std::move(strip), std::move(u)};
  }
  return f;
}

// ---- A - B views --------------------------------------------------------------------------------

// Per prompt position of (sel.layer, sel.head): 0 neither, 1 only B, 2 only A, 3 both (empty when
// the runs are on different prompts or the head is outside either run).
std::vector<int> kept_diff(const RunData& a, const RunData& b, const Selection& sel, KeptDiffCounts* counts) {
  std::vector<int> c;
  if (a.record.info.prompt.tokens != b.record.info.prompt.tokens || !valid_head(a, sel) || !valid_head(b, sel))
    return c;
  c.resize(static_cast<std::size_t>(a.n_tok));
  KeptDiffCounts n;
  for (std::int64_t i = 0; i < a.n_tok; ++i) {
    const bool ka = a.kept_at(sel.layer, sel.head, i), kb = b.kept_at(sel.layer, sel.head, i);
    c[static_cast<std::size_t>(i)] = ka && kb ? 3 : ka ? 2 : kb ? 1 : 0;
    n.both += ka && kb, n.only_a += ka && !kb, n.only_b += kb && !ka;
  }
  if (counts) *counts = n;
  return c;
}

namespace {

const std::vector<viz::TokenCategory>& diff_categories() {
  static const std::vector<viz::TokenCategory> c = {
      {"neither", kNeitherColor}, {"only B", kOnlyBColor}, {"only A", kOnlyAColor}, {"both", kBothColor}};
  return c;
}

// Kept-set difference of the selected head over the prompt.
viz::TokenStrip diff_strip(const RunData& a, const RunData& b, const Selection& sel) {
  viz::TokenStrip t;
  t.categories = diff_categories();
  KeptDiffCounts n;
  t.category = kept_diff(a, b, sel, &n);
  if (t.category.empty()) {
    t.category = {0};
    t.title = kept_diff_unavailable(a, b);
    if (t.title.empty()) t.title = head_name(sel) + " is outside one of the runs: no token-level difference";
  } else {
    t.title = head_name(sel) + ": both " + std::to_string(n.both) + ", only A " + std::to_string(n.only_a) +
              ", only B " + std::to_string(n.only_b);
  }
  t.aggregate = viz::Aggregate::Max;
  return t;
}

std::string ab_caption(const RunData& a, const RunData& b) {
  return "A: " + a.caption() + "  |  B: #" + std::to_string(b.ref.run) + " " +
         (b.record.row.pipeline_spec.empty() ? "full cache" : b.record.row.pipeline_spec) + " \xc2\xb7 " +
         b.budget_text();
}

const char* kDiffGroupNames[4] = {"neither", "only B", "only A", "both"};

}  // namespace

viz::Figure tokens_diff_figure(const RunData& a, const RunData& b, const Selection& sel) {
  viz::Figure f;
  f.caption = ab_caption(a, b);
  f.title = ab_title(a, b, 48);
  f.panels.push_back(diff_strip(a, b, sel));
  if (kept_diff_unavailable(a, b).empty())
    std::get<viz::TokenStrip>(f.panels[0]).title =
        "A \xe2\x88\x92 B, kept by " + std::get<viz::TokenStrip>(f.panels[0]).title;
  return f;
}

viz::Figure attention_diff_figure(const RunData& a, const RunData& b, const AttentionOptions& o, const Selection& sel,
                                  int width_px) {
  viz::Figure f;
  f.title = "Kept A \xe2\x88\x92 kept B over the prompt, layer " + std::to_string(sel.layer);
  f.caption = ab_caption(a, b);
  f.columns = 1;
  const std::int64_t T = a.n_tok, H = a.n_head_kv;
  const bool comparable = a.record.info.prompt.tokens == b.record.info.prompt.tokens && a.n_head_kv == b.n_head_kv &&
                          valid_head(a, sel) && valid_head(b, sel) && T > 0;
  if (!comparable) {
    const std::string why = kept_diff_unavailable(a, b);
    f.panels.push_back(
        note_panel(why.empty() ? head_name(sel) + " is outside one of the runs: no kept-set difference" : why));
    return f;
  }
  // Every KV head of the layer: +1 kept only by A, -1 only by B, 0 both or neither (mean per pixel).
  viz::Heatmap hm;
  hm.title = "all KV heads of layer " + std::to_string(sel.layer) +
             ": +1 only A, \xe2\x88\x92"
             "1 only B (mean per pixel)";
  hm.rows = H;
  hm.cols = T;
  hm.values.assign(static_cast<std::size_t>(H * T), 0.0f);
  for (std::int64_t h = 0; h < H; ++h) {
    const Selection s{sel.layer, h, -1};
    const auto c = kept_diff(a, b, s, nullptr);
    for (std::int64_t i = 0; i < T && !c.empty(); ++i)
      hm.values[static_cast<std::size_t>(h * T + i)] = c[static_cast<std::size_t>(i)] == 2   ? 1.0f
                                                       : c[static_cast<std::size_t>(i)] == 1 ? -1.0f
                                                                                             : 0.0f;
  }
  hm.x.label = "prompt position";
  hm.y.label = "KV head";
  hm.colormap = kDiffColormap;
  hm.value_range = viz::Range{-1, 1};
  hm.colorbar_label = "kept A \xe2\x88\x92 kept B";
  hm.aggregate = viz::Aggregate::Mean;
  f.panels.push_back(std::move(hm));

  // Selected head: attention (the same model and prompt: A's capture, else B's), markers where only
  // one run kept the token (max per bucket).
  const float* row = a.attention_row(sel.layer, sel.head);
  if (!row) row = b.attention_row(sel.layer, sel.head);
  const auto cat = kept_diff(a, b, sel, nullptr);
  if (row) {
    const std::int64_t nb = std::clamp<std::int64_t>(width_px / 2, 16, 4096);
    const std::int64_t per = std::max<std::int64_t>(1, (T + nb - 1) / nb);
    viz::Series all, only_a, only_b;
    all.name = per > 1 ? "all tokens (max per " + std::to_string(per) + ")" : "all tokens";
    all.color = viz::Color::hex(0x555555);
    all.width = 1.2;
    only_a.name = "kept only by A";
    only_b.name = "kept only by B";
    only_a.color = kOnlyAColor;
    only_b.color = kOnlyBColor;
    for (auto* s : {&only_a, &only_b})
      s->line = viz::LineStyle::None, s->marker = viz::Marker::Circle, s->marker_size = 2.4;
    for (std::int64_t s = 0; s < T; s += per) {
      const std::int64_t e = std::min(T, s + per);
      float mx = 0, ma = -1, mb = -1;
      for (std::int64_t i = s; i < e; ++i) {
        mx = std::max(mx, row[i]);
        if (cat[static_cast<std::size_t>(i)] == 2) ma = std::max(ma, row[i]);
        if (cat[static_cast<std::size_t>(i)] == 1) mb = std::max(mb, row[i]);
      }
      const double x = per > 1 ? 0.5 * static_cast<double>(s + e - 1) : static_cast<double>(s);
      all.x.push_back(x), all.y.push_back(mx);
      if (ma >= 0) only_a.x.push_back(x), only_a.y.push_back(ma);
      if (mb >= 0) only_b.x.push_back(x), only_b.y.push_back(mb);
    }
    viz::LinePlot lp;
    lp.title = head_name(sel) + ": attention per prompt position, tokens only one run kept";
    lp.x.label = "prompt position";
    lp.y.label = "window-mean attention";
    lp.y.log = o.log_scale;
    lp.x.range = viz::Range{0, static_cast<double>(std::max<std::int64_t>(T - 1, 1))};
    lp.series = {std::move(all), std::move(only_a), std::move(only_b)};
    lp.legend = viz::LegendPos::TopRight;
    f.panels.push_back(std::move(lp));
  } else {
    f.panels.push_back(
        note_panel("no attention captured for layer " + std::to_string(sel.layer) + " (run with capture full)"));
  }
  f.panels.push_back(diff_strip(a, b, sel));
  f.row_weights = {2.2, 2.6, 1.2};
  return f;
}

viz::Figure keys_diff_figure(const RunData& a, const RunData& b, const KeysOptions& o, const Selection& sel) {
  viz::Figure f;
  f.title = "Key geometry of " + head_name(sel) + ": tokens kept by A, by B, by both";
  f.caption = ab_caption(a, b);
  f.columns = 2;
  const auto cat = kept_diff(a, b, sel, nullptr);
  const float* cos = a.cos_row(sel.layer, sel.head);
  const float* att = a.attention_row(sel.layer, sel.head);
  const float* pca = a.pca_row(sel.layer, sel.head);
  if (!cos)
    cos = b.cos_row(sel.layer, sel.head), att = b.attention_row(sel.layer, sel.head),
    pca = b.pca_row(sel.layer, sel.head);
  if (cat.empty() || !cos) {
    f.columns = 1;
    const std::string why = kept_diff_unavailable(a, b);
    f.panels.push_back(note_panel(
        cat.empty() ? (why.empty() ? head_name(sel) + " is outside one of the runs: no kept-set difference" : why)
                    : "no cos_to_mean captured for " + head_name(sel) + " (run with capture full)"));
    return f;
  }
  const std::int64_t T = a.n_tok;
  float lo = std::numeric_limits<float>::max(), hi = -lo;
  for (std::int64_t i = 0; i < T; ++i)
    if (std::isfinite(cos[i])) lo = std::min(lo, cos[i]), hi = std::max(hi, cos[i]);
  if (!(hi > lo)) hi = lo + 1e-3f;
  const int bins = std::clamp(o.bins, 4, 200);
  const auto& cats = diff_categories();
  // Histogram of only A / only B / both (neither dominates and is left out).
  viz::BarChart hist;
  hist.title = "cosine of each key to the mean key: kept only by A, only by B, by both";
  for (int g : {2, 1, 3})
    hist.series.push_back({kDiffGroupNames[g], std::vector<double>(static_cast<std::size_t>(bins), 0.0),
                           cats[static_cast<std::size_t>(g)].color});
  for (int k = 0; k < bins; ++k) hist.categories.push_back(fmt("%.2f", lo + (hi - lo) * (k + 0.5) / bins));
  // Scatter groups, subsampled to a few thousand points each (neither drawn first, underneath).
  std::array<std::int64_t, 4> n{};
  for (int c : cat) ++n[static_cast<std::size_t>(c)];
  const std::int64_t cap = 2000;
  std::array<std::int64_t, 4> stride{}, seen{};
  for (int g = 0; g < 4; ++g)
    stride[static_cast<std::size_t>(g)] = std::max<std::int64_t>(1, (n[static_cast<std::size_t>(g)] + cap - 1) / cap);
  std::array<viz::ScatterGroup, 4> sc, pc;
  for (int g = 0; g < 4; ++g) {
    const viz::Color col = g == 0 ? viz::Color::hex(0xbbbbbb) : *cats[static_cast<std::size_t>(g)].color;
    sc[static_cast<std::size_t>(g)] = {kDiffGroupNames[g], {}, {}, col, viz::Marker::Circle, g == 0 ? 1.8 : 2.4};
    pc[static_cast<std::size_t>(g)] = sc[static_cast<std::size_t>(g)];
  }
  const int hist_series[4] = {-1, 1, 0, 2};
  for (std::int64_t i = 0; i < T; ++i) {
    const auto g = static_cast<std::size_t>(cat[static_cast<std::size_t>(i)]);
    if (std::isfinite(cos[i]) && hist_series[g] >= 0) {
      const int bin = std::clamp(static_cast<int>((cos[i] - lo) / (hi - lo) * bins), 0, bins - 1);
      hist.series[static_cast<std::size_t>(hist_series[g])].values[static_cast<std::size_t>(bin)] += 1;
    }
    if ((seen[g]++ % stride[g]) != 0) continue;
    if (att && std::isfinite(cos[i])) sc[g].x.push_back(cos[i]), sc[g].y.push_back(std::max(att[i], 1e-9f));
    if (pca) pc[g].x.push_back(pca[2 * i]), pc[g].y.push_back(pca[2 * i + 1]);
  }
  hist.x.label = "cosine to mean key";
  hist.y.label = "tokens";
  for (int k = 0; k < bins; k += std::max(1, bins / 8))
    hist.x.ticks.push_back(k), hist.x.tick_labels.push_back(hist.categories[static_cast<std::size_t>(k)]);
  hist.legend = viz::LegendPos::TopLeft;
  f.panels.push_back(std::move(hist));
  const bool sub = std::any_of(stride.begin(), stride.end(), [](std::int64_t s) { return s > 1; });
  if (att) {
    viz::ScatterPlot sp;
    sp.title = "cosine to mean key vs attention" + std::string(sub ? " (subsampled)" : "");
    sp.x.label = "cosine to mean key";
    sp.y.label = "window-mean attention";
    sp.y.log = true;
    sp.groups = {sc[0], sc[3], sc[1], sc[2]};
    f.panels.push_back(std::move(sp));
  } else {
    f.panels.push_back(note_panel("no attention captured: no scatter"));
  }
  if (pca) {
    f.columns = 3;
    viz::ScatterPlot pp;
    pp.title = "keys on their two principal axes" + std::string(sub ? " (subsampled)" : "");
    pp.x.label = "PC 1";
    pp.y.label = "PC 2";
    pp.groups = {pc[0], pc[3], pc[1], pc[2]};
    f.panels.push_back(std::move(pp));
  }
  return f;
}

viz::Figure channels_diff_figure(const RunData& a, const RunData& b, const ChannelsOptions& o, const Selection& sel) {
  viz::Figure f;
  f.title = "Channel saliency of layer " + std::to_string(sel.layer) + ": A \xe2\x88\x92 B";
  f.caption = ab_caption(a, b);
  f.columns = 1;
  const std::int64_t D = a.head_dim, H = a.n_head_kv;
  const auto* ma = a.layer_values(Part::kChannelMean, sel.layer);
  const auto* mb = b.layer_values(Part::kChannelMean, sel.layer);
  const auto* ca = a.layer_values(Part::kChannelCv, sel.layer);
  const auto* cb = b.layer_values(Part::kChannelCv, sel.layer);
  if (!ma || !mb || b.head_dim != D || b.n_head_kv != H || D == 0) {
    f.panels.push_back(note_panel("channel statistics of layer " + std::to_string(sel.layer) +
                                  " not captured in both runs (capture full, same model)"));
    return f;
  }
  const std::int64_t h = std::clamp<std::int64_t>(sel.head, 0, H - 1);
  auto diff = [&](const std::vector<float>* x, const std::vector<float>* y, std::string title, std::string ylabel) {
    std::vector<double> v(static_cast<std::size_t>(D), kNaN);
    if (x && y)
      for (std::int64_t j = 0; j < D; ++j)
        v[static_cast<std::size_t>(j)] =
            (*x)[static_cast<std::size_t>(h * D + j)] - (*y)[static_cast<std::size_t>(h * D + j)];
    return channel_bars(std::move(v), std::move(title), std::move(ylabel), kNeutralColor);
  };
  f.panels.push_back(diff(ma, mb, head_name(sel) + ": mean saliency per channel, A \xe2\x88\x92 B",
                          "\xce\x94 mean |q\xcc\x84|\xc2\xb7|k|"));
  f.panels.push_back(diff(ca, cb, head_name(sel) + ": CV over tokens per channel, A \xe2\x88\x92 B", "\xce\x94 CV"));
  viz::Heatmap hm;
  hm.title = std::string(o.cv ? "channel CV" : "mean channel saliency") +
             ", A \xe2\x88\x92 B, every KV head of layer " + std::to_string(sel.layer) + kDiffKey;
  hm.rows = H;
  hm.cols = D;
  const auto* x = o.cv ? ca : ma;
  const auto* y = o.cv ? cb : mb;
  hm.values.assign(static_cast<std::size_t>(H * D), kNaNf);
  if (x && y)
    for (std::size_t i = 0; i < hm.values.size(); ++i) hm.values[i] = (*x)[i] - (*y)[i];
  hm.x.label = "channel";
  hm.y.label = "KV head";
  hm.colormap = kDiffColormap;
  hm.colorbar_label = o.cv ? "\xce\x94 CV" : "\xce\x94 mean";
  f.panels.push_back(std::move(hm));
  f.row_weights = {1, 1, 1.3};
  return f;
}

// ---- compare ------------------------------------------------------------------------------------

std::string ab_title(const RunData& a, const RunData& b, int width) {
  const auto [pa, pb] = elide_pair(pipeline_text(a), pipeline_text(b), width);
  return "A #" + std::to_string(a.ref.run) + " " + pa + " vs B #" + std::to_string(b.ref.run) + " " + pb;
}

std::string kept_diff_unavailable(const RunData& a, const RunData& b) {
  if (a.record.info.prompt.tokens != b.record.info.prompt.tokens)
    return "runs on different prompts (" + std::to_string(a.record.info.prompt.tokens.size()) + " tokens vs " +
           std::to_string(b.record.info.prompt.tokens.size()) + "): kept-set overlap is not defined";
  if (a.n_layer != b.n_layer || a.n_head_kv != b.n_head_kv)
    return "runs on different model shapes (" + std::to_string(a.n_layer) + " x " + std::to_string(a.n_head_kv) +
           " vs " + std::to_string(b.n_layer) + " x " + std::to_string(b.n_head_kv) +
           " layers x KV heads): kept-set overlap is not defined";
  return "";
}

viz::Figure compare_figure(const RunData& a, const RunData& b, const Selection& sel) {
  viz::Figure f;
  f.title = ab_title(a, b, 48);
  f.caption = "A: " + a.caption() +
              "  |  B: " + (b.record.row.pipeline_spec.empty() ? "full cache" : b.record.row.pipeline_spec) +
              " \xc2\xb7 " + b.budget_text();
  f.columns = 2;
  const bool same_shape = a.n_layer == b.n_layer && a.n_head_kv == b.n_head_kv;
  const bool same_prompt = a.record.info.prompt.tokens == b.record.info.prompt.tokens;
  // Per-head Jaccard of the kept sets.
  viz::Heatmap hm;
  if (same_shape && same_prompt) {
    hm.rows = a.n_layer;
    hm.cols = a.n_head_kv;
    hm.values.resize(static_cast<std::size_t>(hm.rows * hm.cols), kNaNf);
    for (std::int64_t l = 0; l < a.n_layer; ++l)
      for (std::int64_t h = 0; h < a.n_head_kv; ++h) {
        std::vector<std::int64_t> all_a, all_b;
        const auto& ka = a.kept_set(l, h) ? *a.kept_set(l, h) : all_a;
        const auto& kb = b.kept_set(l, h) ? *b.kept_set(l, h) : all_b;
        if (!a.has_kept) all_a.resize(static_cast<std::size_t>(a.n_tok)), std::iota(all_a.begin(), all_a.end(), 0);
        if (!b.has_kept) all_b.resize(static_cast<std::size_t>(b.n_tok)), std::iota(all_b.begin(), all_b.end(), 0);
        hm.values[static_cast<std::size_t>(l * a.n_head_kv + h)] = static_cast<float>(jaccard(ka, kb));
      }
    hm.title =
        "kept-set overlap |A\xe2\x88\xa9"
        "B| / |A\xe2\x88\xaa"
        "B| per head";
    hm.value_range = viz::Range{0, 1};
  } else {
    hm.rows = 1;
    hm.cols = 1;
    hm.values = {kNaNf};
    hm.title = kept_diff_unavailable(a, b);
  }
  hm.x.label = "KV head";
  hm.y.label = "layer";
  hm.colorbar_label = "Jaccard";
  hm.aggregate = viz::Aggregate::Mean;
  f.panels.push_back(std::move(hm));

  // Summary metric deltas, relative.
  viz::BarChart d;
  d.title = "summary metrics: B relative to A (%)";
  std::vector<double> rel;
  for (const auto& [name, va] : a.record.row.summary) {
    auto it = b.record.row.summary.find(name);
    if (it == b.record.row.summary.end()) continue;
    const double vb = it->second;
    d.categories.push_back(name);
    rel.push_back(std::abs(va) > 1e-12 ? 100.0 * (vb - va) / std::abs(va) : (std::abs(vb) > 1e-12 ? kNaN : 0.0));
  }
  if (d.categories.empty()) {
    d.categories = {"(no shared summary metrics)"};
    rel = {kNaN};
    d.y.range = viz::Range{-1, 1};
  }
  d.series = {{"", rel, kNeutralColor}};
  d.y.label = "% change";
  d.legend = viz::LegendPos::None;
  f.panels.push_back(std::move(d));

  // Token-level difference for the selected head.
  f.panels.push_back(diff_strip(a, b, sel));

  // Kept entries per head, A - B (where head-wise budgets moved entries).
  viz::Heatmap kd;
  kd.title = std::string("kept entries per head: A \xe2\x88\x92 B") + kDiffKey;
  if (same_shape) {
    kd.rows = a.n_layer;
    kd.cols = a.n_head_kv;
    for (std::int64_t l = 0; l < a.n_layer; ++l)
      for (std::int64_t h = 0; h < a.n_head_kv; ++h)
        kd.values.push_back(static_cast<float>(a.kept_count(l, h) - b.kept_count(l, h)));
  } else {
    kd.rows = kd.cols = 1;
    kd.values = {kNaNf};
    kd.title += " (different shapes)";
  }
  kd.colormap = kDiffColormap;
  kd.x.label = "KV head";
  kd.y.label = "layer";
  kd.colorbar_label = "\xce\x94 entries";
  kd.aggregate = viz::Aggregate::Mean;
  f.panels.push_back(std::move(kd));
  f.row_weights = {1.6, 1};
  return f;
}

// ---- export all ---------------------------------------------------------------------------------

std::vector<std::pair<std::string, viz::Figure>> all_figures(const RunData& a, const RunData* b, const Selection& sel,
                                                             int width, int height) {
  std::vector<std::pair<std::string, viz::Figure>> out;
  for (const FigureEntry& e : figure_table()) {
    if (!e.all || (e.two_runs && !b)) continue;
    for (const std::string& v : e.all()) {
      FigureInput in;
      in.run = &a;
      in.b = e.two_runs ? b : nullptr;
      in.sel = sel;
      in.variant = v;
      in.width = width;
      viz::Figure f = e.build(in);
      f.width = width;
      f.height = e.strip ? std::max(240, height / 3) : height;
      out.emplace_back(std::string(e.name) + (v.empty() ? "" : "_" + v), std::move(f));
    }
  }
  return out;
}

}  // namespace kvscope::figures
