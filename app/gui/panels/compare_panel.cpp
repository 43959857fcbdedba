// Compare: run A against one or more runs on the same prompt. A table of summary metrics with
// deltas, then the A-B figure: per-head kept-set overlap, relative metric changes, the selected
// head's kept-set difference over tokens, and kept-count difference per layer.
#include <cmath>
#include <set>

#include "../ab_mismatch.h"
#include "../run_from_record.h"
#include "../ui_util.h"
#include "budget_text.h"
#include "figures.h"
#include "identity_elide.h"
#include "panels.h"

namespace kvscope::gui::panels {
namespace {

/// +1: higher is better, -1: lower is better, 0: neither (sizes of the run, not quality).
int better_direction(const std::string& metric) {
  if (metric == "top1_agreement" || metric == "decode_tokens_per_s") return 1;
  if (metric == "mean_kl" || metric == "prefill_ms" || metric == "kv_bytes_live" || metric == "kv_bytes_allocated" ||
      metric == "side_store_bytes" || metric == "bytes_read_mean")
    return -1;
  return 0;
}

}  // namespace

void compare(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  const RunData& a = *s.a;
  if (s.others.empty()) {
    ImGui::TextDisabled("Add runs to compare from the Sessions view (\"compare\" button or right-click a run).");
    ImGui::TextDisabled(
        "Runs on the same prompt can be compared token by token; any runs can be compared by their metrics.");
    const int di = db_index(s, a.ref.db);
    if (ImGui::Button("Compare with the newest other run on the same prompt")) {
      const auto b = same_prompt_run(s, di);
      if (b >= 0)
        open_run(s, di, b, true);
      else
        s.status = "no other complete run on this prompt in " + a.ref.db;
    }
    return;
  }
  CompareState& st = s.compare;
  st.b_index = std::clamp(st.b_index, 0, static_cast<int>(s.others.size()) - 1);
  // A and B on different prompts or models, in a line each above everything (also after a new run
  // became A while B stayed).
  for (const auto& o : s.others)
    if (const AbMismatch m = ab_mismatch(a.record, o->record); m.any()) {
      ImGui::PushTextWrapPos(0);
      ImGui::TextColored({0.8f, 0.3f, 0.0f, 1}, "\xe2\x89\xa0 %s", m.line.c_str());
      ImGui::PopTextWrapPos();
    }
  // "Open in Run" of a run, after the table (it switches the view).
  const RunData* open_in_run_of = nullptr;
  // Metric table: every summary metric any run has.
  std::set<std::string> names;
  for (const auto& [n, v] : a.record.row.summary) names.insert(n);
  for (const auto& o : s.others)
    for (const auto& [n, v] : o->record.row.summary) names.insert(n);
  const int cols = 2 + static_cast<int>(s.others.size()) * 2;
  const float table_h = std::min(ImGui::GetTextLineHeightWithSpacing() * (static_cast<float>(names.size()) + 2.6f),
                                 ImGui::GetContentRegionAvail().y * 0.35f);
  if (ImGui::BeginTable(
          "cmp", cols,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit,
          {0, table_h})) {
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("metric");
    ImGui::TableSetupColumn(("A #" + std::to_string(a.ref.run)).c_str());
    for (std::size_t i = 0; i < s.others.size(); ++i) {
      ImGui::TableSetupColumn(("#" + std::to_string(s.others[i]->ref.run)).c_str());
      ImGui::TableSetupColumn("\xce\x94 vs A");
    }
    ImGui::TableHeadersRow();
    // Each run's Open in Run (its form in the Run view, to re-run it or change one field).
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextDisabled("re-run");
    ImGui::TableNextColumn();
    if (ImGui::SmallButton("Open in Run##A")) open_in_run_of = &a;
    item_tooltip("Fill the Run view from run A #" + std::to_string(a.ref.run) +
                 ": model, prompt, pipeline, budget, "
                 "capture, ...");
    for (std::size_t i = 0; i < s.others.size(); ++i) {
      ImGui::TableNextColumn();
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::SmallButton("Open in Run")) open_in_run_of = s.others[i].get();
      item_tooltip("Fill the Run view from run #" + std::to_string(s.others[i]->ref.run));
      ImGui::PopID();
      ImGui::TableNextColumn();
    }
    // Pipeline and prompt rows first. The pipelines are elided together: what they share is cut,
    // never where they differ (full text on hover).
    std::vector<std::string> specs{a.record.row.pipeline_spec.empty() ? "full cache" : a.record.row.pipeline_spec};
    for (const auto& o : s.others)
      specs.push_back(o->record.row.pipeline_spec.empty() ? "full cache" : o->record.row.pipeline_spec);
    const std::vector<std::string> shown = figures::elide_identities(specs, 36);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("pipeline");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(shown[0].c_str());
    item_tooltip(specs[0] + "\n" + a.budget_text());
    for (std::size_t i = 0; i < s.others.size(); ++i) {
      const RunData& o = *s.others[i];
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(shown[i + 1].c_str());
      item_tooltip(specs[i + 1] + "\n" + o.budget_text());
      ImGui::TableNextColumn();
      const bool same = o.record.info.prompt.tokens == a.record.info.prompt.tokens;
      if (same) {
        ImGui::TextDisabled("same prompt");
      } else {
        ImGui::TextColored({0.8f, 0.3f, 0.0f, 1}, "other prompt (%zu vs %zu tokens)",
                           a.record.info.prompt.tokens.size(), o.record.info.prompt.tokens.size());
        item_tooltip(figures::kept_diff_unavailable(a, o));
      }
    }
    // Budgets as the share each run kept (the unit each was given in, grey), and B's difference.
    const kvscope::run::KeptShare ka = a.kept_share();
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted("budget");
    item_tooltip(
        "share of the prompt's entries each KV head kept after prefill, entries per KV head, and the "
        "budget as it was given");
    auto budget_cell = [](const kvscope::run::KeptShare& k) {
      ImGui::TextUnformatted(kvscope::run::kept_text(k).c_str());
      item_tooltip(kvscope::run::budget_explanation(k));
      if (const std::string g = kvscope::run::given_text(k); !g.empty()) {
        ImGui::SameLine();
        ImGui::TextDisabled("%s", g.c_str());
      }
    };
    ImGui::TableNextColumn();
    budget_cell(ka);
    for (const auto& o : s.others) {
      const kvscope::run::KeptShare kb = o->kept_share();
      ImGui::TableNextColumn();
      budget_cell(kb);
      ImGui::TableNextColumn();
      const double da = kvscope::run::kept_sort_key(ka), db = kvscope::run::kept_sort_key(kb);
      if (!std::isfinite(da) || !std::isfinite(db))
        ImGui::TextDisabled("-");
      else if (std::abs(db - da) < 5e-4)
        ImGui::TextDisabled("same kept share");
      else
        ImGui::TextDisabled("%+.1f points kept", 100 * (db - da));
    }
    for (const auto& n : names) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(n.c_str());
      item_tooltip(metric_label(n));
      const double va = a.summary_metric(n);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_num(va, "%.4g").c_str());
      for (const auto& o : s.others) {
        const double vb = o->summary_metric(n);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_num(vb, "%.4g").c_str());
        ImGui::TableNextColumn();
        if (std::isfinite(va) && std::isfinite(vb)) {
          const double d = vb - va;
          const double rel = std::abs(va) > 1e-12 ? d / std::abs(va) : 0.0;
          // Green when B is better, red when worse (by the metric's direction), intensity up to a
          // 2x difference as Tracy's compare does; grey for metrics without a better direction.
          const int better = better_direction(n);
          const float k = 0.35f + 0.65f * static_cast<float>(std::min(1.0, std::abs(rel)));
          ImVec4 c{0.45f, 0.45f, 0.45f, 1};
          if (std::abs(d) >= 1e-15 && better != 0)
            c = (d > 0) == (better > 0) ? ImVec4{0.05f, 0.45f * k + 0.1f, 0.15f, 1}
                                        : ImVec4{0.8f * k + 0.1f, 0.1f, 0.1f, 1};
          ImGui::TextColored(c, "%+.3g (%+.0f%%)", d, 100 * rel);
        } else {
          ImGui::TextDisabled("-");
        }
      }
    }
    ImGui::EndTable();
  }
  if (open_in_run_of) {
    open_in_run(s, open_in_run_of->ref.db, open_in_run_of->ref.run, ui.catalog);
    return;
  }
  if (s.others.size() > 1) {
    // The candidates' titles elided together (they often differ only at the end); full on hover.
    std::vector<std::string> titles, ids;
    for (const auto& o : s.others) {
      titles.push_back(o->title());
      ids.push_back(titles.back().substr(("#" + std::to_string(o->ref.run)).size()));  // without "#id"
    }
    std::vector<std::string> shown = figures::elide_identities(ids, 70);
    for (std::size_t i = 0; i < shown.size(); ++i)
      shown[i] = "#" + std::to_string(s.others[i]->ref.run) + (shown[i].starts_with(" ") ? "" : " ") + shown[i];
    ImGui::SetNextItemWidth(420);
    if (ImGui::BeginCombo("B for the figure", shown[static_cast<std::size_t>(st.b_index)].c_str())) {
      for (int i = 0; i < static_cast<int>(s.others.size()); ++i) {
        if (ImGui::Selectable(shown[static_cast<std::size_t>(i)].c_str(), i == st.b_index)) st.b_index = i;
        item_tooltip(titles[static_cast<std::size_t>(i)]);
      }
      ImGui::EndCombo();
    }
    item_tooltip(titles[static_cast<std::size_t>(st.b_index)]);
  }
  const auto& b_run = s.others[static_cast<std::size_t>(st.b_index)];
  const RunData& b = *b_run;
  // Runs on different prompts or model shapes are said so in the line(s) at the top; the figure's
  // kept-set panels repeat it.
  // The per-head overlap map needs every layer's kept sets of both runs (the keep count decodes them).
  if (!await_parts(s, {&s.a, &b_run}, {Part::kKeepCount}, s.sel.layer, figure_size())) return;
  const std::string key =
      run_key(&a) + run_key(&b) + "|" + std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head);
  st.fig.draw(
      key, figure_size(), [&] { return figures::compare_figure(a, b, s.sel); }, ui.fonts, ui.textures);
  heads_map_interaction(s, st.fig, 0, [&](std::int64_t l, std::int64_t h) {
    std::string t = "layer " + std::to_string(l) + ", KV head " + std::to_string(h);
    const auto* ka = a.kept_set(l, h);
    const auto* kb = b.kept_set(l, h);
    if (ka && kb)
      t += "\nJaccard " + format_num(figures::jaccard(*ka, *kb), "%.3f") + "   A kept " + std::to_string(ka->size()) +
           ", B kept " + std::to_string(kb->size());
    return t;
  });
  outline_cell(st.fig, 0, s.sel.layer, s.sel.head, IM_COL32(255, 255, 255, 255));
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos());
        hit && hit->panel == 2 && hit->token >= 0 && hit->token < a.n_tok) {
      ImGui::BeginTooltip();
      ImGui::Text("position %lld \"%s\": A %s, B %s", static_cast<long long>(hit->token),
                  ellipsize(display_token(a.token_text[static_cast<std::size_t>(hit->token)]), 30).c_str(),
                  a.kept_at(s.sel.layer, s.sel.head, hit->token) ? "kept" : "evicted",
                  b.kept_at(s.sel.layer, s.sel.head, hit->token) ? "kept" : "evicted");
      ImGui::EndTooltip();
    }
}

}  // namespace kvscope::gui::panels
