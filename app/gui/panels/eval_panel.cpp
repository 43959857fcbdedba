// Eval: task accuracy of the database's `kvscope-cli eval` runs (docs/eval.md). Mean scores per
// condition (pipeline @ budget, the full cache) and task; the accuracy figure; the samples of the
// selected condition, wrong answers first, a click opening the sample's run; its needle_kept map
// beside the same sample's full-cache needle_attention map (or a note to add the full cache).
#include "eval_panel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <variant>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui {
namespace {

using figures::EvalCondition;
using figures::EvalPoint;
using figures::EvalSummary;

constexpr const char* kFigureNames[] = {"accuracy vs budget", "per task", "needle depth x length"};

// The database the view shows: the one picked in its combo, else run A's, else the first open one.
std::string shown_db(AppState& s) {
  EvalState& st = s.eval;
  if (!st.picked.empty() && db_index(s, st.picked) >= 0) return st.picked;
  st.picked.clear();
  if (s.a && db_index(s, s.a->ref.db) >= 0) return s.a->ref.db;
  return s.dbs.empty() ? std::string() : s.dbs.front().path;
}

// What the points were read from: the database and its run list (a finished run changes it).
std::string read_key(const OpenDb& d) {
  std::int64_t complete = 0, last = -1;
  for (const auto& r : d.rows) {
    complete += r.status == sessions::RunStatus::kComplete;
    last = std::max(last, r.id);
  }
  return d.path + "#" + std::to_string(d.rows.size()) + "#" + std::to_string(complete) + "#" + std::to_string(last);
}

// Starts reading the points of `d` when its key changed; takes them when read. False while there
// is nothing to show yet.
bool update_points(AppState& s, const OpenDb& d) {
  EvalState& st = s.eval;
  const std::string key = read_key(d);
  if (!st.reading.valid() && key != st.read_key) {
    st.read_key = st.reading_key = key;
    st.reading = std::async(std::launch::async, [path = d.path] {
      const auto store = sessions::SessionStore::open(path, sessions::OpenMode::kReadOnly);
      return figures::eval_points(store, true);
    });
  }
  if (st.reading.valid()) {
    if (s.headless) st.reading.wait();  // screenshots and tests: deterministic
    if (st.reading.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        auto points = st.reading.get();
        if (st.reading_key == st.read_key) st.points = std::move(points), st.error.clear();
      } catch (const std::exception& e) {
        if (st.reading_key == st.read_key) st.points.clear(), st.error = e.what();
      }
      st.summary = figures::eval_summary(st.points);
      st.table_h = st.samples_h = 0;
      st.fig.invalidate();
      st.needle.invalidate();
    }
  }
  if (st.reading.valid() && st.points.empty() && st.error.empty()) {
    ImGui::TextDisabled("reading the evaluation runs of %s ...", d.path.c_str());
    return false;
  }
  return true;
}

// A light background from red (0) through yellow to green (1) for a mean score.
ImU32 score_color(double v) {
  if (std::isnan(v)) return IM_COL32(0, 0, 0, 0);
  const double t = std::clamp(v, 0.0, 1.0);
  const ImVec4 lo{0.96f, 0.73f, 0.71f, 1}, mid{0.99f, 0.91f, 0.67f, 1}, hi{0.68f, 0.87f, 0.74f, 1};
  const ImVec4& a = t < 0.5 ? lo : mid;
  const ImVec4& b = t < 0.5 ? mid : hi;
  const float u = static_cast<float>(t < 0.5 ? t * 2 : (t - 0.5) * 2);
  return ImGui::GetColorU32(ImVec4{a.x + (b.x - a.x) * u, a.y + (b.y - a.y) * u, a.z + (b.z - a.z) * u, 1});
}

void score_cell(double v, std::int64_t n) {
  if (std::isnan(v) || n == 0) {
    ImGui::TextDisabled("-");
    return;
  }
  ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, score_color(v));
  ImGui::Text("%.3f", v);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("mean score %.4f over %lld samples", v, static_cast<long long>(n));
}

double mean_needle_kept(const std::vector<EvalPoint>& points, const EvalCondition& c) {
  double sum = 0;
  int n = 0;
  for (std::size_t i : c.points)
    if (!std::isnan(points[i].needle_kept)) sum += points[i].needle_kept, ++n;
  return n ? sum / n : NAN;
}

