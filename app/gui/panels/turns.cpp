// A multi-turn run per turn (RunData::turns, figures::turn_spans): the turn selector and the table of
// the turns' texts shown by the Timeline view, choosing a turn (the linked position window and the
// shared step), and the turns marked on the Timeline figure's step axes.
#include <algorithm>
#include <cstdio>
#include <variant>

#include "../ui_util.h"
#include "panels.h"

namespace kvscope::gui::panels {
namespace {

std::string turn_name(int turn) { return turn < 0 ? "all turns" : "turn " + std::to_string(turn + 1); }

// "positions 120-151 · step 9 (prefill) · decode 10-14" of one turn.
std::string span_text(const figures::TurnSpan& t) {
  char buf[160];
  const int n = std::snprintf(buf, sizeof buf, "positions %lld-%lld · %s %lld", static_cast<long long>(t.first()),
                              static_cast<long long>(t.last()), t.step == 0 ? "prefill at step" : "its prefill: step",
                              static_cast<long long>(t.step));
  std::string out(buf, static_cast<std::size_t>(std::max(n, 0)));
  if (t.n_decode > 0)
    out += " · decode steps " + std::to_string(t.step + 1) + "-" + std::to_string(t.step + t.n_decode);
  return out;
}

// A turn's text in one table cell: control characters shown (display_token), the whole text wrapped
// in the tooltip.
void text_cell(const std::string& text) {
  const std::string shown = display_token(ellipsize(text, 400));
  ImGui::TextUnformatted(shown.c_str());
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
    ImGui::TextUnformatted(ellipsize(text, 4000).c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

}  // namespace

const std::vector<figures::TurnSpan>& turn_spans_of(AppState& s, const RunData& a) {
  TimelineState& st = s.timeline;
  const Timeline* t = a.timeline();
  const std::string key = run_key(&a) + (t ? "|timeline" : "");
  if (st.turns_key != key) {
    const bool same_run = st.turns_key.rfind(run_key(&a), 0) == 0;
    const bool chosen = same_run && st.turn >= 0 && st.turn < static_cast<int>(st.turns.size());
    // The chosen turn's window as chosen before the timeline was in (from the lengths alone).
    const bool window = chosen && s.sel.pos_lo == st.turns[static_cast<std::size_t>(st.turn)].first() &&
                        s.sel.pos_hi == std::max(st.turns[static_cast<std::size_t>(st.turn)].first(),
                                                 st.turns[static_cast<std::size_t>(st.turn)].last());
    st.turns = figures::turn_spans(a.turns, t);
    st.turns_key = key;
    if (!chosen || st.turn >= static_cast<int>(st.turns.size()))
      st.turn = -1;  // another run: all turns
    else if (window)
      select_turn(s, a, st.turn);  // the timeline's places
  }
  return st.turns;
}

void select_turn(AppState& s, const RunData& a, int turn) {
  const auto& spans = turn_spans_of(s, a);
  TimelineState& st = s.timeline;
  if (turn < 0 || turn >= static_cast<int>(spans.size())) {
    st.turn = -1;
    s.sel.pos_lo = 0, s.sel.pos_hi = -1;
    return;
  }
  st.turn = turn;
  const figures::TurnSpan& span = spans[static_cast<std::size_t>(turn)];
  s.sel.pos_lo = span.first();
  s.sel.pos_hi = std::max(span.first(), span.last());
  st.step = std::max<std::int64_t>(span.step, 1);  // the Selection view's steps start at 1
}

void turn_selector(AppState& s, const RunData& a) {
  if (a.turns.size() < 2) {
    if (!a.turns_note.empty()) ImGui::TextDisabled("turns not shown: %s", ellipsize(a.turns_note, 120).c_str());
    return;
  }
  const auto& spans = turn_spans_of(s, a);
  TimelineState& st = s.timeline;
  int chosen = st.turn;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Turn");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  if (ImGui::BeginCombo("##turn", turn_name(st.turn).c_str())) {
    for (int i = -1; i < static_cast<int>(spans.size()); ++i)
      if (ImGui::Selectable(turn_name(i).c_str(), i == st.turn)) chosen = i;
    ImGui::EndCombo();
  }
  item_tooltip("show one turn: its block (the token chosen last before it, then its input) and its outputs");
  ImGui::SameLine();
  if (st.turn >= 0 && st.turn < static_cast<int>(spans.size()))
    ImGui::TextDisabled("%s", span_text(spans[static_cast<std::size_t>(st.turn)]).c_str());
  else
    ImGui::TextDisabled("%zu turns on one cache", spans.size());

  // Every turn: positions, steps, its input and output text; a row selects its turn.
  const float rows = static_cast<float>(std::min<std::size_t>(spans.size(), 4) + 1);
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Resizable;
  if (ImGui::BeginTable("turns", 5, flags, {0, rows * ImGui::GetTextLineHeightWithSpacing() + 6})) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("turn");
    ImGui::TableSetupColumn("positions");
    ImGui::TableSetupColumn("steps");
    ImGui::TableSetupColumn("input", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableSetupColumn("output", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableHeadersRow();
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const figures::TurnSpan& t = spans[i];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::Selectable(turn_name(static_cast<int>(i)).c_str(), st.turn == static_cast<int>(i),
                            ImGuiSelectableFlags_SpanAllColumns))
        chosen = st.turn == static_cast<int>(i) ? -1 : static_cast<int>(i);
      ImGui::PopID();
      ImGui::TableNextColumn();
      ImGui::Text("%lld-%lld", static_cast<long long>(t.first()), static_cast<long long>(t.last()));
      ImGui::TableNextColumn();
      if (t.n_decode > 0)
        ImGui::Text("%lld-%lld", static_cast<long long>(t.step), static_cast<long long>(t.step + t.n_decode));
      else
        ImGui::Text("%lld", static_cast<long long>(t.step));
      ImGui::TableNextColumn();
      text_cell(i < a.turn_input_text.size() ? a.turn_input_text[i] : "");
      ImGui::TableNextColumn();
      text_cell(i < a.turn_output_text.size() ? a.turn_output_text[i] : "");
    }
    ImGui::EndTable();
  }
  if (chosen != st.turn) select_turn(s, a, chosen);
}

void mark_turn_steps(const AppState& s, const FigureView& fig) {
  const TimelineState& st = s.timeline;
  if (st.turns.size() < 2 || !fig.valid()) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = fig.origin();
  const auto& layouts = fig.layout().panels;
  const auto& panels = fig.figure().panels;
  for (std::size_t i = 0; i < panels.size() && i < layouts.size(); ++i) {
    // Steps down a map (y) or across a per-step plot (x).
    enum class StepAxis { kNone, kMapY, kPlotX };
    const StepAxis axis = std::visit(
        [](const auto& p) {
          using T = std::decay_t<decltype(p)>;
          if constexpr (std::is_same_v<T, viz::Heatmap>)
            if (p.y.label == "decode step") return StepAxis::kMapY;
          if constexpr (std::is_same_v<T, viz::LinePlot>)
            if (p.x.label == "decode step") return StepAxis::kPlotX;
          return StepAxis::kNone;
        },
        panels[i]);
    if (axis == StepAxis::kNone) continue;
    const bool map = axis == StepAxis::kMapY;
    const viz::PanelLayout& L = layouts[i];
    const viz::AxisMap& m = map ? L.y.map : L.x.map;
    const float x0 = o.x + static_cast<float>(L.plot.x), x1 = o.x + static_cast<float>(L.plot.right());
    const float y0 = o.y + static_cast<float>(L.plot.y), y1 = o.y + static_cast<float>(L.plot.bottom());
    auto px = [&](double step) {
      const float v = static_cast<float>(m.to_px(step)) + (map ? o.y : o.x);
      return map ? std::clamp(v, y0, y1) : std::clamp(v, x0, x1);
    };
    dl->PushClipRect({x0, y0}, {x1, y1}, true);
    for (std::size_t k = 0; k < st.turns.size(); ++k) {
      const figures::TurnSpan& t = st.turns[k];
      const bool chosen = static_cast<int>(k) == st.turn;
      const float a = px(static_cast<double>(t.step) - 0.5);
      if (chosen) {  // the turn's steps: its prefill, then its decoding
        const float b = px(static_cast<double>(t.step + t.n_decode) + 0.5);
        if (map)
          dl->AddRectFilled({x0, std::min(a, b)}, {x1, std::max(a, b)}, IM_COL32(255, 210, 0, 40));
        else
          dl->AddRectFilled({std::min(a, b), y0}, {std::max(a, b), y1}, IM_COL32(255, 210, 0, 40));
      }
      if (k == 0) continue;  // the first turn starts the axis
      const ImU32 col = chosen ? IM_COL32(255, 190, 0, 255) : IM_COL32(235, 235, 235, 200);
      if (map) {
        dl->AddLine({x0, a}, {x1, a}, IM_COL32(0, 0, 0, 160), 3.0f);
        dl->AddLine({x0, a}, {x1, a}, col, 1.5f);
        const std::string label = turn_name(static_cast<int>(k));
        const ImVec2 sz = ImGui::CalcTextSize(label.c_str());
        const ImVec2 at{x1 - sz.x - 6, std::clamp(a + 2, y0, y1 - sz.y)};
        dl->AddRectFilled({at.x - 3, at.y}, {at.x + sz.x + 3, at.y + sz.y}, IM_COL32(0, 0, 0, 170), 2.0f);
        dl->AddText(at, col, label.c_str());
      } else {
        dl->AddLine({a, y0}, {a, y1}, col, 1.0f);
      }
    }
    dl->PopClipRect();
  }
}

}  // namespace kvscope::gui::panels
