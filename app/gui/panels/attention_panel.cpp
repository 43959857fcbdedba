// Attention: the selected layer's window attention over prompt positions for every KV head, the
// selected head's attention with its kept tokens marked (reduced to pixels: max per bucket), and
// its kept/evicted strip; in a compare, the same for B or the kept-set difference A - B.
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void attention(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  AttentionState& st = s.attention;
  ImGui::Checkbox("log scale", &st.opt.log_scale);
  side_selector(s, st.opt.side);
  const auto& shown = shown_run(s, st.opt.side);
  const RunData& a = *shown;
  const bool diff = st.opt.side == Side::kDiff;
  const auto b = s.b_run();
  ImGui::SameLine();
  ImGui::TextDisabled("   layer %lld, KV head %lld%s", static_cast<long long>(s.sel.layer),
                      static_cast<long long>(s.sel.head),
                      a.has_attention ? "" : "   (this run has no attention capture: run with capture full)");
  const ImVec2 size = figure_size();
  const bool ready = diff ? await_parts(s, {&s.a, &b}, {Part::kKept}, s.sel.layer, size) &&
                                await_parts(s, {s.a->has_attention ? &s.a : &b}, {Part::kAttention}, s.sel.layer, size)
                          : await_parts(s, {&shown}, {Part::kAttention, Part::kKept}, s.sel.layer, size);
  if (!ready) return;
  const std::string key = run_key(&a) + (diff ? run_key(b.get()) : "") + "|" + std::to_string(st.opt.log_scale) + "|" +
                          std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head);
  st.fig.draw(
      key, size,
      [&] {
        return diff ? figures::attention_diff_figure(*s.a, *b, st.opt, s.sel, static_cast<int>(size.x))
                    : figures::attention_figure(a, st.opt, s.sel, static_cast<int>(size.x));
      },
      ui.fonts, ui.textures);
  if (ImGui::IsItemHovered() && st.fig.valid()) {
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      std::int64_t pos = -1, head = s.sel.head;
      if (hit->row >= 0)
        pos = hit->col, head = hit->row;
      else if (hit->token >= 0)
        pos = hit->token;
      else
        pos = std::llround(hit->x);
      if (pos >= 0 && pos < a.n_tok) {
        ImGui::BeginTooltip();
        ImGui::Text("position %lld  \"%s\"", static_cast<long long>(pos),
                    ellipsize(display_token(a.token_text[static_cast<std::size_t>(pos)]), 40).c_str());
        const float* att = a.attention_row(s.sel.layer, head);
        if (diff) {
          ImGui::Text("L%lld H%lld: A %s, B %s", static_cast<long long>(s.sel.layer), static_cast<long long>(head),
                      s.a->kept_at(s.sel.layer, head, pos) ? "kept" : "evicted",
                      b->kept_at(s.sel.layer, head, pos) ? "kept" : "evicted");
        } else if (att) {
          ImGui::Text("L%lld H%lld attention %.4g  (%s)", static_cast<long long>(s.sel.layer),
                      static_cast<long long>(head), att[pos], a.kept_at(s.sel.layer, head, pos) ? "kept" : "evicted");
        }
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
