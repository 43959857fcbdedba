#include "eval_figures.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

#include "figures.h"

namespace kvscope::figures {
namespace {

constexpr std::string_view kKeyPrefix = "eval1|";
constexpr viz::Color kFullColor = viz::Color::hex(0x333333);

// Field `from_end` of a sweep key's '|'-separated fields, counted from its end (0: the budget);
// the data source in the middle may itself hold '|'.
std::string key_field_from_end(const std::string& key, std::size_t from_end) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t bar; (bar = key.find('|', start)) != std::string::npos; start = bar + 1)
    fields.push_back(key.substr(start, bar - start));
  fields.push_back(key.substr(start));
  return from_end < fields.size() ? fields[fields.size() - 1 - from_end] : "";
}

bool is_full(const std::string& spec) { return spec.empty() || spec == "full"; }

// The key less its fields `drop` (counted from its end as key_field_from_end counts them).
std::string key_without(const std::string& key, std::initializer_list<std::size_t> drop) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t bar; (bar = key.find('|', start)) != std::string::npos; start = bar + 1)
    fields.push_back(key.substr(start, bar - start));
  fields.push_back(key.substr(start));
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (std::find(drop.begin(), drop.end(), fields.size() - 1 - i) != drop.end()) continue;
    out += (out.empty() ? "" : "|") + fields[i];
  }
  return out;
}

