#include "session_figures.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace kvscope::figures {
namespace {

using sessions::Blob;
using sessions::RunRecord;
using sessions::SessionStore;

/// Column names of the head_summary blob (core/capture.h summary_metric_names()).
const std::vector<std::string>& summary_columns() {
  static const std::vector<std::string> c = {"entropy",    "mass_top1pct", "mass_top5pct", "tokens95_frac",
                                             "sink_share", "cos_mean",     "channel_cv"};
  return c;
}

std::string caption_of(const RunRecord& r) {
  std::ostringstream os;
  os << "run " << r.row.id << " | " << r.info.model.path << " | pipeline: " << r.info.pipeline.spec << " | budget "
     << r.info.budget.value << " " << sessions::to_string(r.info.budget.unit) << " | " << r.info.prompt.tokens.size()
     << " prompt tokens";
  return os.str();
}

Blob need_blob(const SessionStore& s, int64_t run, const std::string& name, int64_t layer, int64_t head) {
  auto b = s.load_blob(run, name, layer, head);
  if (!b)
    throw std::invalid_argument("run " + std::to_string(run) + " has no '" + name + "' data for layer " +
                                std::to_string(layer) + (name == "kept_positions" ? "" : " (record it with --capture full)"));
  return *b;
}

int64_t n_layers(const RunRecord& r) { return r.info.model.n_layer; }
int64_t n_kv(const RunRecord& r) { return r.info.model.n_head_kv; }

viz::Figure heads(const SessionStore& s, const RunRecord& r, const FigureRequest& q) {
  const auto& cols = summary_columns();
  const auto it = std::find(cols.begin(), cols.end(), q.metric);
  if (it == cols.end()) throw std::invalid_argument("unknown head metric '" + q.metric + "'");
  const int64_t c = it - cols.begin(), L = n_layers(r), H = n_kv(r);
  viz::Heatmap hm;
  hm.title = q.metric + " per layer and KV head";
  hm.rows = L;
  hm.cols = H;
  for (int64_t l = 0; l < L; ++l) {
    const auto v = need_blob(s, r.row.id, "head_summary", l, -1).to_f32();
    for (int64_t h = 0; h < H; ++h) hm.values.push_back(v[h * int64_t(cols.size()) + c]);
  }
  hm.x.label = "KV head";
  hm.y.label = "layer";
  hm.colorbar_label = q.metric;
  viz::Figure f;
  f.title = "Attention concentration: " + q.metric;
  f.caption = caption_of(r);
  f.panels.push_back(hm);
  return f;
}

viz::Figure budgets(const SessionStore& s, const RunRecord& r, const FigureRequest&) {
  const int64_t L = n_layers(r), H = n_kv(r);
  viz::Heatmap hm;
  hm.title = "entries kept after prefill";
  hm.rows = L;
  hm.cols = H;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) hm.values.push_back(float(need_blob(s, r.row.id, "kept_positions", l, h).numel()));
  hm.x.label = "KV head";
  hm.y.label = "layer";
  hm.colorbar_label = "kept entries";
  viz::Figure f;
  f.title = "Budgets per layer and KV head";
  f.caption = caption_of(r);
  f.panels.push_back(hm);
  return f;
}

viz::Figure tokens(const SessionStore& s, const RunRecord& r, const FigureRequest& q) {
  const auto kept = need_blob(s, r.row.id, "kept_positions", q.layer, q.head).values<int64_t>();
  const std::set<int64_t> keep(kept.begin(), kept.end());
  viz::TokenStrip t;
  t.title = "layer " + std::to_string(q.layer) + ", KV head " + std::to_string(q.head) + ": kept " +
            std::to_string(kept.size()) + " of " + std::to_string(r.info.prompt.tokens.size());
  t.categories = {{"evicted", viz::Color{191, 191, 191}}, {"kept", viz::Color{46, 158, 89}}};
  for (size_t i = 0; i < r.info.prompt.tokens.size(); ++i) {
    const int32_t id = r.info.prompt.tokens[i];
    t.tokens.push_back(q.token_text ? q.token_text(id) : std::to_string(id));
    t.category.push_back(keep.count(int64_t(i)) ? 1 : 0);
  }
  viz::Figure f;
  f.title = "Kept and evicted tokens";
  f.caption = caption_of(r);
  f.panels.push_back(t);
  return f;
}

