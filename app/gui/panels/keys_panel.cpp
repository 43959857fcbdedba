// Key geometry: cosine of each key to the mean key (KeyDiff's anchor) for the selected head,
// kept vs evicted, and cosine vs attention.
#include <cmath>

#include "../figures.h"
#include "../ui_util.h"
#include "panels.h"

namespace kvscope::gui::panels {

void keys(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  KeysState& st = s.keys;
  const RunData& a = *s.a;
  ImGui::SetNextItemWidth(160);
  ImGui::SliderInt("histogram bins", &st.opt.bins, 8, 120);
  // Mean cosine of kept and evicted keys: does the policy keep the outliers (KeyDiff) or not?
  if (const float* cos = a.cos_row(s.sel.layer, s.sel.head)) {
    double sk = 0, se = 0;
    std::int64_t nk = 0, ne = 0;
    for (std::int64_t i = 0; i < a.n_tok; ++i) {
      if (!std::isfinite(cos[i])) continue;
      if (a.kept_at(s.sel.layer, s.sel.head, i)) sk += cos[i], ++nk;
      else se += cos[i], ++ne;
    }
    ImGui::SameLine();
    ImGui::Text("   mean cosine to mean key: kept %s (%lld), evicted %s (%lld)", format_num(nk ? sk / nk : NAN, "%.3f").c_str(),
                static_cast<long long>(nk), format_num(ne ? se / ne : NAN, "%.3f").c_str(), static_cast<long long>(ne));
  }
  const std::string key = run_key(&a) + "|" + std::to_string(st.opt.bins) + "|" + std::to_string(s.sel.layer) + "," +
                          std::to_string(s.sel.head);
  st.fig.draw(key, figure_size(), [&] { return keys_figure(a, st.opt, s.sel); }, ui.fonts, ui.textures);
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      ImGui::BeginTooltip();
      if (hit->panel == 0) ImGui::Text("cosine %.3f", hit->x);
      else ImGui::Text("cosine %.3f, attention %.3g", hit->x, hit->y);
      ImGui::EndTooltip();
    }
}

}  // namespace kvscope::gui::panels