std::string format_value(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// What the x axis of a budget unit means.
std::string unit_axis_label(BudgetUnit u) {
  switch (u) {
    case BudgetUnit::kCompressionRatio:
      return "fraction of context evicted (compression ratio)";
    case BudgetUnit::kStored:
      return "entries kept per KV head (stored)";
    case BudgetUnit::kFetched:
      return "entries read per decode step per GQA group (fetched)";
    case BudgetUnit::kFraction:
      return "fraction of context kept";
  }
  return "budget";
}

// "question-aware" -> "aware"; the model path -> its last component.
std::string short_mode(const std::string& m) { return m.rfind("question-", 0) == 0 ? m.substr(9) : m; }
std::string short_model(const std::string& m) {
  std::string s = m;
  while (!s.empty() && s.back() == '/') s.pop_back();
  const std::size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

void require_points(const std::vector<EvalPoint>& points, const std::string& db) {
  if (points.empty()) throw std::invalid_argument(no_eval_runs_message(db));
}

// "4 samples, 2 tasks; pycode-recall-17m, question-agnostic; DB".
std::string eval_caption(const std::vector<EvalPoint>& points, const std::string& db) {
  std::set<std::string> samples, tasks, models, modes;
  for (const EvalPoint& p : points) {
    samples.insert(p.sample + "|" + p.model + "|" + p.mode);
    tasks.insert(p.task);
    models.insert(short_model(p.model));
    modes.insert(p.mode.empty() ? "?" : p.mode);
  }
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  return std::to_string(samples.size()) + " samples, " + std::to_string(tasks.size()) +
         (tasks.size() == 1 ? " task" : " tasks") + " (" + join(tasks) + "); " + join(models) + ", " + join(modes) +
         "; " + db;
}

// Colour i of a pipeline, lighter for the `shade`-th of `n` budgets (0: full colour).
viz::Color tint(int color, int shade, int n) {
  const viz::Rgb c = viz::categorical(static_cast<std::size_t>(std::max(color, 0)));
  if (n <= 1 || shade <= 0) return c;
  const double t = 0.55 * shade / (n - 1);
  auto mix = [&](std::uint8_t v) { return static_cast<std::uint8_t>(v + (255 - v) * t + 0.5); };
  return viz::Color{mix(c.r), mix(c.g), mix(c.b)};
}

}  // namespace

std::string no_eval_runs_message(const std::string& db) {
  return "no evaluation runs in " + db + " (record them with kvscope-cli eval --db)";
}

int eval_depth_bin(double depth) {
  if (std::isnan(depth)) return -1;
  return std::clamp(static_cast<int>(std::floor(depth / 10.0)), 0, 9);
}

std::vector<EvalPoint> eval_points(const sessions::SessionStore& store, bool details) {
  std::vector<EvalPoint> out;
  for (const sessions::RunRow& row : store.list_runs()) {
    if (row.status != sessions::RunStatus::kComplete || !row.sweep_key || !row.sweep_key->starts_with(kKeyPrefix))
      continue;
    const auto score = row.summary.find("eval_score");
    if (score == row.summary.end()) continue;
    const std::string& key = *row.sweep_key;
    EvalPoint p;
    p.run = row.id;
    const std::string key_pipeline = key_field_from_end(key, 1), key_budget = key_field_from_end(key, 0);
    p.pipeline = is_full(row.pipeline_spec) || key_pipeline == "full" ? "" : row.pipeline_spec;
    p.has_budget = !p.pipeline.empty() && key_budget != "none";
    if (p.has_budget) p.budget = row.budget;
    p.model = row.model_path;
    p.mode = key_field_from_end(key, 4);
    p.sample = key_field_from_end(key, 2);
    p.sample_key = key_without(key, {0, 1, 4});  // budget, pipeline, mode
    p.score = score->second;
    if (const auto n = row.summary.find("n_prompt"); n != row.summary.end())
      p.n_prompt = static_cast<std::int64_t>(n->second);
    std::int64_t question_start = 0;
    if (const auto blob = store.load_blob(row.id, "eval_sample", -1, -1)) {
      const auto bytes = blob->values<std::uint8_t>();
      const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
      if (j.is_object()) {
        auto str = [&](const char* k, std::string& v) {
          if (j.contains(k) && j[k].is_string()) v = j[k].get<std::string>();
        };
        str("id", p.sample);
        str("task", p.task);
        str("mode", p.mode);
        if (j.contains("length") && j["length"].is_number_integer()) p.length = j["length"].get<std::int64_t>();
        if (j.contains("question_start") && j["question_start"].is_number_integer())
          question_start = j["question_start"].get<std::int64_t>();
        if (details && j.contains("answers") && j["answers"].is_array())
          for (const auto& a : j["answers"])
            if (a.is_string()) p.answers.push_back(a.get<std::string>());
      }
    }
    if (const auto blob = store.load_blob(row.id, "needle_tokens", -1, -1);
        blob && blob->dtype == sessions::DType::kI64 && question_start > 0) {
      const auto v = blob->values<std::int64_t>();
      std::int64_t first = -1;
      for (std::size_t i = 0; i + 1 < v.size(); i += 2)
        if (v[i + 1] > v[i] && (first < 0 || v[i] < first)) first = v[i];
      if (first >= 0) p.depth = 100.0 * static_cast<double>(first) / static_cast<double>(question_start);
    }
    if (const auto blob = store.load_blob(row.id, "needle_kept", -1, -1);
        blob && blob->dtype == sessions::DType::kF32) {
      const auto v = blob->values<float>();
      if (!v.empty()) p.needle_kept = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
      if (details && blob->shape.size() == 2 &&
          blob->shape[0] * blob->shape[1] == static_cast<std::int64_t>(v.size())) {
        p.kept_layers = blob->shape[0];
        p.kept_heads = blob->shape[1];
        p.needle_kept_map = v;
      }
    }
    if (const auto blob = details && p.pipeline.empty() ? store.load_blob(row.id, "needle_attention", -1, -1)
                                                        : std::optional<sessions::Blob>();
        blob && blob->dtype == sessions::DType::kF32 && blob->shape.size() == 2) {
      auto v = blob->values<float>();
      if (!v.empty() && blob->shape[0] * blob->shape[1] == static_cast<std::int64_t>(v.size())) {
        p.attention_layers = blob->shape[0];
        p.attention_heads = blob->shape[1];
        p.needle_attention_map = std::move(v);
      }
    }
    if (details) p.output = store.load_run(row.id).outputs.text;
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// A canonical SPEC's stages as (policy, [key=value ...]), the default budget stage "uniform"
// (no parameters) dropped.
using Stages = std::vector<std::pair<std::string, std::vector<std::string>>>;
Stages split_spec(const std::string& spec) {
  Stages out;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t plus = spec.find('+', start);
    if (plus == std::string::npos) plus = spec.size();
    const std::string stage = spec.substr(start, plus - start);
    const std::size_t colon = stage.find(':');
    std::vector<std::string> params;
    if (colon != std::string::npos) {
      std::size_t p = colon + 1;
      while (p <= stage.size()) {
        std::size_t comma = stage.find(',', p);
        if (comma == std::string::npos) comma = stage.size();
        if (comma > p) params.push_back(stage.substr(p, comma - p));
        p = comma + 1;
      }
    }
    std::string name = stage.substr(0, colon);
    if (!(name == "uniform" && params.empty())) out.emplace_back(std::move(name), std::move(params));
    start = plus + 1;
  }
  return out;
}

std::string stage_names(const Stages& st) {
  std::string out;
  for (const auto& [name, params] : st) out += (out.empty() ? "" : "+") + name;
  return out;
}

}  // namespace

std::string eval_pipeline_label(const std::vector<EvalPoint>& points, const std::string& spec) {
  if (is_full(spec)) return "full cache";
  // The policy names alone, plus the parameters that tell apart pipelines of the same policies.
  const Stages mine = split_spec(spec);
  const std::string names = stage_names(mine);
  std::vector<Stages> same;  // other pipelines of the same policies
  std::set<std::string> seen{spec};
  for (const EvalPoint& p : points)
    if (!p.pipeline.empty() && seen.insert(p.pipeline).second) {
      Stages st = split_spec(p.pipeline);
      if (stage_names(st) == names) same.push_back(std::move(st));
    }
  std::string differs;
  for (std::size_t i = 0; i < mine.size(); ++i)
    for (const std::string& kv : mine[i].second) {
      const bool shared = std::all_of(same.begin(), same.end(), [&](const Stages& o) {
        return o.size() == mine.size() && std::find(o[i].second.begin(), o[i].second.end(), kv) != o[i].second.end();
      });
      if (!shared) differs += (differs.empty() ? " " : ",") + kv;
    }
  return (names.empty() ? spec : names) + differs;
}

EvalSummary eval_summary(const std::vector<EvalPoint>& points) {
  EvalSummary s;
  std::set<std::string> tasks, models, modes;
  std::vector<std::string> specs;  // first appearance
  for (const EvalPoint& p : points) {
    tasks.insert(p.task);
    models.insert(p.model);
    modes.insert(p.mode);
    if (!p.pipeline.empty() && std::find(specs.begin(), specs.end(), p.pipeline) == specs.end())
      specs.push_back(p.pipeline);
  }
  s.tasks.assign(tasks.begin(), tasks.end());
  auto spec_index = [&](const std::string& spec) {
    return spec.empty() ? -1 : static_cast<int>(std::find(specs.begin(), specs.end(), spec) - specs.begin());
  };
  // Order: full cache first, then pipelines by first appearance; model, mode; unit, budget.
  using Key = std::tuple<int, std::string, std::string, bool, int, double>;
  std::map<Key, EvalCondition> by_key;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const EvalPoint& p = points[i];
    const Key k{spec_index(p.pipeline),
                p.model,
                p.mode,
                p.has_budget,
                static_cast<int>(p.budget.unit),
                p.has_budget ? p.budget.value : 0.0};
    EvalCondition& c = by_key[k];
    if (c.points.empty()) {
      c.pipeline = p.pipeline;
      c.has_budget = p.has_budget;
      c.budget = p.budget;
      c.model = p.model;
      c.mode = p.mode;
      c.color = spec_index(p.pipeline);
    }
    c.points.push_back(i);
  }
  std::map<std::string, std::string> labels;
  for (const auto& spec : specs) labels[spec] = eval_pipeline_label(points, spec);
  for (auto& [k, c] : by_key) {
    std::string series = c.pipeline.empty() ? "full cache" : labels[c.pipeline];
    std::string extra;
    if (models.size() > 1) extra += short_model(c.model);
    if (modes.size() > 1) extra += (extra.empty() ? "" : ", ") + short_mode(c.mode);
    if (!extra.empty()) series += " [" + extra + "]";
    c.pipeline_label = series;
    c.label = series;
    if (c.has_budget) c.label += " @ " + format_budget(c.budget.unit, c.budget.value);
    double sum = 0;
    std::vector<double> tsum(s.tasks.size(), 0.0);
    c.task_n.assign(s.tasks.size(), 0);
    for (std::size_t i : c.points) {
      const EvalPoint& p = points[i];
      sum += p.score;
      const auto t =
          static_cast<std::size_t>(std::lower_bound(s.tasks.begin(), s.tasks.end(), p.task) - s.tasks.begin());
      tsum[t] += p.score;
      ++c.task_n[t];
    }
    c.mean = sum / static_cast<double>(c.points.size());
    for (std::size_t t = 0; t < s.tasks.size(); ++t)
      c.task_mean.push_back(c.task_n[t] ? tsum[t] / static_cast<double>(c.task_n[t]) : NAN);
    s.conditions.push_back(std::move(c));
  }
  return s;
}

