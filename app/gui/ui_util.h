#pragma once
// Small ImGui helpers shared by the panels: std::string text inputs (imgui_stdlib is not used so
// the app does not depend on the ABI the system ImGui was built with), tooltips, number formats.
#include <cstdint>
#include <string>

#include <imgui.h>

namespace kvscope::gui {

/// ImGui::InputText over a std::string (grows as typed).
bool input_text(const char* label, std::string& s, ImGuiInputTextFlags flags = 0);
/// ImGui::InputTextWithHint over a std::string.
bool input_text_hint(const char* label, const char* hint, std::string& s, ImGuiInputTextFlags flags = 0);
/// ImGui::InputTextMultiline over a std::string.
bool input_text_multiline(const char* label, std::string& s, ImVec2 size = {0, 0}, ImGuiInputTextFlags flags = 0);
/// Tooltip with wrapped text when the last item is hovered.
void item_tooltip(const std::string& text);
/// A dimmed "(?)" that shows `text` on hover.
void help_marker(const std::string& text);
/// "1.5 KiB", "12.0 MiB", "3.2 GiB".
std::string format_bytes(double bytes);
/// printf-style double ("%.3g" by default); "-" for NaN.
std::string format_num(double v, const char* f = "%.3g");
/// Text clipped to `max_chars` UTF-8 code points with "…" (never splits a code point).
std::string ellipsize(const std::string& s, std::size_t max_chars);

}  // namespace kvscope::gui
