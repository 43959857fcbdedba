// Attention: why the selected layer's heads kept what they kept. For every KV head the decisive
// score (what the budget stage ranked; the window-mean attention of runs without it), the selected
// head's score with its cutoff, always-kept regions, kept tokens (reduced to pixels: max per bucket)
// and the selected token, and its kept/evicted strip, on one position axis that zooms and pans
// (linked with the other views); in a compare, the same for B or the kept-set difference A - B.
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
  ImGui::BeginDisabled(!a.has_score || diff);
  ImGui::Checkbox("decisive score", &st.opt.decisive_score);
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(a.has_score
                          ? "plot what the budget stage ranked (%s), else the window-mean attention"
                          : "this run recorded no decisive score (capture full, a scoring stage): the window-mean "
                            "attention is shown%s",
                      a.has_score ? figures::decisive_score_name(a).c_str() : "");
  ImGui::SameLine();
  position_range_control(s.sel, a.n_tok);
  ImGui::SameLine();
  ImGui::TextDisabled("   layer %lld, KV head %lld%s", static_cast<long long>(s.sel.layer),
                      static_cast<long long>(s.sel.head),
                      a.has_attention ? "" : "   (this run has no attention capture: run with capture full)");
  if (ui.catalog && a.has_score && st.opt.decisive_score && !diff)
    if (const PolicyDescription* d = ui.catalog->find(a.scorer()); d && !d->score.empty())
      ImGui::TextDisabled("%s: %s", figures::decisive_score_name(a).c_str(), d->score.c_str());
  const ImVec2 size = figure_size();
  const bool ready = diff ? await_parts(s, {&s.a, &b}, {Part::kKept}, s.sel.layer, size) &&
                                await_parts(s, {s.a->has_attention ? &s.a : &b}, {Part::kAttention}, s.sel.layer, size)
                          : await_parts(s, {&shown}, {Part::kAttention, Part::kKept, Part::kScore}, s.sel.layer, size);
  if (!ready) return;
  const std::string key = run_key(&a) + (diff ? run_key(b.get()) : "") + "|" + std::to_string(st.opt.log_scale) +
                          std::to_string(st.opt.decisive_score) + "|" + std::to_string(s.sel.layer) + "," +
                          std::to_string(s.sel.head) + "|" + std::to_string(s.sel.token) + "|" +
                          std::to_string(s.sel.pos_lo) + "-" + std::to_string(s.sel.pos_hi);
  st.fig.draw(
      key, size,
      [&] {
        return diff ? figures::attention_diff_figure(*s.a, *b, st.opt, s.sel, static_cast<int>(size.x))
                    : figures::attention_figure(a, st.opt, s.sel, static_cast<int>(size.x));
      },
      ui.fonts, ui.textures);
  const bool hovered = ImGui::IsItemHovered();
  if (!diff) position_zoom(s.sel, a.n_tok, st.fig, st.drag);
  if (hovered && st.fig.valid() && !(st.drag.active && st.drag.moved)) {
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      std::int64_t pos = -1, head = s.sel.head;
      if (hit->row >= 0)
        pos = std::llround(hit->x), head = hit->row;
      else if (hit->position >= 0)
        pos = hit->position;
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
        } else {
          ImGui::Text("L%lld H%lld: %s", static_cast<long long>(s.sel.layer), static_cast<long long>(head),
                      a.kept_at(s.sel.layer, head, pos) ? "kept" : "evicted");
          score_tooltip_lines(a, s.sel.layer, head, pos);
          if (att) ImGui::TextDisabled("window-mean attention %.4g", att[pos]);
        }
        ImGui::TextDisabled(hit->row >= 0 ? "click: select this head and token" : "click: select this token");
        ImGui::TextDisabled("wheel: zoom   drag: pan   shift-drag: zoom to range   double-click: whole prompt");
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