viz::Figure mass(const SessionStore& s, const RunRecord& r, const FigureRequest& q) {
  // Ada-KV Fig. 1: per head, cumulative attention mass against the fraction of the cache kept.
  viz::LinePlot p;
  p.title = "layer " + std::to_string(q.layer);
  p.x.label = "fraction of cache kept (top entries by attention)";
  p.y.label = "cumulative attention mass";
  const auto b = need_blob(s, r.row.id, "attention", q.layer, -1);
  const auto v = b.to_f32();
  const int64_t H = b.shape[0], n = b.shape[1];
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> a(v.begin() + h * n, v.begin() + (h + 1) * n);
    std::sort(a.rbegin(), a.rend());
    viz::Series se;
    se.name = "KV head " + std::to_string(h);
    double cum = 0;
    const int64_t stride = std::max<int64_t>(1, n / 400);
    for (int64_t i = 0; i < n; ++i) {
      cum += a[i];
      if (i % stride == 0 || i == n - 1) {
        se.x.push_back(double(i + 1) / n);
        se.y.push_back(cum);
      }
    }
    p.series.push_back(se);
  }
  viz::Figure f;
  f.title = "Attention concentration (cumulative mass per head)";
  f.caption = caption_of(r);
  f.panels.push_back(p);
  return f;
}

viz::Figure keys(const SessionStore& s, const RunRecord& r, const FigureRequest& q) {
  // KeyDiff Fig. 2/3 idea: cosine to the mean-key anchor against the attention each key receives.
  const auto cosb = need_blob(s, r.row.id, "cos_to_mean", q.layer, -1), attb = need_blob(s, r.row.id, "attention", q.layer, -1);
  const auto cos = cosb.to_f32(), att = attb.to_f32();
  const int64_t n = cosb.shape[1];
  const auto kept = need_blob(s, r.row.id, "kept_positions", q.layer, q.head).values<int64_t>();
  const std::set<int64_t> keep(kept.begin(), kept.end());
  viz::ScatterPlot sc;
  sc.title = "layer " + std::to_string(q.layer) + ", KV head " + std::to_string(q.head);
  sc.x.label = "cosine to the mean key";
  sc.y.label = "window attention";
  sc.y.log = true;
  viz::ScatterGroup kg{"kept", {}, {}, viz::Color{46, 158, 89}}, eg{"evicted", {}, {}, viz::Color{153, 153, 153}};
  viz::LinePlot hist;
  hist.title = "cosine-to-anchor histogram";
  hist.x.label = "cosine to the mean key";
  hist.y.label = "entries";
  const auto [lo_it, hi_it] = std::minmax_element(cos.begin() + q.head * n, cos.begin() + (q.head + 1) * n);
  const double lo = *lo_it, width = std::max(double(*hi_it) - lo, 1e-6) / 30;
  std::vector<double> kept_bins(30, 0.0), evicted_bins(30, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double c = cos[q.head * n + i], a = std::max(att[q.head * n + i], 1e-9f);
    const bool k = keep.count(i) != 0;
    auto& g = k ? kg : eg;
    g.x.push_back(c);
    g.y.push_back(a);
    (k ? kept_bins : evicted_bins)[std::clamp<int64_t>(int64_t((c - lo) / width), 0, 29)] += 1;
  }
  viz::Series hk{"kept"}, he{"evicted"};
  hk.color = viz::Color{46, 158, 89};
  he.color = viz::Color{153, 153, 153};
  for (int i = 0; i < 30; ++i) {
    hk.x.push_back(lo + (i + 0.5) * width);
    hk.y.push_back(kept_bins[i]);
    he.x.push_back(lo + (i + 0.5) * width);
    he.y.push_back(evicted_bins[i]);
  }
  hist.series = {hk, he};
  sc.groups = {kg, eg};
  viz::Figure f;
  f.title = "Key geometry";
  f.caption = caption_of(r);
  // KeyDiff Fig. 3: keys on their first two principal axes, kept vs evicted.
  if (auto pca = s.load_blob(r.row.id, "keys_pca", q.layer, -1)) {
    const auto v = pca->to_f32();
    viz::ScatterPlot p;
    p.title = "keys, 2-D PCA";
    p.x.label = "PC 1";
    p.y.label = "PC 2";
    viz::ScatterGroup pk{"kept", {}, {}, viz::Color{46, 158, 89}}, pe{"evicted", {}, {}, viz::Color{153, 153, 153}};
    double mx = 0, my = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = v[(q.head * n + i) * 2], y = v[(q.head * n + i) * 2 + 1];
      (keep.count(i) ? pk : pe).x.push_back(x);
      (keep.count(i) ? pk : pe).y.push_back(y);
      mx += x / n;
      my += y / n;
    }
    p.groups = {pe, pk};
    viz::Highlight anchor;
    anchor.label = "mean key";
    anchor.x = mx;
    anchor.y = my;
    p.highlights.push_back(anchor);
    f.panels.push_back(p);
  }
  f.panels.push_back(sc);
  f.panels.push_back(hist);
  f.columns = int(f.panels.size());
  f.width = 300 * f.columns + 100;
  return f;
}