viz::Figure accuracy_figure(const std::vector<EvalPoint>& points, const std::string& db) {
  require_points(points, db);
  const EvalSummary s = eval_summary(points);
  std::set<int> units;
  for (const EvalCondition& c : s.conditions)
    if (c.has_budget) units.insert(static_cast<int>(c.budget.unit));
  viz::Figure f;
  f.title = "Task accuracy vs budget";
  f.caption = "mean score over all samples; " + eval_caption(points, db);
  auto add_refs = [&](viz::LinePlot& p) {
    for (const EvalCondition& c : s.conditions) {
      if (c.has_budget) continue;
      viz::RefLine r;
      r.value = c.mean;
      r.name = c.pipeline_label + " (" + format_value(std::round(c.mean * 1000) / 1000) + ")";
      r.color = c.pipeline.empty() ? kFullColor : viz::Color(viz::categorical(static_cast<std::size_t>(c.color)));
      r.line = c.pipeline.empty() ? viz::LineStyle::Dashed : viz::LineStyle::Dotted;
      r.width = 1.6;
      p.rules.push_back(std::move(r));
    }
  };
  auto y_axis = [](viz::Axis& y) {
    y.label = "mean score";
    y.range = viz::Range{-0.03, 1.03};
    y.ticks = {0, 0.2, 0.4, 0.6, 0.8, 1.0};
  };
  if (units.empty()) {  // only the full cache (or pipelines without a budget)
    viz::LinePlot p;
    p.title = "no run with a budget: the full cache alone";
    p.x.range = viz::Range{0, 1};
    p.x.label = "budget";
    y_axis(p.y);
    add_refs(p);
    p.legend = viz::LegendPos::BottomRight;
    f.panels.push_back(std::move(p));
    return f;
  }
  static constexpr viz::Marker kMarkers[] = {viz::Marker::Circle, viz::Marker::Square, viz::Marker::Triangle,
                                             viz::Marker::Diamond, viz::Marker::Cross};
  for (int u : units) {
    const auto unit = static_cast<BudgetUnit>(u);
    viz::LinePlot p;
    p.title = units.size() > 1 ? std::string(budget_unit_name(unit)) : "";
    p.x.label = unit_axis_label(unit);
    y_axis(p.y);
    // One series per pipeline (and model / mode): its conditions in this unit, by budget.
    std::map<std::string, std::size_t> series_of;
    double lo = INFINITY, hi = -INFINITY;
    for (const EvalCondition& c : s.conditions) {
      if (!c.has_budget || c.budget.unit != unit) continue;
      auto [it, added] = series_of.emplace(c.pipeline_label, p.series.size());
      if (added) {
        viz::Series se;
        se.name = c.pipeline_label;
        se.color = viz::categorical(static_cast<std::size_t>(c.color));
        se.marker = kMarkers[static_cast<std::size_t>(c.color) % std::size(kMarkers)];
        se.marker_size = 4.5;
        se.width = 2.0;
        p.series.push_back(std::move(se));
      }
      viz::Series& se = p.series[it->second];
      se.x.push_back(c.budget.value);
      se.y.push_back(c.mean);
      lo = std::min(lo, c.budget.value);
      hi = std::max(hi, c.budget.value);
    }
    const double pad = hi > lo ? 0.06 * (hi - lo) : (lo != 0 ? 0.1 * std::abs(lo) : 0.1);
    p.x.range = viz::Range{lo - pad, hi + pad};
    std::set<double> xs;
    for (const auto& se : p.series) xs.insert(se.x.begin(), se.x.end());
    if (xs.size() <= 8) p.x.ticks.assign(xs.begin(), xs.end());
    add_refs(p);
    p.legend = viz::LegendPos::Auto;
    f.panels.push_back(std::move(p));
  }
  return f;
}

