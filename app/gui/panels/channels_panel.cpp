// Channels: per-channel saliency mean and CV of the selected head (head_dim x tokens is not stored:
// the capture keeps channel_mean and channel_cv), and a KV heads x channels map of the layer.
#include <cmath>

#include "../figures.h"
#include "../ui_util.h"
#include "panels.h"

namespace kvscope::gui::panels {

void channels(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  ChannelsState& st = s.channels;
  const RunData& a = *s.a;
  int m = st.opt.cv ? 1 : 0;
  ImGui::TextUnformatted("map:");
  ImGui::SameLine();
  ImGui::RadioButton("mean saliency", &m, 0);
  ImGui::SameLine();
  ImGui::RadioButton("CV over tokens", &m, 1);
  st.opt.cv = m == 1;
  ImGui::SameLine();
  ImGui::TextDisabled("   w = |q\xcc\x84_j|\xc2\xb7|k_tj| (SPARK \xc2\xa7" "4.2); head_dim %lld", static_cast<long long>(a.head_dim));
  const std::string key = run_key(&a) + "|" + std::to_string(m) + "|" + std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head);
  st.fig.draw(key, figure_size(), [&] { return channels_figure(a, st.opt, s.sel); }, ui.fonts, ui.textures);
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      const std::int64_t ch = hit->row >= 0 ? hit->col : std::llround(hit->x);
      const std::int64_t head = hit->row >= 0 ? hit->row : s.sel.head;
      if (ch >= 0 && ch < a.head_dim && s.sel.layer < static_cast<std::int64_t>(a.channel_mean.size()) &&
          !a.channel_mean[static_cast<std::size_t>(s.sel.layer)].empty()) {
        const auto idx = static_cast<std::size_t>(head * a.head_dim + ch);
        ImGui::BeginTooltip();
        ImGui::Text("KV head %lld, channel %lld", static_cast<long long>(head), static_cast<long long>(ch));
        ImGui::Text("mean %.4g   CV %.3f", a.channel_mean[static_cast<std::size_t>(s.sel.layer)][idx],
                    a.channel_cv[static_cast<std::size_t>(s.sel.layer)].empty() ? NAN : a.channel_cv[static_cast<std::size_t>(s.sel.layer)][idx]);
        if (hit->row >= 0) ImGui::TextDisabled("click: select this head");
        ImGui::EndTooltip();
        if (hit->row >= 0 && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) s.sel.head = head;
      }
    }
}

}  // namespace kvscope::gui::panels
