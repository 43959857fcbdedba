#include "export_figures.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "figure_table.h"

namespace kvscope::figures {
namespace {

// Decodes `parts` of `layer`, or throws naming the first one the run did not store.
void need(const sessions::SessionStore& store, const RunData& r, PartSet parts, std::int64_t layer) {
  for (Part p : parts.parts()) {
    const std::int64_t l = run_level(p) ? 0 : layer;
    if (p == Part::kTimeline && !r.stored(p, l))
      throw std::invalid_argument("run " + std::to_string(r.ref.run) +
                                  " has no timeline (record runs with --db and --capture summary or full)");
    if (!r.stored(p, l) || (p == Part::kKept && !r.has_kept))
      throw std::invalid_argument("run " + std::to_string(r.ref.run) + " has no '" + std::string(part_blob(p)) +
                                  "' data for layer " + std::to_string(l) +
                                  (p == Part::kKept ? "" : " (record it with --capture full)"));
    load_part(store, r, p, l);
  }
}

// Decodes the parts a figure can use when they are stored (the figure notes what is absent).
void want(const sessions::SessionStore& store, const RunData& r, PartSet parts, std::int64_t layer) {
  for (Part p : parts.parts()) load_part(store, r, p, run_level(p) ? 0 : layer);
}

}  // namespace

const std::vector<std::string>& figure_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const FigureEntry& e : figure_table())
      if (e.cli) n.emplace_back(e.name);
    return n;
  }();
  return names;
}

viz::Figure mass_figure(const RunData& r, std::int64_t layer) {
  viz::LinePlot p;
  p.title = "layer " + std::to_string(layer);
  p.x.label = "fraction of cache kept (top entries by attention)";
  p.y.label = "cumulative attention mass";
  const std::int64_t n = r.n_tok;
  for (std::int64_t h = 0; h < r.n_head_kv; ++h) {
    const float* row = r.attention_row(layer, h);
    if (!row || n == 0) continue;
    std::vector<float> a(row, row + n);
    std::sort(a.rbegin(), a.rend());
    viz::Series se;
    se.name = "KV head " + std::to_string(h);
    double cum = 0;
    const std::int64_t stride = std::max<std::int64_t>(1, n / 400);
    for (std::int64_t i = 0; i < n; ++i) {
      cum += a[static_cast<std::size_t>(i)];
      if (i % stride == 0 || i == n - 1)
        se.x.push_back(static_cast<double>(i + 1) / static_cast<double>(n)), se.y.push_back(cum);
    }
    p.series.push_back(std::move(se));
  }
  if (p.series.empty()) p.title += " (no attention captured)", p.x.range = p.y.range = viz::Range{0, 1};
  viz::Figure f;
  f.title = "Attention concentration (cumulative mass per head)";
  f.caption = r.caption();
  f.panels.push_back(std::move(p));
  return f;
}

viz::Figure topk_cdf_figure(const RunData& r) {
  viz::LinePlot p;
  p.title = "distinct top-256 positions over " + std::to_string(r.record.outputs.tokens.size()) + " decode steps";
  p.x.label = "distinct positions (union over steps)";
  p.y.label = "fraction of heads";
  std::vector<float> v = r.topk_unique;
  std::sort(v.begin(), v.end());
  viz::Series all{"all " + std::to_string(r.topk_rows * r.topk_cols) + " query heads"};
  for (std::size_t i = 0; i < v.size(); ++i)
    all.x.push_back(static_cast<double>(v[i])),
        all.y.push_back(static_cast<double>(i + 1) / static_cast<double>(v.size()));
  p.series.push_back(std::move(all));
  if (v.empty()) p.x.range = p.y.range = viz::Range{0, 1};
  viz::Figure f;
  f.title = "Exact-TopK selections are stable across decode steps";
  f.caption = r.caption();
  f.panels.push_back(std::move(p));
  return f;
}

viz::Figure grid_figure(const sessions::SessionStore& s, const std::string& metric) {
  std::map<std::pair<double, double>, std::pair<double, int>> cells;
  std::set<double> rows, cols;
  std::set<std::string> units;
  for (const auto& row : s.list_runs()) {
    if (row.status != sessions::RunStatus::kComplete) continue;
    units.insert(std::string(budget_unit_name(row.budget.unit)));
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
  hm.rows = static_cast<std::int64_t>(rows.size());
  hm.cols = static_cast<std::int64_t>(cols.size());
  for (double rv : rows) {
    hm.row_labels.push_back(std::to_string(static_cast<std::int64_t>(rv)));
    for (double cv : cols) {
      auto it = cells.find({rv, cv});
      hm.values.push_back(it == cells.end() ? NAN : static_cast<float>(it->second.first / it->second.second));
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
  f.panels.push_back(std::move(hm));
  return f;
}

viz::Figure build_figure(const sessions::SessionStore& store, std::int64_t run, const FigureRequest& q) {
  const FigureEntry& e = cli_figure(q.name);
  FigureInput in;
  in.store = &store;
  in.sel = {q.layer, q.head, -1};
  in.variant = e.metric ? q.metric : "";
  in.width = q.width;
  in.strict = in.token_texts = true;
  if (e.scope == FigureScope::kDatabase) return e.build(in);
  TokenText text;
  if (q.token_text) text = [&q](std::int32_t id) { return std::optional<std::string>(q.token_text(id)); };
  const auto r = load_run_data(store, run, text);
  const bool per_layer = e.scope == FigureScope::kLayer || e.scope == FigureScope::kHead;
  if (per_layer) {  // not given: the first layer / head
    in.sel.layer = std::max<std::int64_t>(q.layer, 0);
    in.sel.head = std::max<std::int64_t>(q.head, 0);
  }
  if (per_layer && (in.sel.layer >= r->n_layer))
    throw std::out_of_range("run " + std::to_string(run) + " has no layer " + std::to_string(q.layer));
  if (e.scope == FigureScope::kHead && in.sel.head >= r->n_head_kv)
    throw std::out_of_range("run " + std::to_string(run) + " has no KV head " + std::to_string(q.head));
  need(store, *r, e.needs, std::max<std::int64_t>(in.sel.layer, 0));
  want(store, *r, e.uses, std::max<std::int64_t>(in.sel.layer, 0));
  in.run = r.get();
  return e.build(in);
}

}  // namespace kvscope::figures