viz::Figure eval_tasks_figure(const std::vector<EvalPoint>& points, const std::string& db) {
  require_points(points, db);
  const EvalSummary s = eval_summary(points);
  viz::BarChart b;
  for (const auto& t : s.tasks) b.categories.push_back(t.empty() ? "(no task)" : t);
  const bool all = s.tasks.size() > 1;  // then also the mean over every sample
  if (all) b.categories.push_back("all tasks");
  b.x.label = "task";
  b.y.label = "mean score";
  b.y.range = viz::Range{0, 1.0};
  // Budgets of one pipeline in shades of its colour, the strongest compression lightest.
  std::map<std::string, std::vector<std::size_t>> by_series;
  for (std::size_t i = 0; i < s.conditions.size(); ++i) by_series[s.conditions[i].pipeline_label].push_back(i);
  for (std::size_t i = 0; i < s.conditions.size(); ++i) {
    const EvalCondition& c = s.conditions[i];
    viz::BarSeries se;
    se.name = c.label;
    se.values = c.task_mean;
    if (all) se.values.push_back(c.mean);
    if (c.pipeline.empty()) {
      se.color = kFullColor;
    } else {
      const auto& group = by_series[c.pipeline_label];
      const int shade = static_cast<int>(std::find(group.begin(), group.end(), i) - group.begin());
      // compression_ratio: a larger value keeps less; other units: a larger value keeps more.
      const int n = static_cast<int>(group.size());
      const bool evicts = c.budget.unit == BudgetUnit::kCompressionRatio;
      se.color = tint(c.color, evicts ? shade : n - 1 - shade, n);
    }
    b.series.push_back(std::move(se));
  }
  b.legend = viz::LegendPos::Outside;
  viz::Figure f;
  f.title = "Task accuracy per task";
  f.caption = "mean score per task; " + eval_caption(points, db);
  f.panels.push_back(std::move(b));
  return f;
}