// One line of text: surrounding white space dropped, newlines shown as a return arrow.
std::string one_line(const std::string& text) {
  const std::size_t b = text.find_first_not_of(" \t\r\n"), e = text.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  std::string out;
  for (char c : text.substr(b, e - b + 1)) {
    if (c == '\n')
      out += "\xe2\x8f\x8e";
    else
      out += c;
  }
  return out;
}

// The conditions x tasks table; returns the index of the selected condition.
int condition_table(EvalState& st, float height) {
  const EvalSummary& sum = st.summary;
  int selected = 0;
  for (std::size_t i = 0; i < sum.conditions.size(); ++i)
    if (sum.conditions[i].label == st.condition) selected = static_cast<int>(i);
  const int n_tasks = std::min<int>(static_cast<int>(sum.tasks.size()), 56);
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_ScrollX | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Resizable;
  const float top = ImGui::GetCursorScreenPos().y;
  if (ImGui::BeginTable("eval_conditions", 4 + n_tasks, flags, {0, height})) {
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("pipeline @ budget");
    ImGui::TableSetupColumn("samples");
    ImGui::TableSetupColumn("all tasks");
    for (int t = 0; t < n_tasks; ++t) {
      const std::string& name = sum.tasks[static_cast<std::size_t>(t)];
      ImGui::TableSetupColumn(name.empty() ? "(no task)" : name.c_str());
    }
    ImGui::TableSetupColumn("needle kept");
    ImGui::TableHeadersRow();
    for (std::size_t i = 0; i < sum.conditions.size(); ++i) {
      const EvalCondition& c = sum.conditions[i];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::Selectable(c.label.c_str(), static_cast<int>(i) == selected,
                            ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap)) {
        if (st.condition != c.label) st.sample_run = -1;
        st.condition = c.label;
        selected = static_cast<int>(i);
      }
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s\nbudget: %s\nmodel: %s\n%s\nclick to list its samples",
                          c.pipeline.empty() ? "full cache (no compression)" : c.pipeline.c_str(),
                          c.has_budget ? format_budget(c.budget.unit, c.budget.value).c_str() : "none", c.model.c_str(),
                          c.mode.c_str());
      ImGui::PopID();
      ImGui::TableNextColumn();
      ImGui::Text("%zu", c.points.size());
      ImGui::TableNextColumn();
      score_cell(c.mean, static_cast<std::int64_t>(c.points.size()));
      for (int t = 0; t < n_tasks; ++t) {
        ImGui::TableNextColumn();
        score_cell(c.task_mean[static_cast<std::size_t>(t)], c.task_n[static_cast<std::size_t>(t)]);
      }
      ImGui::TableNextColumn();
      const double kept = mean_needle_kept(st.points, c);
      if (std::isnan(kept))
        ImGui::TextDisabled("-");
      else
        ImGui::Text("%.1f%%", 100 * kept);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "share of needle tokens in the cache after prefill and compression, mean over samples "
            "and layers x KV heads");
      // The rows' height as drawn (unscrolled), for the next frame's table height.
      if (i + 1 == sum.conditions.size() && ImGui::GetScrollY() == 0)
        st.table_h = ImGui::GetItemRectMax().y + ImGui::GetStyle().CellPadding.y - top + 1;
    }
    ImGui::EndTable();
  }
  return selected;
}

