// Fidelity: per decode step KL(full || compressed), top-1 agreement and bytes read of run A and the
// compare runs, overlaid.
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void fidelity(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  FidelityState& st = s.fidelity;
  ImGui::Checkbox("top-1 as running mean", &st.opt.running_mean);
  std::vector<const RunData*> runs = {s.a.get()};
  for (const auto& o : s.others) runs.push_back(o.get());
  std::string key = std::to_string(st.opt.running_mean);
  for (const RunData* r : runs) {
    key += "|" + run_key(r);
    ImGui::SameLine();
    ImGui::TextDisabled("   #%lld: mean KL %s, top-1 %s", static_cast<long long>(r->ref.run),
                        format_num(r->summary_metric("mean_kl"), "%.4g").c_str(),
                        format_num(r->summary_metric("top1_agreement"), "%.3f").c_str());
  }
  st.fig.draw(
      key, figure_size(), [&] { return figures::fidelity_figure(runs, st.opt); }, ui.fonts, ui.textures);
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      const auto step = std::llround(hit->x);
      ImGui::BeginTooltip();
      ImGui::Text("decode step %lld", static_cast<long long>(step));
      for (const RunData* r : runs) {
        auto val = [&](const char* n) {
          auto it = r->steps.find(n);
          return it != r->steps.end() && step >= 0 && step < static_cast<long long>(it->second.size())
                     ? it->second[static_cast<std::size_t>(step)]
                     : NAN;
        };
        ImGui::Text("#%lld  KL %s  top-1 %s  read %s", static_cast<long long>(r->ref.run),
                    format_num(val("kl"), "%.4g").c_str(), format_num(val("top1"), "%.0f").c_str(),
                    format_bytes(val("bytes_read")).c_str());
      }
      ImGui::EndTooltip();
    }
}

}  // namespace kvscope::gui::panels