viz::Figure channels(const SessionStore& s, const RunRecord& r, const FigureRequest& q) {
  // SPARK Fig. 2: channel saliency |q̄_j|·|k_tj| (mean over tokens) per head, and its CV per channel.
  const auto mb = need_blob(s, r.row.id, "channel_mean", q.layer, -1), cb = need_blob(s, r.row.id, "channel_cv", q.layer, -1);
  const int64_t H = mb.shape[0], D = mb.shape[1];
  viz::Heatmap hm;
  hm.title = "mean saliency per channel";
  hm.rows = H;
  hm.cols = D;
  hm.values = mb.to_f32();
  hm.x.label = "channel";
  hm.y.label = "KV head";
  hm.colorbar_label = "mean |q| |k|";
  viz::LinePlot cv;
  cv.title = "coefficient of variation over tokens";
  cv.x.label = "channel";
  cv.y.label = "CV";
  const auto c = cb.to_f32();
  for (int64_t h = 0; h < H; ++h) {
    viz::Series se;
    se.name = "KV head " + std::to_string(h);
    for (int64_t j = 0; j < D; ++j) {
      se.x.push_back(double(j));
      se.y.push_back(c[h * D + j]);
    }
    cv.series.push_back(se);
  }
  viz::Figure f;
  f.title = "Channel saliency, layer " + std::to_string(q.layer);
  f.caption = caption_of(r);
  f.panels.push_back(hm);
  f.panels.push_back(cv);
  f.columns = 1;
  return f;
}

viz::Figure fidelity(const SessionStore& s, const RunRecord& r, const FigureRequest&) {
  const auto kl = s.load_step_metric(r.row.id, "kl"), top1 = s.load_step_metric(r.row.id, "top1");
  if (kl.empty()) throw std::invalid_argument("run " + std::to_string(r.row.id) + " has no fidelity (record it with --reference full)");
  viz::LinePlot a, b;
  a.title = "KL(full || compressed) per step";
  a.x.label = "decode step";
  a.y.label = "KL (nats)";
  b.title = "top-1 agreement (running mean)";
  b.x.label = "decode step";
  b.y.label = "agreement";
  viz::Series ka{"KL"}, ta{"top-1"};
  double run = 0;
  for (size_t i = 0; i < kl.size(); ++i) {
    ka.x.push_back(double(kl[i].step));
    ka.y.push_back(kl[i].value);
  }
  for (size_t i = 0; i < top1.size(); ++i) {
    run += top1[i].value;
    ta.x.push_back(double(top1[i].step));
    ta.y.push_back(run / double(i + 1));
  }
  a.series.push_back(ka);
  b.series.push_back(ta);
  viz::Figure f;
  f.title = "Fidelity to the full cache";
  f.caption = caption_of(r);
  f.panels = {a, b};
  // Sparse decode selection (HSA, Quest, SparQ): recall of the exact top-k per step.
  const auto recall = s.load_step_metric(r.row.id, "selection_recall");
  if (!recall.empty()) {
    viz::LinePlot c;
    c.title = "selection recall of the exact top-k";
    c.x.label = "decode step";
    c.y.label = "recall";
    c.y.range = viz::Range{0, 1};
    viz::Series rs{"recall"};
    for (const auto& m : recall) {
      rs.x.push_back(double(m.step));
      rs.y.push_back(m.value);
    }
    c.series.push_back(rs);
    f.panels.push_back(c);
  }
  f.columns = 1;
  f.height = 300 * int(f.panels.size());
  return f;
}

