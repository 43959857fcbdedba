#include "ui_util.h"

#include <cmath>
#include <cstdio>

namespace kvscope::gui {
namespace {

int resize_callback(ImGuiInputTextCallbackData* data) {
  if (data->EventFlag == ImGuiInputTextFlags_CallbackResize) {
    auto* s = static_cast<std::string*>(data->UserData);
    s->resize(static_cast<std::size_t>(data->BufTextLen));
    data->Buf = s->data();
  }
  return 0;
}

}  // namespace

bool input_text(const char* label, std::string& s, ImGuiInputTextFlags flags) {
  return ImGui::InputText(label, s.data(), s.capacity() + 1, flags | ImGuiInputTextFlags_CallbackResize,
                          resize_callback, &s);
}

bool input_text_hint(const char* label, const char* hint, std::string& s, ImGuiInputTextFlags flags) {
  return ImGui::InputTextWithHint(label, hint, s.data(), s.capacity() + 1, flags | ImGuiInputTextFlags_CallbackResize,
                                  resize_callback, &s);
}

bool input_text_multiline(const char* label, std::string& s, ImVec2 size, ImGuiInputTextFlags flags) {
  return ImGui::InputTextMultiline(label, s.data(), s.capacity() + 1, size, flags | ImGuiInputTextFlags_CallbackResize,
                                   resize_callback, &s);
}

void item_tooltip(const std::string& text) {
  if (text.empty() || !ImGui::IsItemHovered()) return;
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 32.0f);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

void help_marker(const std::string& text) {
  ImGui::SameLine();
  ImGui::TextDisabled("(?)");
  item_tooltip(text);
}

std::string format_bytes(double b) {
  if (!std::isfinite(b)) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string format_num(double v, const char* f) {
  if (!std::isfinite(v)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ellipsize(const std::string& s, std::size_t max_chars) {
  std::size_t chars = 0, i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (chars == max_chars) return s.substr(0, i) + "\xe2\x80\xa6";
    i += len;
    ++chars;
  }
  return s;
}

}  // namespace kvscope::gui
