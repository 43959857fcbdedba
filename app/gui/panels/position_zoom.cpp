// Zoom, pan and brushing of prompt-position axes (panels.h "position axes"), and the decisive-score
// tooltip lines shared by the Attention and Tokens views.
#include <algorithm>
#include <cmath>

#include "figures.h"
#include "panels.h"
#include "score_rank.h"

namespace kvscope::gui::panels {
namespace {

// Axis labels of token positions (the prompt's, or the timeline's prompt + generated).
bool position_label(const std::string& label) { return label == "prompt position" || label == "token position"; }

// The panel of `fig` under screen point `m` whose x axis is positions, or -1.
int position_panel(const FigureView& fig, ImVec2 m) {
  if (!fig.valid()) return -1;
  const ImVec2 o = fig.origin();
  const auto& panels = fig.layout().panels;
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const viz::PanelLayout& L = panels[i];
    const double x = m.x - o.x, y = m.y - o.y;
    if (x < L.plot.x || x > L.plot.right() || y < L.plot.y || y > L.plot.bottom()) continue;
    if (!(L.x.map.p1 > L.x.map.p0 + 1) || L.x.map.log) continue;
    const auto& panel = fig.figure().panels[i];
    const bool positions = std::visit(
        [](const auto& p) {
          using T = std::decay_t<decltype(p)>;
          if constexpr (std::is_same_v<T, viz::Heatmap>) return p.col_labels.empty() && position_label(p.x.label);
          if constexpr (std::is_same_v<T, viz::LinePlot>) return position_label(p.x.label);
          if constexpr (std::is_same_v<T, viz::TokenStrip>) return p.single_row;
          return false;
        },
        panel);
    if (positions) return static_cast<int>(i);
  }
  return -1;
}

void set_window(Selection& sel, std::int64_t n_tok, double lo, double hi) {
  const std::int64_t min_span = std::min<std::int64_t>(n_tok, 16);
  auto l = static_cast<std::int64_t>(std::floor(lo)), h = static_cast<std::int64_t>(std::ceil(hi));
  if (h - l + 1 < min_span) {
    const std::int64_t mid = (l + h) / 2;
    l = mid - min_span / 2;
    h = l + min_span - 1;
  }
  if (l < 0) h -= l, l = 0;
  if (h > n_tok - 1) l -= h - (n_tok - 1), h = n_tok - 1;
  l = std::max<std::int64_t>(l, 0);
  if (l == 0 && h >= n_tok - 1) {
    sel.pos_lo = 0, sel.pos_hi = -1;  // the whole prompt
  } else {
    sel.pos_lo = l, sel.pos_hi = h;
  }
}

}  // namespace