viz::Figure topk_cdf(const SessionStore& s, const RunRecord& r) {
  // RocketKV Fig. 2b: ECDF of the number of distinct positions Exact-TopK picks over all decode steps.
  auto b = s.load_blob(r.row.id, "topk_unique", -1, -1);
  if (!b) throw std::invalid_argument("run " + std::to_string(r.row.id) + " has no top-k record (record it with --capture full)");
  const int64_t L = b->shape[0], H = b->shape[1];
  auto v = b->values<int64_t>();
  viz::LinePlot p;
  p.title = "distinct top-256 positions over " + std::to_string(r.outputs.tokens.size()) + " decode steps";
  p.x.label = "distinct positions (union over steps)";
  p.y.label = "fraction of heads";
  viz::Series all{"all " + std::to_string(L * H) + " query heads"};
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) {
    all.x.push_back(double(v[i]));
    all.y.push_back(double(i + 1) / double(v.size()));
  }
  p.series.push_back(all);
  viz::Figure f;
  f.title = "Exact-TopK selections are stable across decode steps";
  f.caption = caption_of(r) + " | prompt " + std::to_string(r.info.prompt.tokens.size()) + " tokens";
  f.panels.push_back(p);
  return f;
}

viz::Figure grid(const SessionStore& s, const FigureRequest& q) {
  // Needle-style grid over a sweep: prompt length x budget, coloured by a summary metric.
  const std::string metric = q.metric == "tokens95_frac" ? "mean_kl" : q.metric;
  std::map<std::pair<double, double>, std::pair<double, int>> cells;
  std::set<double> rows, cols;
  std::set<std::string> units;
  for (const auto& row : s.list_runs()) {
    if (row.status != sessions::RunStatus::kComplete) continue;
    units.insert(std::string(sessions::to_string(row.budget.unit)));
    const auto m = row.summary.find(metric), n = row.summary.find("n_prompt");
    if (m == row.summary.end() || n == row.summary.end()) continue;
    auto& c = cells[{n->second, row.budget.value}];
    c.first += m->second;
    c.second += 1;
    rows.insert(n->second);
    cols.insert(row.budget.value);
  }
  if (cells.empty()) throw std::invalid_argument("no complete runs with '" + metric + "' to put in a grid");
  viz::Heatmap hm;
  hm.title = metric + " (mean over pipelines)";
  hm.rows = int64_t(rows.size());
  hm.cols = int64_t(cols.size());
  for (double rv : rows) {
    std::ostringstream os;
    os << int64_t(rv);
    hm.row_labels.push_back(os.str());
    for (double cv : cols) {
      auto it = cells.find({rv, cv});
      hm.values.push_back(it == cells.end() ? NAN : float(it->second.first / it->second.second));
    }
  }
  for (double cv : cols) {
    std::ostringstream os;
    os << cv;
    hm.col_labels.push_back(os.str());
  }
  hm.x.label = units.size() == 1 ? "budget (" + *units.begin() + ")" : "budget (mixed units)";
  hm.y.label = "prompt length (tokens)";
  hm.colorbar_label = metric;
  viz::Figure f;
  f.title = "Sweep grid: " + metric;
  f.caption = s.path();
  f.panels.push_back(hm);
  return f;
}

}  // namespace

const std::vector<std::string>& figure_names() {
  static const std::vector<std::string> n = {"heads", "tokens", "mass", "topk-cdf", "keys", "channels", "fidelity", "budgets", "grid"};
  return n;
}

viz::Figure build_figure(const SessionStore& s, int64_t run, const FigureRequest& q) {
  if (q.name == "grid") return grid(s, q);
  const RunRecord r = s.load_run(run);
  if (q.name == "heads") return heads(s, r, q);
  if (q.name == "budgets") return budgets(s, r, q);
  if (q.name == "tokens") return tokens(s, r, q);
  if (q.name == "mass") return mass(s, r, q);
  if (q.name == "keys") return keys(s, r, q);
  if (q.name == "channels") return channels(s, r, q);
  if (q.name == "fidelity") return fidelity(s, r, q);
  if (q.name == "topk-cdf") return topk_cdf(s, r);
  std::string known;
  for (const auto& n : figure_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown figure '" + q.name + "' (known: " + known + ")");
}

}  // namespace kvscope::figures
