// Budgets: entries kept per layer and KV head after prefill (head-wise budgets: Ada-KV, pyramids,
// streaming heads), and per layer mean/min/max or A vs B; for a run with a "heads" stage, its head
// pattern (dense/streaming map, window per layer) from the pattern file.
#include <cmath>
#include <variant>

#include "../ui_util.h"
#include "budget_text.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void budgets(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  BudgetsState& st = s.budgets;
  const RunData& a = *s.a;
  std::int64_t total = 0, mn = -1, mx = 0;
  for (std::int64_t l = 0; l < a.n_layer; ++l)
    for (std::int64_t h = 0; h < a.n_head_kv; ++h) {
      const auto k = a.kept_count(l, h);
      total += k, mx = std::max(mx, k), mn = mn < 0 ? k : std::min(mn, k);
    }
  const double heads = static_cast<double>(std::max<std::int64_t>(1, a.n_layer * a.n_head_kv));
  // The budget as the kept share (the unit it was given in, grey), then what the kept sets hold.
  const kvscope::run::KeptShare kept = a.kept_share();
  ImGui::TextUnformatted(kvscope::run::kept_text(kept).c_str());
  item_tooltip(kvscope::run::budget_explanation(kept));
  if (const std::string given = kvscope::run::given_text(kept); !given.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("%s", given.c_str());
  }
  ImGui::SameLine(0, 0);
  ImGui::Text(": %lld entries kept over %lld KV heads of a %lld-token prompt (per head: mean %.1f, min %lld, max %lld)",
              static_cast<long long>(total), static_cast<long long>(a.n_layer * a.n_head_kv),
              static_cast<long long>(a.n_tok), total / heads, static_cast<long long>(std::max<std::int64_t>(mn, 0)),
              static_cast<long long>(mx));
  // Sliding-window layers (Mistral, Gemma 2/3): their kept count is the window, never a budget.
  std::string sliding;
  std::int64_t window = 0;
  for (std::int64_t l = 0; l < a.n_layer; ++l)
    if (a.window(l) > 0) {
      sliding += (sliding.empty() ? "" : ", ") + std::to_string(l);
      window = a.window(l);
    }
  if (!sliding.empty()) {
    ImGui::TextDisabled("sliding-window layers %s (window %lld) keep their window and are never compressed",
                        sliding.c_str(), static_cast<long long>(window));
    item_tooltip(
        "A sliding-window layer attends only to its last `window` positions, so the cache keeps exactly those "
        "(a ring) and no pipeline stage compresses them or selects in them (as kvpress does for Gemma 3). The "
        "budget applies to the full-attention layers.");
  }
  side_selector(s, st.opt.side);
  const RunData* b = s.b();
  const RunData& shown = st.opt.side == Side::kB && b ? *b : a;
  const std::string pattern = figures::head_pattern_file(shown);
  if (!pattern.empty()) {
    ImGui::SameLine();
    ImGui::Checkbox("head pattern", &st.opt.head_pattern);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("dense/streaming map and window per layer of %s", pattern.c_str());
  }
  const std::string key = run_key(&a) + run_key(b) + "|" + std::to_string(static_cast<int>(st.opt.side)) + "|" +
                          std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head) + "|" +
                          (st.opt.head_pattern ? "p" : "");
  st.fig.draw(
      key, figure_size(), [&] { return figures::budgets_figure(a, b, st.opt); }, ui.fonts, ui.textures);
  heads_map_interaction(s, st.fig, 0, [&](std::int64_t l, std::int64_t h) {
    std::string t = "layer " + std::to_string(l) + ", KV head " + std::to_string(h) + ": " +
                    std::to_string(a.kept_count(l, h)) + " kept of " + std::to_string(a.n_tok);
    if (a.window(l) > 0) t += " (sliding-window layer: its last " + std::to_string(a.window(l)) + " positions)";
    if (b && b->n_layer == a.n_layer && b->n_head_kv == a.n_head_kv)
      t += "  (B: " + std::to_string(b->kept_count(l, h)) + ")";
    return t;
  });
  outline_cell(st.fig, 0, s.sel.layer, s.sel.head, IM_COL32(255, 255, 255, 255));
  // The head pattern's map (panel 2 when the pattern file was read).
  const auto& panels = st.fig.figure().panels;
  if (panels.size() > 2 && std::holds_alternative<viz::Heatmap>(panels[2])) {
    const auto& map = std::get<viz::Heatmap>(panels[2]);
    heads_map_interaction(s, st.fig, 2, [&](std::int64_t l, std::int64_t h) {
      const std::size_t i = static_cast<std::size_t>(l * map.cols + h);
      std::string t = "layer " + std::to_string(l) + ", KV head " + std::to_string(h) + " of the pattern: ";
      if (i >= map.values.size() || std::isnan(map.values[i])) return t + "not in the pattern";
      t += map.mask[i] ? "dense" : "streaming";
      t += ", keeps " + std::to_string(static_cast<long long>(map.values[i])) + " of " + std::to_string(shown.n_tok) +
           " entries";
      if (l < shown.n_layer && h < shown.n_head_kv) t += " (run: " + std::to_string(shown.kept_count(l, h)) + " kept)";
      return t;
    });
    outline_cell(st.fig, 2, s.sel.layer, s.sel.head, IM_COL32(255, 255, 255, 255));
  }
}

}  // namespace kvscope::gui::panels
