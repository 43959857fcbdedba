// Attention: the selected layer's window attention over prompt positions for every KV head, the
// selected head's attention with its kept tokens marked (reduced to pixels: max per bucket), and
// its kept/evicted strip.
#include <cmath>

#include "../figures.h"
#include "../ui_util.h"
#include "panels.h"

namespace kvscope::gui::panels {

void attention(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  AttentionState& st = s.attention;
  const RunData& a = *s.a;
  ImGui::Checkbox("log scale", &st.opt.log_scale);
  ImGui::SameLine();
  ImGui::TextDisabled("   layer %lld, KV head %lld%s", static_cast<long long>(s.sel.layer), static_cast<long long>(s.sel.head),
                      a.has_attention ? "" : "   (this run has no attention capture: run with capture full)");
  const ImVec2 size = figure_size();
  const std::string key = run_key(&a) + "|" + std::to_string(st.opt.log_scale) + "|" + std::to_string(s.sel.layer) + "," +
                          std::to_string(s.sel.head);
  st.fig.draw(key, size, [&] { return attention_figure(a, st.opt, s.sel, static_cast<int>(size.x)); }, ui.fonts, ui.textures);
  if (ImGui::IsItemHovered() && st.fig.valid()) {
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      std::int64_t pos = -1, head = s.sel.head;
      if (hit->row >= 0) pos = hit->col, head = hit->row;
      else if (hit->token >= 0) pos = hit->token;
      else pos = std::llround(hit->x);
      if (pos >= 0 && pos < a.n_tok) {
        ImGui::BeginTooltip();
        ImGui::Text("position %lld  \"%s\"", static_cast<long long>(pos),
                    ellipsize(display_token(a.token_text[static_cast<std::size_t>(pos)]), 40).c_str());
        if (const float* att = a.attention_row(s.sel.layer, head))
          ImGui::Text("L%lld H%lld attention %.4g  (%s)", static_cast<long long>(s.sel.layer), static_cast<long long>(head),
                      att[pos], a.kept_at(s.sel.layer, head, pos) ? "kept" : "evicted");
        ImGui::TextDisabled(hit->row >= 0 ? "click: select this head and token" : "click: select this token");
        ImGui::EndTooltip();
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
          s.sel.token = pos;
          s.sel.head = head;
        }
      }
    }
  }
}

}  // namespace kvscope::gui::panels
