// Selection: everything about the selected layer / KV head (and token): its metrics with their
// percentile among all heads, its kept set, bookmarks, and stored blobs the other views do not show;
// for a run with a timeline, what the head's decode-time selection read at a step against the
// exact top-k (selection_steps.cpp).
#include <algorithm>
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui::panels {

void selection(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  const RunData& a = *s.a;
  const Selection& sel = s.sel;
  const float table_w = 430;
  ImGui::BeginChild("selection_details", {table_w, 0}, false);
  ImGui::Text("Layer %lld, KV head %lld", static_cast<long long>(sel.layer), static_cast<long long>(sel.head));
  if (a.n_head_kv > 0 && a.n_head > 0)
    ImGui::TextDisabled("query heads %lld..%lld (GQA group of %lld)",
                        static_cast<long long>(sel.head * (a.n_head / a.n_head_kv)),
                        static_cast<long long>((sel.head + 1) * (a.n_head / a.n_head_kv) - 1),
                        static_cast<long long>(a.n_head / a.n_head_kv));
  if (ImGui::BeginTable("metrics", 3,
                        ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("metric");
    ImGui::TableSetupColumn("value");
    ImGui::TableSetupColumn("all heads: min / median / max");
    ImGui::TableHeadersRow();
    for (int m = 0; m < static_cast<int>(heads_metric_names().size()); ++m) {
      auto v = figures::heads_metric_values(a, m);
      const std::size_t idx = static_cast<std::size_t>(sel.layer * a.n_head_kv + sel.head);
      const double x = idx < v.size() ? v[idx] : NAN;
      std::vector<float> f;
      for (float y : v)
        if (std::isfinite(y)) f.push_back(y);
      std::sort(f.begin(), f.end());
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(heads_metric_names()[static_cast<std::size_t>(m)]);
      item_tooltip(metric_label(heads_metric_names()[static_cast<std::size_t>(m)]));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_num(x, "%.4g").c_str());
      ImGui::TableNextColumn();
      if (!f.empty())
        ImGui::Text("%.3g / %.3g / %.3g", f.front(), f[f.size() / 2], f.back());
      else
        ImGui::TextDisabled("-");
    }
    ImGui::EndTable();
  }
  if (const auto* kept = a.kept_set(sel.layer, sel.head)) {
    const auto& k = *kept;
    std::int64_t sinks = 0, recent = 0;
    for (std::int64_t p : k) sinks += p < 4, recent += p >= a.n_tok - 64;
    ImGui::Separator();
    ImGui::Text("kept %zu of %lld prompt tokens", k.size(), static_cast<long long>(a.n_tok));
    ImGui::Text("first 4 (sinks): %lld kept; last 64 (window): %lld kept", static_cast<long long>(sinks),
                static_cast<long long>(recent));
    if (!k.empty())
      ImGui::Text("span %lld .. %lld", static_cast<long long>(k.front()), static_cast<long long>(k.back()));
  }
  if (sel.token >= 0 && sel.token < a.n_tok) {
    ImGui::Separator();
    ImGui::Text("token %lld: \"%s\" (id %d)", static_cast<long long>(sel.token),
                ellipsize(display_token(a.token_text[static_cast<std::size_t>(sel.token)]), 40).c_str(),
                a.record.info.prompt.tokens[static_cast<std::size_t>(sel.token)]);
    ImGui::Text("kept here: %s", a.kept_at(sel.layer, sel.head, sel.token) ? "yes" : "no");
    if (const auto* kc = a.keep_count()) {
      ImGui::SameLine();
      ImGui::Text("; by %u of %lld heads overall", (*kc)[static_cast<std::size_t>(sel.token)],
                  static_cast<long long>(a.n_layer * a.n_head_kv));
    } else {
      s.loader.request(s.a, Part::kKeepCount, 0);
    }
  }
  const auto& bms = a.record.bookmarks;
  if (!bms.empty()) {
    ImGui::Separator();
    ImGui::TextUnformatted("Bookmarks of this run (as loaded):");
    for (const auto& b : bms) {
      ImGui::PushID(static_cast<int>(b.id));
      if (ImGui::SmallButton("go")) {
        if (b.layer >= 0) s.sel.layer = b.layer;
        if (b.head >= 0) s.sel.head = b.head;
        s.sel.token = b.token;
      }
      ImGui::SameLine();
      ImGui::Text("%s  (L%lld H%lld%s)", b.label.c_str(), static_cast<long long>(b.layer),
                  static_cast<long long>(b.head), b.token >= 0 ? (" t" + std::to_string(b.token)).c_str() : "");
      ImGui::PopID();
    }
  }
  if (!a.other_blobs.empty()) {
    ImGui::Separator();
    ImGui::TextUnformatted("Other stored blobs:");
    for (const auto& b : a.other_blobs) {
      std::string shape;
      for (auto d : b.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
      ImGui::BulletText("%s  L%lld H%lld  [%s]  %s", b.name.c_str(), static_cast<long long>(b.layer),
                        static_cast<long long>(b.head), shape.c_str(),
                        format_bytes(static_cast<double>(b.raw_bytes)).c_str());
    }
  }
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginGroup();
  if (auto it = a.steps.find("selection_recall"); it != a.steps.end()) {
    double sum = 0;
    std::int64_t n = 0;
    for (double v : it->second)
      if (std::isfinite(v)) sum += v, ++n;
    ImGui::TextDisabled("decode-time selection recall: mean %.3f over %lld steps",
                        n ? sum / static_cast<double>(n) : NAN, static_cast<long long>(n));
  }
  if (a.has_timeline) selection_steps(s, ui, std::max(300.0f, ImGui::GetContentRegionAvail().y * 0.55f));
  if (await_parts(s, {&s.a}, {Part::kKept}, sel.layer, figure_size())) {
    const std::string key = run_key(&a) + "|" + std::to_string(sel.layer) + "," + std::to_string(sel.head) + "," +
                            std::to_string(sel.token);
    s.selection.fig.draw(
        key, figure_size(), [&] { return figures::selection_figure(a, sel); }, ui.fonts, ui.textures);
  }
  ImGui::EndGroup();
}

}  // namespace kvscope::gui::panels
