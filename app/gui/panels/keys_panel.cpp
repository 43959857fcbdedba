// Key geometry: cosine of each key to the mean key (KeyDiff's anchor) for the selected head,
// kept vs evicted, cosine vs attention, keys on their two principal axes; in a compare, the same
// for B or grouped by who kept each token (only A, only B, both).
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void keys(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  KeysState& st = s.keys;
  ImGui::SetNextItemWidth(160);
  ImGui::SliderInt("histogram bins", &st.opt.bins, 8, 120);
  side_selector(s, st.opt.side);
  const auto& shown = shown_run(s, st.opt.side);
  const RunData& a = *shown;
  const bool diff = st.opt.side == Side::kDiff;
  const auto b = s.b_run();
  const ImVec2 size = figure_size(ImGui::GetFrameHeightWithSpacing());
  // Mean cosine of kept and evicted keys: does the policy keep the outliers (KeyDiff) or not?
  if (const float* cos = a.cos_row(s.sel.layer, s.sel.head); cos && a.ready(Part::kKept, s.sel.layer)) {
    double sk = 0, se = 0;
    std::int64_t nk = 0, ne = 0;
    for (std::int64_t i = 0; i < a.n_tok; ++i) {
      if (!std::isfinite(cos[i])) continue;
      if (a.kept_at(s.sel.layer, s.sel.head, i))
        sk += cos[i], ++nk;
      else
        se += cos[i], ++ne;
    }
    ImGui::Text("mean cosine to mean key (run %s): kept %s (%lld), evicted %s (%lld)",
                diff ? "A" : (&a == s.a.get() ? "A" : "B"), format_num(nk ? sk / nk : NAN, "%.3f").c_str(),
                static_cast<long long>(nk), format_num(ne ? se / ne : NAN, "%.3f").c_str(), static_cast<long long>(ne));
  } else {
    ImGui::NewLine();
  }
  const bool ready =
      diff ? await_parts(s, {&s.a, &b}, {Part::kKept}, s.sel.layer, size) &&
                 await_parts(s, {s.a->has_cos ? &s.a : &b}, {Part::kCos, Part::kAttention, Part::kPca}, s.sel.layer,
                             size)
           : await_parts(s, {&shown}, {Part::kCos, Part::kAttention, Part::kPca, Part::kKept}, s.sel.layer, size);
  if (!ready) return;
  const std::string key = run_key(&a) + (diff ? run_key(b.get()) : "") + "|" + std::to_string(st.opt.bins) + "|" +
                          std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head);
  st.fig.draw(
      key, size,
      [&] {
        return diff ? figures::keys_diff_figure(*s.a, *b, st.opt, s.sel) : figures::keys_figure(a, st.opt, s.sel);
      },
      ui.fonts, ui.textures);
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      ImGui::BeginTooltip();
      if (hit->panel == 0)
        ImGui::Text("cosine %.3f", hit->x);
      else if (hit->panel == 1)
        ImGui::Text("cosine %.3f, attention %.3g", hit->x, hit->y);
      else
        ImGui::Text("PC 1 %.3f, PC 2 %.3f", hit->x, hit->y);
      ImGui::EndTooltip();
    }
}

}  // namespace kvscope::gui::panels
