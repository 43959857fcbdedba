// Timeline: what the pipeline kept, selected and evicted at every decode step, per token position
// (kvscope/core/timeline.h): the selected KV head as one map (step down, position across) with its
// live / selected entries and recall per step, or every layer x KV head as small maps. Hover names
// the token, position, step and its state; clicking a head in the grid opens it, clicking the
// one-head map selects the token and the step (the Selection view's step). A multi-turn run gets a
// turn selector (turns.cpp): a turn's positions become the window, its steps are marked on the map.
#include <algorithm>
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {
namespace {

/// The tooltip of a cell of the one-head map: steps [s0, s1] x positions [p0, p1]; the map's columns
/// cover the positions of window `w` (the zoomed position axes).
void head_tooltip(const RunData& a, const Timeline& t, std::int64_t layer, std::int64_t head, const viz::Heatmap& h,
                  std::int64_t row, std::int64_t col, const figures::PositionWindow& w) {
  const std::int64_t S = t.n_steps + 1, N = std::max<std::int64_t>(w.size(), 1);
  const std::int64_t s0 = (row * S + h.rows - 1) / h.rows, s1 = std::max(s0, ((row + 1) * S + h.rows - 1) / h.rows - 1);
  const std::int64_t p0 = w.lo + (col * N + h.cols - 1) / h.cols,
                     p1 = std::max(p0, w.lo + ((col + 1) * N + h.cols - 1) / h.cols - 1);
  ImGui::BeginTooltip();
  if (s0 == s1)
    ImGui::Text("step %lld%s", static_cast<long long>(s0), s0 == 0 ? " (prefill)" : "");
  else
    ImGui::Text("steps %lld .. %lld", static_cast<long long>(s0), static_cast<long long>(s1));
  if (p0 == p1 && p0 < t.n_positions) {
    const std::string* tok = a.position_text(p0);
    const std::string text = tok ? display_token(*tok) : "(a later turn's token)";
    ImGui::Text("position %lld: %s", static_cast<long long>(p0), text.c_str());
    const std::int32_t out = t.evicted_step(layer, head, p0);
    const auto cause = static_cast<EvictionCause>(
        t.evicted_by[static_cast<std::size_t>((layer * t.n_head_kv + head) * t.n_positions + p0)]);
    ImGui::Text("entered at step %d; %s", t.entered_at[static_cast<std::size_t>(p0)],
                out < 0
                    ? "never evicted"
                    : ("evicted at step " + std::to_string(out) + " (" + std::string(to_string(cause)) + ")").c_str());
    if (s0 == s1) {
      const auto live = t.live_positions(layer, head, s0);
      const auto it = std::lower_bound(live.begin(), live.end(), p0);
      if (it != live.end() && *it == p0) {
        ImGui::Text("rank %lld of %zu live entries", static_cast<long long>(it - live.begin()), live.size());
        if (const auto sel = t.selected_positions(layer, head, s0, &live))
          ImGui::Text("%s at this step (%zu read, %s)",
                      std::binary_search(sel->begin(), sel->end(), p0) ? "selected" : "not selected", sel->size(),
                      t.has_tokens(layer, head, s0) ? "per token" : ("per page of " + std::to_string(t.page)).c_str());
        if (const float r = t.recall_at(s0, layer, head); !std::isnan(r))
          ImGui::Text("recall of the exact top-k at this step: %.3f", r);
        if (const auto ex = t.exact_positions(layer, head, s0, &live))
          ImGui::Text("%s the exact top-k (%zu entries)",
                      std::binary_search(ex->begin(), ex->end(), p0) ? "in" : "not in", ex->size());
      } else {
        ImGui::TextDisabled("not in the cache at this step");
      }
    }
  } else {
    ImGui::Text("positions %lld .. %lld (zoomed out: a pixel shows evicted > selected > kept)",
                static_cast<long long>(p0), static_cast<long long>(std::min(p1, t.n_positions - 1)));
  }
  ImGui::EndTooltip();
}

}  // namespace

void timeline(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  TimelineState& st = s.timeline;
  const RunData* b = s.b();
  if (st.opt.side == Side::kDiff && b) {  // where the caches of A and B differ, step by step
    side_selector(s, st.opt.side);
    if (!await_parts(s, {&s.a, &shown_run(s, Side::kB)}, {Part::kTimeline}, 0, figure_size())) return;
    const ImVec2 size = figure_size();
    const std::string key =
        run_key(s.a.get()) + run_key(b) + "|diff|" + std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head);
    st.fig.draw(
        key, size, [&] { return figures::timeline_diff_figure(*s.a, *b, s.sel, static_cast<int>(size.x)); }, ui.fonts,
        ui.textures);
    return;
  }
  const RunData& a = *shown_run(s, st.opt.side);
  if (!a.has_timeline) {
    ImGui::TextUnformatted("Timeline");
    side_selector(s, st.opt.side);
    ImGui::TextDisabled("Run #%lld has no timeline: record runs with capture summary or full (the Run view's default).",
                        static_cast<long long>(a.ref.run));
    turn_selector(s, a);
    return;
  }
  ImGui::Checkbox("every head", &st.opt.grid);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("every layer x KV head as a small map; click one to open it (else the selected head)");
  side_selector(s, st.opt.side);
  if (!await_parts(s, {&shown_run(s, st.opt.side)}, {Part::kTimeline}, 0, figure_size())) return;
  const Timeline* t = a.timeline();
  if (t) {
    ImGui::SameLine();
    ImGui::TextDisabled("   %lld positions x %lld decode steps; selections per page of %lld%s",
                        static_cast<long long>(t->n_positions), static_cast<long long>(t->n_steps),
                        static_cast<long long>(t->page),
                        t->tokens.empty()  ? ""
                        : t->exact.empty() ? " (pinned heads per token)"
                                           : " (pinned heads per token, with their exact top-k)");
  }
  if (t && !st.opt.grid) {
    ImGui::SameLine();
    position_range_control(s.sel, t->n_positions);
  }
  turn_selector(s, a);  // a multi-turn run: one turn's positions and steps
  const ImVec2 size = figure_size();
  const std::string key = run_key(&a) + "|" +
                          (st.opt.grid ? "grid"
                                       : std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head) + "|" +
                                             std::to_string(s.sel.pos_lo) + "-" + std::to_string(s.sel.pos_hi));
  st.fig.draw(
      key, size, [&] { return figures::timeline_figure(a, st.opt, s.sel, static_cast<int>(size.x)); }, ui.fonts,
      ui.textures);
  const bool hovered = ImGui::IsItemHovered();
  if (!st.opt.grid) mark_turn_steps(s, st.fig);
  if (t && !st.opt.grid) position_zoom(s.sel, t->n_positions, st.fig, st.drag);
  if (!t || !hovered || (st.drag.active && st.drag.moved)) return;
  const auto hit = st.fig.hit(ImGui::GetMousePos());
  if (!hit || hit->panel != 0 || st.fig.figure().panels.empty()) return;
  const auto* h = std::get_if<viz::Heatmap>(&st.fig.figure().panels[0]);
  if (!h || hit->row < 0 || hit->col < 0) return;
  if (st.opt.grid) {
    // Blocks of (rows + 1) x (cols + 1) cells per head, one NaN row/column between them.
    const std::int64_t rb = (h->rows + 1) / std::max<std::int64_t>(t->n_layer, 1);
    const std::int64_t cb = (h->cols + 1) / std::max<std::int64_t>(t->n_head_kv, 1);
    const std::int64_t l = hit->row / std::max<std::int64_t>(rb, 1), k = hit->col / std::max<std::int64_t>(cb, 1);
    if (l >= t->n_layer || k >= t->n_head_kv) return;
    ImGui::SetTooltip("layer %lld, KV head %lld: click to open its timeline", static_cast<long long>(l),
                      static_cast<long long>(k));
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
      s.sel.layer = l;
      s.sel.head = k;
      st.opt.grid = false;
    }
    return;
  }
  const std::int64_t layer = std::clamp<std::int64_t>(s.sel.layer, 0, t->n_layer - 1);
  const std::int64_t head = std::clamp<std::int64_t>(s.sel.head, 0, t->n_head_kv - 1);
  const figures::PositionWindow w = figures::position_window(s.sel, t->n_positions);
  head_tooltip(a, *t, layer, head, *h, hit->row, hit->col, w);
  if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
    const std::int64_t N = std::max<std::int64_t>(w.size(), 1), S = t->n_steps + 1;
    const std::int64_t p = w.lo + (hit->col * N + h->cols - 1) / h->cols;
    if (p < a.n_tok) s.sel.token = p;  // linked: the token views mark it
    const std::int64_t step = (hit->row * S + h->rows - 1) / h->rows;
    if (step >= 1) st.step = step;  // linked: the Selection view shows this step
  }
}

}  // namespace kvscope::gui::panels