bool position_zoom(Selection& sel, std::int64_t n_tok, const FigureView& fig, PositionDrag& drag) {
  if (n_tok <= 1) return false;
  const Selection before = sel;
  const figures::PositionWindow w = figures::position_window(sel, n_tok);
  const ImVec2 m = ImGui::GetMousePos();
  const int panel = ImGui::IsItemHovered() || drag.active ? position_panel(fig, m) : -1;
  const ImGuiIO& io = ImGui::GetIO();
  // The selected token on every position axis of the figure (heatmaps and strips; line plots draw it).
  if (fig.valid() && sel.token >= w.lo && sel.token <= w.hi) {
    const ImVec2 o = fig.origin();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const auto& panels = fig.layout().panels;
    for (std::size_t i = 0; i < panels.size(); ++i) {
      const auto& p = fig.figure().panels[i];
      const bool heat = std::holds_alternative<viz::Heatmap>(p) && position_label(std::get<viz::Heatmap>(p).x.label);
      const bool strip = std::holds_alternative<viz::TokenStrip>(p) && std::get<viz::TokenStrip>(p).single_row;
      if (!heat && !strip) continue;
      const viz::PanelLayout& L = panels[i];
      const double px = L.x.map.to_px(static_cast<double>(sel.token));
      if (!std::isfinite(px)) continue;
      const float x = static_cast<float>(o.x + px);
      dl->AddLine({x, static_cast<float>(o.y + L.plot.y) - 3}, {x, static_cast<float>(o.y + L.plot.bottom()) + 3},
                  IM_COL32(220, 30, 30, 230), 1.5f);
    }
  }
  if (panel >= 0 && !drag.active) {
    const viz::AxisMap& map = fig.layout().panels[static_cast<std::size_t>(panel)].x.map;
    const double at = map.to_data(m.x - fig.origin().x);
    if (io.MouseWheel != 0) {
      const double f = io.MouseWheel > 0 ? 0.8 : 1.25;
      const double lo = at - (at - (static_cast<double>(w.lo) - 0.5)) * f;
      const double hi = at + ((static_cast<double>(w.hi) + 0.5) - at) * f;
      set_window(sel, n_tok, lo + 0.5, hi - 0.5);
    }
    if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) sel.pos_lo = 0, sel.pos_hi = -1;
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
      drag = {true, io.KeyShift, false, m.x, at, (map.p1 - map.p0) / std::max(1e-9, map.hi - map.lo), w.lo, w.hi};
    }
  }
  if (drag.active) {
    const float dx = m.x - drag.start_px;
    drag.moved = drag.moved || std::abs(dx) > 2;
    if (drag.brush) {
      // The brushed range, drawn while dragging; shown once released.
      const ImVec2 o = fig.origin();
      const auto& panels = fig.layout().panels;
      ImDrawList* dl = ImGui::GetWindowDrawList();
      for (std::size_t i = 0; i < panels.size() && std::abs(dx) > 2; ++i) {
        const viz::PanelLayout& L = panels[i];
        dl->AddRectFilled({std::min(drag.start_px, m.x), static_cast<float>(o.y + L.plot.y)},
                          {std::max(drag.start_px, m.x), static_cast<float>(o.y + L.plot.bottom())},
                          IM_COL32(0, 114, 178, 50));
      }
      if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) {
        if (std::abs(dx) > 2) {
          const double end = drag.start_pos + dx / drag.px_per_pos;
          set_window(sel, n_tok, std::min(drag.start_pos, end), std::max(drag.start_pos, end));
        }
        drag.active = false;
      }
    } else {
      if (std::abs(dx) > 2 && w.zoomed) {
        const double shift = std::round(-dx / drag.px_per_pos);  // whole positions: the width stays
        set_window(sel, n_tok, static_cast<double>(drag.start_lo) + shift, static_cast<double>(drag.start_hi) + shift);
        ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeEW);
      }
      if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) drag.active = false;
    }
  }
  return !(sel == before);
}

void position_range_control(Selection& sel, std::int64_t n_tok) {
  if (n_tok <= 1) return;
  const figures::PositionWindow w = figures::position_window(sel, n_tok);
  int lo = static_cast<int>(w.lo), hi = static_cast<int>(w.hi);
  ImGui::SetNextItemWidth(220);
  if (ImGui::DragIntRange2("positions", &lo, &hi, std::max(1.0f, static_cast<float>(n_tok) / 400.0f), 0,
                           static_cast<int>(n_tok - 1), "%d", "%d", ImGuiSliderFlags_AlwaysClamp))
    set_window(sel, n_tok, lo, std::max(lo, hi));
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "prompt positions shown by every position axis\nwheel over a plot: zoom; drag: pan; "
        "shift-drag: show the brushed range; double-click: whole prompt");
  ImGui::SameLine();
  ImGui::BeginDisabled(!w.zoomed);
  if (ImGui::SmallButton("whole prompt")) sel.pos_lo = 0, sel.pos_hi = -1;
  ImGui::EndDisabled();
}

void score_tooltip_lines(const RunData& r, std::int64_t layer, std::int64_t head, std::int64_t pos) {
  const float* score = r.score_row(layer, head);
  if (!score || pos < 0 || pos >= r.n_tok || (r.has_kept && !r.kept_set(layer, head))) return;
  const figures::PositionRank pr =
      figures::rank_position(score, r.n_tok, r.has_kept ? r.kept_set(layer, head) : nullptr, pos);
  const float v = score[pos];
  const std::string name = figures::decisive_score_name(r);
  if (pr.run_first >= 0) {
    ImGui::Text("%s: always kept (%s, positions %lld-%lld)", name.c_str(),
                figures::always_kept_name(r.scorer(), pr.run_first, pr.run_last, r.n_tok).c_str(),
                static_cast<long long>(pr.run_first), static_cast<long long>(pr.run_last));
    return;
  }
  if (std::isnan(v)) {
    ImGui::TextDisabled("never scored");
    return;
  }
  ImGui::Text("%s %.4g   rank %d of %lld", name.c_str(), v, pr.rank, static_cast<long long>(r.n_tok));
  if (pr.n_kept < r.n_tok)
    ImGui::Text("%s: ranks 1-%lld kept (%lld always kept); cutoff score %.4g", pr.kept ? "kept" : "evicted",
                static_cast<long long>(pr.n_kept), static_cast<long long>(pr.n_always), pr.cutoff_kept);
  else
    ImGui::TextUnformatted("kept: nothing evicted at this head");
}

}  // namespace kvscope::gui::panels