viz::Figure eval_depth_figure(const std::vector<EvalPoint>& points, const std::string& db) {
  require_points(points, db);
  const EvalSummary s = eval_summary(points);
  std::set<std::int64_t> lengths;
  for (const EvalPoint& p : points)
    if (!std::isnan(p.depth)) lengths.insert(p.length);
  viz::Figure f;
  f.title = "Needle depth x context length";
  f.caption = "mean score per 10% depth bin (first needle token / question start) and sample length; " +
              eval_caption(points, db);
  if (lengths.empty()) {
    f.panels.push_back(note_panel("no evaluation sample has a needle (needle_tokens): no depth to draw"));
    return f;
  }
  const std::vector<std::int64_t> cols(lengths.begin(), lengths.end());
  for (const EvalCondition& c : s.conditions) {
    std::vector<double> sum(10 * cols.size(), 0.0);
    std::vector<int> n(sum.size(), 0);
    int total = 0;
    for (std::size_t i : c.points) {
      const EvalPoint& p = points[i];
      const int bin = eval_depth_bin(p.depth);
      if (bin < 0) continue;
      const auto col = static_cast<std::size_t>(std::lower_bound(cols.begin(), cols.end(), p.length) - cols.begin());
      const std::size_t cell = static_cast<std::size_t>(bin) * cols.size() + col;
      sum[cell] += p.score;
      ++n[cell];
      ++total;
    }
    if (total == 0) continue;
    viz::Heatmap h;
    h.title = c.label + " (n=" + std::to_string(total) + ")";
    h.rows = 10;
    h.cols = static_cast<std::int64_t>(cols.size());
    for (std::size_t k = 0; k < sum.size(); ++k) h.values.push_back(n[k] ? static_cast<float>(sum[k] / n[k]) : NAN);
    for (int r = 0; r < 10; ++r)
      h.row_labels.push_back(std::to_string(r * 10) + "-" + std::to_string(r * 10 + 10) + "%");
    for (std::int64_t l : cols) h.col_labels.push_back(l > 0 ? std::to_string(l) : "?");
    h.x.label = "length (tokens)";
    h.y.label = "needle depth";
    h.colormap = "viridis";
    h.value_range = viz::Range{0, 1};
    h.colorbar_label = "mean score";
    h.aggregate = viz::Aggregate::Mean;
    f.panels.push_back(std::move(h));
  }
  return f;
}

