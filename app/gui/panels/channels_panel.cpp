// Channels: per-channel saliency mean and CV of the selected head (head_dim x tokens is not stored:
// the capture keeps channel_mean and channel_cv), and a KV heads x channels map of the layer; in a
// compare, the same for B or A - B.
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void channels(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  ChannelsState& st = s.channels;
  int m = st.opt.cv ? 1 : 0;
  ImGui::TextUnformatted("map:");
  ImGui::SameLine();
  ImGui::RadioButton("mean saliency", &m, 0);
  ImGui::SameLine();
  ImGui::RadioButton("CV over tokens", &m, 1);
  st.opt.cv = m == 1;
  side_selector(s, st.opt.side);
  const auto& shown = shown_run(s, st.opt.side);
  const RunData& a = *shown;
  const bool diff = st.opt.side == Side::kDiff;
  const auto b = s.b_run();
  ImGui::SameLine();
  ImGui::TextDisabled(
      "   w = |q\xcc\x84_j|\xc2\xb7|k_tj| (SPARK \xc2\xa7"
      "4.2); head_dim %lld",
      static_cast<long long>(a.head_dim));
  const ImVec2 size = figure_size();
  if (!await_parts(s, {&shown, diff ? &b : nullptr}, {Part::kChannelMean, Part::kChannelCv}, s.sel.layer, size)) return;
  const std::string key = run_key(&a) + (diff ? run_key(b.get()) : "") + "|" + std::to_string(m) + "|" +
                          std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head);
  st.fig.draw(
      key, size,
      [&] {
        return diff ? figures::channels_diff_figure(*s.a, *b, st.opt, s.sel)
                    : figures::channels_figure(a, st.opt, s.sel);
      },
      ui.fonts, ui.textures);
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      const std::int64_t ch = hit->row >= 0 ? hit->col : std::llround(hit->x);
      const std::int64_t head = hit->row >= 0 ? hit->row : s.sel.head;
      const auto* mean = a.layer_values(Part::kChannelMean, s.sel.layer);
      const auto* cv = a.layer_values(Part::kChannelCv, s.sel.layer);
      if (ch >= 0 && ch < a.head_dim && head >= 0 && head < a.n_head_kv && mean) {
        const auto idx = static_cast<std::size_t>(head * a.head_dim + ch);
        ImGui::BeginTooltip();
        ImGui::Text("KV head %lld, channel %lld", static_cast<long long>(head), static_cast<long long>(ch));
        ImGui::Text("mean %.4g   CV %.3f", (*mean)[idx], cv ? (*cv)[idx] : NAN);
        if (diff)
          if (const auto* mb = b->layer_values(Part::kChannelMean, s.sel.layer); mb && mb->size() == mean->size())
            ImGui::Text("B: mean %.4g", (*mb)[idx]);
        if (hit->row >= 0) ImGui::TextDisabled("click: select this head");
        ImGui::EndTooltip();
        if (hit->row >= 0 && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) s.sel.head = head;
      }
    }
}

}  // namespace kvscope::gui::panels
