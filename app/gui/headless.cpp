#include "headless.h"

namespace kvscope::gui {

void apply_style(ImGuiStyle& style) {
  ImGui::StyleColorsLight(&style);
  style.WindowRounding = 0;
  style.FrameRounding = 3;
  style.GrabRounding = 3;
  style.TabRounding = 3;
  style.FramePadding = {6, 3};
  style.ItemSpacing = {8, 5};
  style.FrameBorderSize = 1;
  style.Colors[ImGuiCol_WindowBg] = {0.98f, 0.98f, 0.98f, 1};
  style.Colors[ImGuiCol_ChildBg] = {1, 1, 1, 0};
  style.Colors[ImGuiCol_TableRowBgAlt] = {0.93f, 0.94f, 0.96f, 1};
  style.Colors[ImGuiCol_Border] = {0.72f, 0.74f, 0.78f, 0.8f};
}

HeadlessImGui::HeadlessImGui(float width, float height) {
  IMGUI_CHECKVERSION();
  ctx_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.DisplaySize = {width, height};
  io.DeltaTime = 1.0f / 60.0f;
  // As the OpenGL 3.2 renderer of the app: draw lists may exceed 64K vertices (16-bit indices).
  io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
  fonts_ = load_fonts(*io.Fonts);
  io.FontDefault = fonts_.ui;
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
  io.Fonts->SetTexID(reinterpret_cast<ImTextureID>(static_cast<std::intptr_t>(1)));
  apply_style(ImGui::GetStyle());
}

HeadlessImGui::~HeadlessImGui() { ImGui::DestroyContext(ctx_); }

void HeadlessImGui::frame(const std::function<void()>& draw, ImVec2 mouse, bool click, float wheel, bool shift) {
  ImGui::SetCurrentContext(ctx_);
  ImGuiIO& io = ImGui::GetIO();
  io.DeltaTime = 1.0f / 60.0f;
  io.MousePos = mouse;
  io.MouseDown[0] = click;
  io.MouseWheel = wheel;
  io.KeyShift = shift;
  ImGui::NewFrame();
  draw();
  ImGui::Render();
}

int HeadlessImGui::vertices() const {
  const ImDrawData* d = ImGui::GetDrawData();
  return d ? d->TotalVtxCount : 0;
}

}  // namespace kvscope::gui
