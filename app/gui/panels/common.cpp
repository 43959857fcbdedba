// Helpers shared by the panels.
#include <algorithm>
#include <cstdio>
#include <iterator>

#include "panels.h"

namespace kvscope::gui::panels {

bool no_run(const AppState& s) {
  if (s.a) return false;
  ImGui::Spacing();
  ImGui::TextDisabled("No run open. Open a session database and pick a run in the Sessions view,");
  ImGui::TextDisabled("or start one in the Run view.");
  return true;
}

bool side_selector(const AppState& s, Side& side) {
  if (!s.b()) {
    side = Side::kA;
    return false;
  }
  bool changed = false;
  ImGui::SameLine();
  ImGui::TextUnformatted("  show");
  ImGui::SameLine();
  changed |= ImGui::RadioButton("A", reinterpret_cast<int*>(&side), static_cast<int>(Side::kA));
  ImGui::SameLine();
  changed |= ImGui::RadioButton("B", reinterpret_cast<int*>(&side), static_cast<int>(Side::kB));
  ImGui::SameLine();
  changed |= ImGui::RadioButton("A \xe2\x88\x92 B", reinterpret_cast<int*>(&side), static_cast<int>(Side::kDiff));
  return changed;
}

void outline_cell(const FigureView& fig, int panel, std::int64_t row, std::int64_t col, ImU32 color) {
  const auto r = fig.cell_rect(panel, row, col);
  if (!r) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a{static_cast<float>(r->x), static_cast<float>(r->y)},
      b{static_cast<float>(r->right()), static_cast<float>(r->bottom())};
  dl->AddRect({a.x - 1, a.y - 1}, {b.x + 1, b.y + 1}, IM_COL32(0, 0, 0, 220), 0, 0, 3.0f);
  dl->AddRect(a, b, color, 0, 0, 1.5f);
}

std::string run_key(const RunData* r) {
  if (!r) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p:%lld:", static_cast<const void*>(r), static_cast<long long>(r->ref.run));
  return buf + r->ref.db;
}

void heads_map_interaction(AppState& s, const FigureView& fig, int panel,
                           const std::function<std::string(std::int64_t layer, std::int64_t head)>& tooltip) {
  if (!ImGui::IsItemHovered()) return;
  const auto hit = fig.hit(ImGui::GetMousePos());
  if (!hit || (panel >= 0 && hit->panel != panel) || hit->row < 0) return;
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(tooltip(hit->row, hit->col).c_str());
  ImGui::TextDisabled("click: select this head for the other views");
  ImGui::EndTooltip();
  if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
    s.sel.layer = hit->row;
    s.sel.head = hit->col;
  }
}

bool await_parts(AppState& s, std::initializer_list<const std::shared_ptr<const RunData>*> runs,
                 std::initializer_list<Part> parts, std::int64_t layer, ImVec2 size) {
  std::string missing;
  std::int64_t run_id = -1;
  // Requested in reverse: the loader decodes the newest request first.
  for (auto r = std::rbegin(runs); r != std::rend(runs); ++r) {
    const auto* run = *r;
    if (!run || !*run) continue;
    for (auto p = std::rbegin(parts); p != std::rend(parts); ++p) {
      const std::int64_t l = figures::run_level(*p) ? 0 : layer;
      if ((*run)->ready(*p, l)) continue;
      s.loader.request(*run, *p, l);
      missing = std::string(figures::part_label(*p)) + (missing.empty() ? "" : ", ") + missing;
      run_id = (*run)->ref.run;
    }
  }
  if (missing.empty()) return true;
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const int dots = static_cast<int>(ImGui::GetTime() * 3.0) % 4;
  ImGui::Dummy(size);
  ImGui::GetWindowDrawList()->AddText({p0.x + 12, p0.y + 12}, ImGui::GetColorU32(ImGuiCol_TextDisabled),
                                      ("decoding " + missing + " of layer " + std::to_string(layer) + " (run #" +
                                       std::to_string(run_id) + ")" + std::string(static_cast<std::size_t>(dots), '.'))
                                          .c_str());
  return false;
}

const std::shared_ptr<const RunData>& shown_run(const AppState& s, Side side) {
  if (side == Side::kB && !s.others.empty())
    return s.others[static_cast<std::size_t>(std::clamp(s.compare.b_index, 0, static_cast<int>(s.others.size()) - 1))];
  return s.a;
}

ImVec2 figure_size(float below) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  return {avail.x, std::max(120.0f, avail.y - below)};
}

}  // namespace kvscope::gui::panels
