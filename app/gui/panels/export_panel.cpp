// Export: the current view's figure as PNG, SVG, PDF or CSV through viz::export_figure (the same
// figure the view draws), and "export all figures of this run" into a folder.
#include <filesystem>

#include "../ui_util.h"
#include "figures.h"
#include "kvscope/viz/cairo_export.h"
#include "panels.h"

namespace kvscope::gui::panels {

void export_dialog(AppState& s, Ui&) {
  ExportState& ex = s.exporting;
  if (ex.open) {
    ImGui::OpenPopup("Export figures");
    ex.open = false;
  }
  if (!ImGui::BeginPopupModal("Export figures", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  namespace fs = std::filesystem;
  FigureView* fv = figure_of(s, s.view);
  const std::string run_id = s.a ? std::to_string(s.a->ref.run) : "none";
  const std::string def_base = "run" + run_id + "_" + std::string(view_name(s.view));
  ImGui::Text("Current view: %s", view_title(s.view));
  ImGui::SetNextItemWidth(420);
  input_text("folder", ex.dir);
  ImGui::SetNextItemWidth(420);
  input_text_hint("file name", def_base.c_str(), ex.base);
  const std::string base = ex.base.empty() ? def_base : ex.base;
  ImGui::BeginDisabled(!fv || !fv->valid());
  for (const char* ext : {".png", ".svg", ".pdf", ".csv"}) {
    if (ImGui::Button((std::string("Save ") + (ext + 1)).c_str())) {
      try {
        fs::create_directories(ex.dir);
        const fs::path out = fs::path(ex.dir) / (base + ext);
        viz::export_figure(fv->figure(), out, std::string(ext) == ".png" ? 2.0 : 1.0);
        ex.message = "wrote " + out.string();
      } catch (const std::exception& e) {
        ex.message = e.what();
      }
    }
    ImGui::SameLine();
  }
  ImGui::EndDisabled();
  ImGui::NewLine();
  if (!fv) ImGui::TextDisabled("(this view has no figure)");
  ImGui::Separator();
  ImGui::TextUnformatted("All figures of run A (PNG, SVG, PDF and CSV each):");
  ImGui::SetNextItemWidth(100);
  ImGui::InputInt("width", &ex.width, 0);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(100);
  ImGui::InputInt("height", &ex.height, 0);
  ex.width = std::clamp(ex.width, 320, 8000);
  ex.height = std::clamp(ex.height, 240, 8000);
  // The figures of the selected layer and the keep rate need their parts decoded (on the loader).
  bool decoded = s.a != nullptr;
  if (s.a)
    for (Part p : {Part::kKept, Part::kAttention, Part::kCos, Part::kPca, Part::kChannelMean, Part::kChannelCv,
                   Part::kKeepCount, Part::kScore}) {
      const std::int64_t l = figures::run_level(p) ? 0 : s.sel.layer;
      if (!s.a->ready(p, l)) s.loader.request(s.a, p, l), decoded = false;
    }
  ImGui::BeginDisabled(!decoded);
  if (ImGui::Button(decoded || !s.a ? "Export all figures of this run"
                                    : "Export all figures of this run (decoding...)")) {
    try {
      const fs::path dir = fs::path(ex.dir) / ("run" + run_id + "_figures");
      fs::create_directories(dir);
      int n = 0;
      for (const auto& [name, fig] : figures::all_figures(*s.a, s.b(), s.sel, ex.width, ex.height))
        for (const char* ext : {".png", ".svg", ".pdf", ".csv"}) {
          viz::export_figure(fig, dir / (name + ext));
          ++n;
        }
      ex.message = "wrote " + std::to_string(n) + " files to " + dir.string();
    } catch (const std::exception& e) {
      ex.message = e.what();
    }
  }
  ImGui::EndDisabled();
  if (!ex.message.empty()) ImGui::TextWrapped("%s", ex.message.c_str());
  if (ImGui::Button("Close")) ImGui::CloseCurrentPopup();
  ImGui::EndPopup();
}

}  // namespace kvscope::gui::panels
