// The Selection view's step section: for the selected layer / KV head of a run with a timeline and
// a decode-time selection policy, a step control (the step is shared with the Timeline view) and
// the step figure (selection_steps_figure.h): the head's live entries at that step coloured hit /
// selected only / missed / live against the exact top-k, and its recall per step. Hover names the
// position, token, rank, page and state; clicking an entry selects its token, clicking the recall
// plot moves to that step. The classification is computed once per (run, layer, head, step).
#include <algorithm>
#include <cmath>
#include <variant>

#include "../ui_util.h"
#include "panels.h"

namespace kvscope::gui::panels {
namespace {

using figures::SelectionStep;
using figures::SelectionStepCell;

/// Tooltip of strip ranks [r0, r1) at the step of `st`.
void strip_tooltip(const RunData& a, const Timeline& t, const SelectionStep& st, std::int64_t r0, std::int64_t r1) {
  ImGui::BeginTooltip();
  if (r1 - r0 == 1) {
    const std::int64_t p = st.live[static_cast<std::size_t>(r0)];
    const std::string* text = a.position_text(p);
    ImGui::Text("position %lld: %s", static_cast<long long>(p),
                text ? ("\"" + ellipsize(display_token(*text), 40) + "\"").c_str() : "(a later turn's token)");
    ImGui::Text("rank %lld of %zu live entries; page %lld (pages of %lld ranks)", static_cast<long long>(r0),
                st.live.size(), static_cast<long long>(r0 / t.page), static_cast<long long>(t.page));
    ImGui::Text("entered at step %d", t.entered_at[static_cast<std::size_t>(p)]);
    const auto c = static_cast<SelectionStepCell>(st.cell[static_cast<std::size_t>(r0)]);
    if (!st.selected)
      ImGui::TextDisabled("no selection recorded at this step");
    else if (st.exact)
      ImGui::Text("%s", figures::selection_step_label(c));
    else
      ImGui::Text("%s (per %s; no exact top-k recorded for this head)",
                  c == figures::kStepLive ? "not selected" : "selected", st.per_token ? "token" : "page");
    if (p < a.n_tok) ImGui::TextDisabled("click: select this token in the other views");
  } else {
    std::int64_t n[4] = {0, 0, 0, 0};
    for (std::int64_t r = r0; r < r1; ++r) ++n[st.cell[static_cast<std::size_t>(r)] % 4];
    ImGui::Text("ranks %lld .. %lld (positions %lld .. %lld)", static_cast<long long>(r0),
                static_cast<long long>(r1 - 1), static_cast<long long>(st.live[static_cast<std::size_t>(r0)]),
                static_cast<long long>(st.live[static_cast<std::size_t>(r1 - 1)]));
    if (st.exact)
      ImGui::Text("%lld hit, %lld missed, %lld selected only, %lld live not selected", static_cast<long long>(n[2]),
                  static_cast<long long>(n[3]), static_cast<long long>(n[1]), static_cast<long long>(n[0]));
    else
      ImGui::Text("%lld selected, %lld not selected", static_cast<long long>(n[1]), static_cast<long long>(n[0]));
    ImGui::TextDisabled("zoomed out: a pixel shows missed > hit > selected > live");
  }
  ImGui::EndTooltip();
}

/// The step of (layer, head) whose recall is lowest, or -1 when none is recorded.
std::int64_t lowest_recall_step(const Timeline& t, std::int64_t layer, std::int64_t head) {
  std::int64_t best = -1;
  float low = 2.0f;
  for (std::int64_t s = 1; s <= t.n_steps; ++s)
    if (const float r = t.recall_at(s, layer, head); !std::isnan(r) && r < low) low = r, best = s;
  return best;
}

}  // namespace

bool selection_steps(AppState& s, Ui& ui, float height) {
  const RunData& a = *s.a;
  if (!a.has_timeline) return false;
  const float width = ImGui::GetContentRegionAvail().x;
  if (!await_parts(s, {&s.a}, {Part::kTimeline}, 0, {width, height})) return true;
  const Timeline* t = a.timeline();
  if (!t || t->n_layer < 1 || t->n_head_kv < 1) {
    ImGui::TextDisabled("The run's timeline could not be read.");
    return true;
  }
  if ((t->pages.empty() && t->tokens.empty()) || t->n_steps < 1) {
    ImGui::TextDisabled(
        "Run #%lld recorded no decode-time selection (HSA, Quest, SparQ, Exact-TopK): no step to compare with "
        "the exact top-k.",
        static_cast<long long>(a.ref.run));
    return true;
  }
  const std::int64_t layer = std::clamp<std::int64_t>(s.sel.layer, 0, t->n_layer - 1);
  const std::int64_t head = std::clamp<std::int64_t>(s.sel.head, 0, t->n_head_kv - 1);
  std::int64_t& step = s.timeline.step;
  if (step < 1 || step > t->n_steps) step = t->n_steps;

  // The step control.
  const std::int64_t first = 1, last = t->n_steps;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Decode step");
  ImGui::SameLine();
  ImGui::PushButtonRepeat(true);
  if (ImGui::ArrowButton("##step_prev", ImGuiDir_Left)) step = std::max(first, step - 1);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(std::min(420.0f, width * 0.35f));
  ImGui::SliderScalar("##step", ImGuiDataType_S64, &step, &first, &last, "%lld");
  ImGui::SameLine();
  if (ImGui::ArrowButton("##step_next", ImGuiDir_Right)) step = std::min(last, step + 1);
  ImGui::PopButtonRepeat();
  step = std::clamp(step, first, last);
  const std::int64_t low = lowest_recall_step(*t, layer, head);
  if (low > 0) {
    ImGui::SameLine();
    if (ImGui::Button("lowest recall")) step = low;
    item_tooltip("go to the step at which this head's selection held the least of the exact top-k (step " +
                 std::to_string(low) + ")");
  }
  ImGui::SameLine();
  ImGui::TextDisabled("(shared with the Timeline view: click a step there)");

  // The step's classification, once per (run, layer, head, step).
  SelectionState& st = s.selection;
  const std::string key =
      run_key(&a) + "|" + std::to_string(layer) + "," + std::to_string(head) + "," + std::to_string(step);
  if (st.step_key != key) {
    st.step = figures::selection_step(*t, layer, head, step);
    st.step_key = key;
  }
  const ImVec2 size{width, std::max(160.0f, height - ImGui::GetFrameHeightWithSpacing())};
  st.steps.draw(
      key, size,
      [&] {
        return figures::selection_steps_figure(*t, st.step, "run #" + std::to_string(a.ref.run), a.caption(),
                                               static_cast<int>(size.x));
      },
      ui.fonts, ui.textures);
  if (!ImGui::IsItemHovered()) return true;
  const auto hit = st.steps.hit(ImGui::GetMousePos());
  if (!hit || hit->panel < 0 || hit->panel >= static_cast<int>(st.steps.figure().panels.size())) return true;
  const viz::Panel& panel = st.steps.figure().panels[static_cast<std::size_t>(hit->panel)];
  if (const auto* h = std::get_if<viz::Heatmap>(&panel); h && hit->col >= 0 && !st.step.live.empty()) {
    const figures::StripBins bins = figures::strip_bins(static_cast<std::int64_t>(st.step.live.size()), h->cols);
    const std::int64_t r0 = bins.first_rank(hit->col), r1 = std::min(bins.n, bins.first_rank(hit->col + 1));
    if (r0 >= r1) return true;
    strip_tooltip(a, *t, st.step, r0, r1);
    const std::int64_t p = st.step.live[static_cast<std::size_t>(r0)];
    if (r1 - r0 == 1 && p < a.n_tok && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) s.sel.token = p;
  } else if (std::holds_alternative<viz::LinePlot>(panel) && low > 0) {
    const std::int64_t at = std::clamp<std::int64_t>(std::llround(hit->x), first, last);
    const float r = t->recall_at(at, layer, head);
    if (std::isnan(r))
      ImGui::SetTooltip("step %lld: no recall (no selection, or a dense step)", static_cast<long long>(at));
    else
      ImGui::SetTooltip("step %lld: recall %.3f\nclick to show this step", static_cast<long long>(at), r);
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) step = at;
  }
  return true;
}

}  // namespace kvscope::gui::panels