// The samples of condition `c`, wrong answers first; returns the run clicked (-1: none).
std::int64_t sample_table(const AppState& s, EvalState& st, const EvalCondition& c, std::int64_t shown, float height) {
  std::vector<std::size_t> order = c.points;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const EvalPoint &a = st.points[x], &b = st.points[y];
    if (a.score != b.score) return a.score < b.score;
    return a.sample < b.sample;
  });
  std::int64_t clicked = -1;
  // No horizontal scrolling: the output column takes the width left, its text cut to fit (the
  // tooltip has all of it).
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Resizable;
  // A task column unless every sample id names its task already (RULER's "<task>-<length>-<i>").
  const bool task_column = std::any_of(
      order.begin(), order.end(), [&](std::size_t i) { return !st.points[i].sample.starts_with(st.points[i].task); });
  const float top = ImGui::GetCursorScreenPos().y;
  if (ImGui::BeginTable("eval_samples", task_column ? 7 : 6, flags, {0, height})) {
    ImGui::TableSetupScrollFreeze(1, 1);
    // Text columns share the width left by the numbers (clipped; the row's tooltip has them whole).
    ImGui::TableSetupColumn("sample", ImGuiTableColumnFlags_WidthStretch, 1.6f);
    if (task_column) ImGui::TableSetupColumn("task", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableSetupColumn("length");
    ImGui::TableSetupColumn("score");
    ImGui::TableSetupColumn("needle kept");
    ImGui::TableSetupColumn("depth");
    ImGui::TableSetupColumn("output", ImGuiTableColumnFlags_WidthStretch, 1.2f);
    ImGui::TableHeadersRow();
    for (std::size_t i : order) {
      const EvalPoint& p = st.points[i];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(static_cast<int>(p.run));
      const bool is_a = s.a && s.a->ref.run == p.run && s.a->ref.db == st.db;
      if (ImGui::Selectable(p.sample.c_str(), p.run == shown || is_a,
                            ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap))
        clicked = p.run;
      if (ImGui::IsItemHovered()) {
        std::string refs;
        for (const auto& a : p.answers) refs += (refs.empty() ? "" : " | ") + a;
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 36);
        ImGui::Text("%s (%s), run #%lld: click to open it as run A", p.sample.c_str(), p.task.c_str(),
                    static_cast<long long>(p.run));
        ImGui::Text("answer: %s", refs.c_str());
        ImGui::Text("output: %s", p.output.c_str());
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
      }
      ImGui::PopID();
      if (task_column) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(p.task.c_str());
      }
      ImGui::TableNextColumn();
      ImGui::Text("%lld", static_cast<long long>(p.length));
      ImGui::TableNextColumn();
      ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, score_color(p.score));
      ImGui::Text("%.2f", p.score);
      ImGui::TableNextColumn();
      if (std::isnan(p.needle_kept))
        ImGui::TextDisabled("-");
      else
        ImGui::Text("%.1f%%", 100 * p.needle_kept);
      ImGui::TableNextColumn();
      if (std::isnan(p.depth))
        ImGui::TextDisabled("-");
      else
        ImGui::Text("%.0f%%", p.depth);
      ImGui::TableNextColumn();
      const float char_w = std::max(1.0f, ImGui::CalcTextSize("0").x);
      const auto fit = static_cast<std::size_t>(std::max(4.0f, ImGui::GetContentRegionAvail().x / char_w - 1));
      ImGui::TextUnformatted(ellipsize(one_line(p.output), fit).c_str());
      if (i == order.back() && ImGui::GetScrollY() == 0)
        st.samples_h = ImGui::GetItemRectMax().y + ImGui::GetStyle().CellPadding.y - top + 1;
    }
    ImGui::EndTable();
  }
  return clicked;
}

}  // namespace