std::string no_full_cache_note() {
  return "Add the full cache (an eval run without --pipeline) to this evaluation to see its attention to the "
         "needle beside this map.";
}

const EvalPoint* full_cache_point(const std::vector<EvalPoint>& points, const EvalPoint& p) {
  if (p.pipeline.empty()) return &p;
  const EvalPoint* other_mode = nullptr;
  for (const EvalPoint& q : points)
    if (q.pipeline.empty() && q.sample_key == p.sample_key) {
      if (q.mode == p.mode) return &q;
      if (!other_mode) other_mode = &q;
    }
  return other_mode;
}

viz::Figure needle_kept_figure(const EvalPoint& p, const std::string& condition, const EvalPoint* full) {
  viz::Figure f;
  f.title = full ? "Needle kept and the full cache's attention to it, per layer x KV head"
                 : "Needle kept per layer x KV head";
  f.caption = "run #" + std::to_string(p.run) + ": " + p.sample + " under " + condition + "; score " +
              format_value(std::round(p.score * 1000) / 1000);
  auto layer_map = [](const std::string& title, std::int64_t rows, std::int64_t cols, const std::vector<float>& v,
                      const std::string& bar) {
    viz::Heatmap h;
    h.title = title;
    h.rows = rows;
    h.cols = cols;
    h.values = v;
    h.x.label = "KV head";
    h.y.label = "layer";
    h.colormap = "keptshare";
    h.value_range = viz::Range{0, 1};  // both maps on one scale
    h.colorbar_label = bar;
    h.aggregate = viz::Aggregate::Mean;
    return h;
  };
  if (p.needle_kept_map.empty() || p.kept_layers <= 0 || p.kept_heads <= 0) {
    f.panels.push_back(note_panel(std::isnan(p.depth) ? "sample " + p.sample + " has no needle"
                                                      : "run #" + std::to_string(p.run) + " recorded no needle_kept"));
  } else {
    f.caption += "; needle kept: mean " + format_value(std::round(p.needle_kept * 1000) / 1000);
    f.panels.push_back(layer_map("needle kept (this run)", p.kept_layers, p.kept_heads, p.needle_kept_map,
                                 "share of needle tokens kept"));
  }
  if (!full) return f;
  f.columns = 2;
  if (full->needle_attention_map.empty() || full->attention_layers <= 0 || full->attention_heads <= 0) {
    f.panels.push_back(note_panel("full-cache run #" + std::to_string(full->run) + " recorded no needle_attention"));
    return f;
  }
  const double mean = std::accumulate(full->needle_attention_map.begin(), full->needle_attention_map.end(), 0.0) /
                      static_cast<double>(full->needle_attention_map.size());
  f.caption += "; full cache (run #" + std::to_string(full->run) + "): mean attention to the needle " +
               format_value(std::round(mean * 1000) / 1000) + " (mean over the question + answer steps)";
  f.panels.push_back(layer_map("full cache: attention to needle (question + answer)", full->attention_layers,
                               full->attention_heads, full->needle_attention_map, "attention mass on needle tokens"));
  return f;
}

}  // namespace kvscope::figures
