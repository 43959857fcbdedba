// Heads overview: a layer x KV head heatmap of one per-head metric; click a cell to select the head.
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void heads(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  HeadsState& st = s.heads;
  const auto& names = heads_metric_names();
  ImGui::SetNextItemWidth(260);
  const std::string current =
      st.opt.metric < 0 ? "every metric (small maps)" : metric_label(names[static_cast<std::size_t>(st.opt.metric)]);
  if (ImGui::BeginCombo("metric", current.c_str())) {
    if (ImGui::Selectable("every metric (small maps)", st.opt.metric < 0)) st.opt.metric = -1;
    for (int m = 0; m < static_cast<int>(names.size()); ++m)
      if (ImGui::Selectable(metric_label(names[static_cast<std::size_t>(m)]).c_str(), m == st.opt.metric))
        st.opt.metric = m;
    ImGui::EndCombo();
  }
  side_selector(s, st.opt.side);
  ImGui::SameLine();
  ImGui::TextDisabled("   %lld layers x %lld KV heads", static_cast<long long>(s.a->n_layer),
                      static_cast<long long>(s.a->n_head_kv));
  if (!s.a->has_summary && st.opt.metric < 7) {  // summary metrics (not kept / kept_frac)
    ImGui::SameLine();
    ImGui::TextColored({0.7f, 0.35f, 0.0f, 1}, "  (no head_summary captured: run with capture summary or full)");
  }
  const RunData* b = s.b();
  const std::string key = run_key(s.a.get()) + run_key(b) + "|" + std::to_string(st.opt.metric) + "|" +
                          std::to_string(static_cast<int>(st.opt.side)) + "|" + std::to_string(s.sel.layer) + "," +
                          std::to_string(s.sel.head);
  st.fig.draw(
      key, figure_size(), [&] { return figures::heads_figure(*s.a, b, st.opt, s.sel); }, ui.fonts, ui.textures);
  const RunData& a = *s.a;
  const int metric = st.opt.metric;
  heads_map_interaction(s, st.fig, -1, [&](std::int64_t l, std::int64_t h) {
    std::string t = "layer " + std::to_string(l) + ", KV head " + std::to_string(h) + "\n";
    for (int m = 0; m < static_cast<int>(names.size()); ++m) {
      const auto va = figures::heads_metric_values(a, m);
      const double v = va[static_cast<std::size_t>(l * a.n_head_kv + h)];
      t += std::string(m == metric ? "> " : "  ") + metric_label(names[static_cast<std::size_t>(m)]) + ": " +
           format_num(v, "%.4g");
      if (b && b->n_layer == a.n_layer && b->n_head_kv == a.n_head_kv) {
        const auto vb = figures::heads_metric_values(*b, m);
        t += "   (B " + format_num(vb[static_cast<std::size_t>(l * a.n_head_kv + h)], "%.4g") + ")";
      }
      t += "\n";
    }
    return t;
  });
  for (int p = 0; p < static_cast<int>(st.fig.figure().panels.size()); ++p)
    outline_cell(st.fig, p, s.sel.layer, s.sel.head, IM_COL32(255, 255, 255, 255));
}

}  // namespace kvscope::gui::panels