namespace panels {

void eval(AppState& s, Ui& ui) {
  EvalState& st = s.eval;
  const std::string db = shown_db(s);
  if (db.empty()) {
    ImGui::Spacing();
    ImGui::TextDisabled("No database open. Open one in the Sessions view (kvscope --open DB).");
    return;
  }
  const int di = db_index(s, db);
  const OpenDb& d = s.dbs[static_cast<std::size_t>(di)];
  if (db != st.db) {  // another database: its own points, selection and figures
    st.db = db;
    st.read_key.clear();
    st.points.clear();
    st.summary = {};
    st.condition.clear();
    st.sample_run = -1;
    st.table_h = 0;
  }
  // Which database, when several are open.
  if (s.dbs.size() > 1) {
    ImGui::SetNextItemWidth(320);
    if (ImGui::BeginCombo("database", db.c_str())) {
      for (const auto& o : s.dbs)
        if (ImGui::Selectable(o.path.c_str(), o.path == db)) st.picked = o.path;  // shown from the next frame
      ImGui::EndCombo();
    }
    ImGui::SameLine();
  }
  if (!update_points(s, d)) return;
  if (!st.error.empty()) {
    ImGui::TextColored({0.7f, 0.1f, 0.1f, 1}, "%s", st.error.c_str());
    return;
  }
  if (st.points.empty()) {
    ImGui::Spacing();
    ImGui::TextUnformatted(("No evaluation runs in " + db + ".").c_str());
    ImGui::TextDisabled("Record them with kvscope-cli eval --db %s (docs/eval.md): each sample under each", db.c_str());
    ImGui::TextDisabled("pipeline and budget becomes a run, scored; this view then shows their accuracy.");
    ImGui::Spacing();
    // The figure says so too (what export writes), as every figure does when its data is absent.
    st.fig.draw(
        st.read_key + "|empty", figure_size(),
        [&] {
          viz::Figure f;
          f.title = "Task accuracy vs budget";
          f.panels.push_back(figures::note_panel(figures::no_eval_runs_message(db)));
          return f;
        },
        ui.fonts, ui.textures);
    return;
  }
  const EvalSummary& sum = st.summary;
  {
    std::size_t n_samples = 0;
    for (const auto& c : sum.conditions) n_samples = std::max(n_samples, c.points.size());
    ImGui::Text("%zu evaluation runs: up to %zu samples x %zu conditions, %zu %s", st.points.size(), n_samples,
                sum.conditions.size(), sum.tasks.size(), sum.tasks.size() == 1 ? "task" : "tasks");
    ImGui::SameLine();
    ImGui::TextDisabled("mean score per pipeline @ budget and task; click a row for its samples");
  }
  // Run A an evaluation run and nothing picked yet: start on its condition.
  const EvalPoint* a_point = nullptr;
  if (s.a && s.a->ref.db == db)
    for (const EvalPoint& p : st.points)
      if (p.run == s.a->ref.run) a_point = &p;
  if (st.condition.empty() && a_point)
    for (const auto& c : sum.conditions)
      if (std::find(c.points.begin(), c.points.end(), static_cast<std::size_t>(a_point - st.points.data())) !=
          c.points.end())
        st.condition = c.label;

  // The table as tall as its rows (at most a third of the view), plus a horizontal scroll bar when
  // its columns are wider than the view.
  const ImGuiStyle& style = ImGui::GetStyle();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float row_h = ImGui::GetTextLineHeight() + 2 * style.CellPadding.y;
  float table_w = ImGui::CalcTextSize("samples  all tasks  needle kept").x + 3 * 2 * style.CellPadding.x;
  float label_w = ImGui::CalcTextSize("pipeline @ budget").x;
  for (const auto& c : sum.conditions) label_w = std::max(label_w, ImGui::CalcTextSize(c.label.c_str()).x);
  table_w += label_w + 2 * style.CellPadding.x;
  for (const auto& t : sum.tasks)
    table_w += std::max(ImGui::CalcTextSize(t.c_str()).x, ImGui::CalcTextSize("0.000").x) + 2 * style.CellPadding.x;
  float table_h = st.table_h > 0 ? st.table_h : row_h * static_cast<float>(sum.conditions.size() + 1) + 4;
  if (table_w > avail.x) table_h += style.ScrollbarSize;
  const int selected = condition_table(st, std::clamp(table_h, row_h * 2 + 3, std::max(avail.y * 0.34f, row_h * 3)));
  const EvalCondition& cond = sum.conditions[static_cast<std::size_t>(selected)];

  // Left: the figure; right: the condition's samples and one sample's needle map.
  const float left_w = std::floor(ImGui::GetContentRegionAvail().x * 0.5f);
  ImGui::BeginChild("eval_figure", {left_w, 0}, false);
  ImGui::SetNextItemWidth(220);
  ImGui::Combo("figure", &st.figure, kFigureNames, static_cast<int>(std::size(kFigureNames)));
  ImGui::SameLine();
  help_marker(
      "The figures kvscope-cli export --figure accuracy | eval-tasks | eval-depth writes (any run id of the "
      "database). Accuracy: mean score vs budget per pipeline, the full cache dashed. Per task: one bar per "
      "pipeline @ budget. Depth: mean score per needle depth (10% bins of the context) x sample length.");
  const std::string fig_key = st.read_key + "|" + std::to_string(st.figure);
  st.fig.draw(
      fig_key, figure_size(),
      [&] {
        if (st.figure == 1) return figures::eval_tasks_figure(st.points, db);
        if (st.figure == 2) return figures::eval_depth_figure(st.points, db);
        return figures::accuracy_figure(st.points, db);
      },
      ui.fonts, ui.textures);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("eval_samples_side", {0, 0}, false);
  // The sample shown: the one clicked, else run A when it is one of this condition's samples.
  const EvalPoint* shown = nullptr;
  for (const EvalPoint& p : st.points)
    if (p.run == st.sample_run) shown = &p;
  if (!shown && a_point &&
      std::find(cond.points.begin(), cond.points.end(), static_cast<std::size_t>(a_point - st.points.data())) !=
          cond.points.end())
    shown = a_point;
  ImGui::Text("Samples of %s", cond.label.c_str());
  ImGui::SameLine();
  ImGui::TextDisabled("(wrong answers first; click to open the run)");
  // As tall as its rows (as last drawn), at least 3, at most half the column.
  const float sample_row_h = ImGui::GetTextLineHeight() + 2 * ImGui::GetStyle().CellPadding.y;
  if (cond.label != st.samples_of) st.samples_of = cond.label, st.samples_h = 0;
  const float rows_h = st.samples_h > 0 ? st.samples_h : sample_row_h * static_cast<float>(cond.points.size() + 1) + 4;
  const float list_h = std::floor(std::clamp(rows_h, sample_row_h * 4 + 4,
                                             std::max(ImGui::GetContentRegionAvail().y * 0.5f, sample_row_h * 4 + 4)));
  const std::int64_t clicked = sample_table(s, st, cond, shown ? shown->run : -1, list_h);
  st.needle_full_run = -1;
  st.needle_note.clear();
  if (shown) {
    std::string label = cond.label;
    for (const auto& c : sum.conditions)
      for (std::size_t i : c.points)
        if (&st.points[i] == shown) label = c.label;
    // Beside the run's needle kept: the same sample's full-cache attention to the needle.
    const EvalPoint* full = figures::full_cache_point(st.points, *shown);
    if (full)
      st.needle_full_run = full->run;
    else if (!shown->needle_kept_map.empty()) {
      st.needle_note = figures::no_full_cache_note();
      ImGui::TextDisabled("%s", st.needle_note.c_str());
    }
    const std::string key =
        st.read_key + "|needle|" + std::to_string(shown->run) + "|" + std::to_string(st.needle_full_run);
    st.needle.draw(
        key, figure_size(), [&] { return figures::needle_kept_figure(*shown, label, full); }, ui.fonts, ui.textures);
    if (ImGui::IsItemHovered())
      if (const auto hit = st.needle.hit(ImGui::GetIO().MousePos); hit && hit->row >= 0 && hit->col >= 0) {
        const bool attention = full && hit->panel == 1;  // panel 0: this run's needle kept
        const std::vector<float>& map = attention ? full->needle_attention_map : shown->needle_kept_map;
        const std::int64_t cols = attention ? full->attention_heads : shown->kept_heads;
        const std::size_t i = static_cast<std::size_t>(hit->row * cols + hit->col);
        if (i < map.size()) {
          if (attention)
            ImGui::SetTooltip(
                "layer %lld, KV head %lld: %.2f%% of the attention on the needle tokens\n(full cache, run #%lld: "
                "mean over the question + answer steps and the group's query heads)",
                static_cast<long long>(hit->row), static_cast<long long>(hit->col), 100.0 * map[i],
                static_cast<long long>(full->run));
          else
            ImGui::SetTooltip("layer %lld, KV head %lld: %.1f%% of the needle tokens kept",
                              static_cast<long long>(hit->row), static_cast<long long>(hit->col), 100.0 * map[i]);
        }
      }
  } else {
    ImGui::Spacing();
    ImGui::TextDisabled("Click a sample to open its run and see which heads kept its needle.");
  }
  ImGui::EndChild();
  if (clicked >= 0) {
    st.sample_run = clicked;
    open_run(s, di, clicked, false);
  }
}

}  // namespace panels
}  // namespace kvscope::gui
