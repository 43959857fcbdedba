#pragma once
// An ImGui context without a window or renderer backend: fonts built, display size set, frames run
// with NewFrame/Render and a scripted mouse. For the GUI tests and the frame-time benchmark.
#include <functional>

#include <imgui.h>

#include "imgui_canvas.h"

namespace kvscope::gui {

class HeadlessImGui {
 public:
  HeadlessImGui(float width, float height);
  ~HeadlessImGui();
  HeadlessImGui(const HeadlessImGui&) = delete;
  HeadlessImGui& operator=(const HeadlessImGui&) = delete;
  const FontSet& fonts() const { return fonts_; }
  /// One frame: NewFrame, draw(), Render. `mouse` (screen px; off-screen by default), the left
  /// button held this frame when `click`, `wheel` notches turned (up > 0), shift held when `shift`.
  void frame(const std::function<void()>& draw, ImVec2 mouse = {-1e6f, -1e6f}, bool click = false, float wheel = 0,
             bool shift = false);
  /// Vertices of the last rendered frame (all draw lists).
  int vertices() const;

 private:
  ImGuiContext* ctx_ = nullptr;
  FontSet fonts_;
};

/// The app's ImGui style (light, to match the figures' white background).
void apply_style(ImGuiStyle& style);

}  // namespace kvscope::gui
