// Fidelity: per decode step KL(full || compressed), top-1 agreement and bytes read of run A and the
// compare runs, overlaid; hovering a step names each run's token and the full cache's top-1 with
// their probabilities. Below, one run's output beside the full cache's top-1 at each step
// (teacher-forced on that run's prefix): a box per step, the steps where they differ in the A - B
// colours, rows wrapped once per width and drawn with ImGuiListClipper (long outputs stay fluent).
// The hovered or clicked step is marked in the plot and in both texts.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "../ui_util.h"
#include "figures.h"
#include "kvscope/viz/colormap.h"
#include "panels.h"

namespace kvscope::gui::panels {
namespace {

constexpr float kPadX = 3, kPadY = 1, kGapX = 2, kGapY = 3, kMidGap = 16;
constexpr viz::Color kAgreeColor = viz::Color::hex(0xe6e6e6);
constexpr ImU32 kSelectedInk = IM_COL32(220, 30, 30, 255);
constexpr ImU32 kHoveredInk = IM_COL32(20, 20, 20, 255);

/// The per-step tokens of `r`, read once per run.
const FidelityTokens& tokens_of(AppState& s, const RunData& r) {
  auto& cache = s.fidelity.tokens;
  const std::string key = run_key(&r);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::string why;
    const figures::TokenText text = s.tokenizers.token_text(r.record.row.model_path, r.ref.db, &why);
    it = cache.emplace(key, fidelity_tokens(r, text)).first;
  }
  return it->second;
}

std::string quoted(const std::string& text) {
  std::string q(1, '"');
  q += ellipsize(display_token(text), 40);
  q += '"';
  return q;
}

/// Tooltip lines of run `r` at `step`: the step metrics, then its token and the full cache's top-1.
void step_lines(const RunData& r, const FidelityTokens& t, std::int64_t step) {
  auto val = [&](const char* n) {
    auto it = r.steps.find(n);
    return it != r.steps.end() && step >= 0 && step < static_cast<std::int64_t>(it->second.size())
               ? it->second[static_cast<std::size_t>(step)]
               : NAN;
  };
  ImGui::Text("#%lld  KL %s  top-1 %s  read %s", static_cast<long long>(r.ref.run),
              format_num(val("kl"), "%.4g").c_str(), format_num(val("top1"), "%.0f").c_str(),
              format_bytes(val("bytes_read")).c_str());
  if (t.steps.empty()) {
    ImGui::TextDisabled("    tokens not recorded (%s)", ellipsize(t.note, 70).c_str());
    return;
  }
  if (step < 0 || step >= static_cast<std::int64_t>(t.steps.size())) return;
  const FidelityStepTokens& st = t.steps[static_cast<std::size_t>(step)];
  ImGui::Text("    compressed run's token  %s  p %s%s", quoted(st.text).c_str(), format_num(st.p_token, "%.3f").c_str(),
              st.in_output ? "" : "  (not in the output: a stop token or a later turn)");
  ImGui::Text("    full cache's top-1      %s  p %s", quoted(st.full_text).c_str(),
              format_num(st.p_full_top, "%.3f").c_str());
  if (st.agree()) {
    ImGui::TextColored(ImVec4(0.0f, 0.55f, 0.35f, 1.0f), "    agree");
  } else {
    ImGui::TextColored(ImVec4(0.85f, 0.4f, 0.0f, 1.0f), "    differ: the full cache gives %s p %s",
                       quoted(st.text).c_str(), format_num(st.p_full_token, "%.3f").c_str());
  }
}

/// A token's box text: display_token, with a token of spaces only shown as middle dots.
std::string box_text(const std::string& text) {
  std::string t = display_token(text);
  if (t.empty() || t.find_first_not_of(' ') != std::string::npos) return t;
  std::string dots;
  for (std::size_t i = 0; i < t.size(); ++i) dots += "\xc2\xb7";
  return dots;
}

/// Wraps the steps of `t` into rows of `width` px (two columns of boxes).
void layout_rows(FidelityState& st, const std::string& key, const FidelityTokens& t, float width) {
  if (st.laid_key != key) {
    const std::size_t n = t.steps.size();
    st.left.resize(n), st.right.resize(n), st.box_w.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      st.left[i] = box_text(t.steps[i].text);
      st.right[i] = box_text(t.steps[i].full_text);
      st.box_w[i] =
          std::max(ImGui::CalcTextSize(st.left[i].c_str()).x, ImGui::CalcTextSize(st.right[i].c_str()).x) + 2 * kPadX;
    }
  }
  st.laid_key = key;
  st.laid_width = width;
  st.row_start.clear();
  float x = 0;
  bool break_after = true;
  for (std::size_t i = 0; i < st.box_w.size(); ++i) {
    const float w = std::min(st.box_w[i], width);
    if (break_after || x + w > width) {
      st.row_start.push_back(static_cast<std::int32_t>(i));
      x = 0;
    }
    x += w + kGapX;
    break_after = t.steps[i].text.find('\n') != std::string::npos;  // the output's own line breaks
  }
}

/// A filled swatch and its label on the current line.
void swatch(viz::Color c, const char* label) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetTextLineHeight();
  ImGui::GetWindowDrawList()->AddRectFilled({p.x, p.y + 2}, {p.x + h, p.y + h - 2}, im_color(c), 2.0f);
  ImGui::Dummy({h + 4, h});
  ImGui::SameLine();
  ImGui::TextUnformatted(label);
}

/// The texts of run `r` side by side; sets st.hovered, st.selected on a click.
void token_texts(AppState& s, const RunData& r, const FidelityTokens& t) {
  FidelityState& st = s.fidelity;
  const std::int64_t n = static_cast<std::int64_t>(t.steps.size());
  ImGui::Text("run #%lld: %lld of %lld steps differ", static_cast<long long>(r.ref.run),
              static_cast<long long>(t.differ), static_cast<long long>(n));
  ImGui::SameLine(0, 24);
  swatch(figures::kOnlyAColor, "differ: the compressed run's token");
  ImGui::SameLine(0, 16);
  swatch(figures::kOnlyBColor, "differ: the full cache's top-1");
  ImGui::SameLine(0, 16);
  swatch(kAgreeColor, "same token");
  if (!r.tokens_from_tokenizer) {
    ImGui::SameLine(0, 16);
    ImGui::TextDisabled("token ids shown (%s)", ellipsize(r.tokenizer_note, 50).c_str());
  }
  // The selected step in words, so it reads without hovering.
  if (st.selected >= 0 && st.selected < n) {
    const FidelityStepTokens& x = t.steps[static_cast<std::size_t>(st.selected)];
    ImGui::TextColored(ImVec4(0.86f, 0.12f, 0.12f, 1.0f), "step %lld", static_cast<long long>(st.selected));
    ImGui::SameLine();
    ImGui::Text("KL %s   compressed run: %s p %s   full cache's top-1: %s p %s%s%s%s", format_num(x.kl, "%.3g").c_str(),
                quoted(x.text).c_str(), format_num(x.p_token, "%.3f").c_str(), quoted(x.full_text).c_str(),
                format_num(x.p_full_top, "%.3f").c_str(),
                x.agree() ? "   (agree)" : "   (differ; the full cache gives ", x.agree() ? "" : quoted(x.text).c_str(),
                x.agree() ? "" : (" p " + format_num(x.p_full_token, "%.3f") + ")").c_str());
  } else {
    ImGui::TextDisabled("hover a step in the plot or the texts; click to select it");
  }
  const float avail = ImGui::GetContentRegionAvail().x;
  const ImGuiStyle& style = ImGui::GetStyle();
  const float col = std::max(40.0f, (avail - kMidGap - 2 * style.WindowPadding.x - style.ScrollbarSize) / 2);
  {
    const float x0 = ImGui::GetCursorPosX();
    ImGui::TextUnformatted(("compressed run #" + std::to_string(r.ref.run) + "'s output").c_str());
    ImGui::SameLine(x0 + style.WindowPadding.x + col + kMidGap);
    ImGui::TextUnformatted("full cache's top-1 at each step (given the compressed run's prefix)");
  }

  ImGui::BeginChild("fidelity_tokens", ImGui::GetContentRegionAvail(), true);
  const std::string key = run_key(&r);
  if (st.laid_key != key || std::abs(st.laid_width - col) > 0.5f) layout_rows(st, key, t, col);
  const float line = ImGui::GetTextLineHeight() + 2 * kPadY;
  const float pitch = line + kGapY;
  auto row_of = [&](std::int64_t step) {
    auto it = std::upper_bound(st.row_start.begin(), st.row_start.end(), static_cast<std::int32_t>(step));
    return std::max<std::int64_t>(0, (it - st.row_start.begin()) - 1);
  };
  if (st.scroll_to >= 0 && st.scroll_to < n) {
    const float y = static_cast<float>(row_of(st.scroll_to)) * pitch;
    ImGui::SetScrollY(std::max(0.0f, y - ImGui::GetWindowHeight() * 0.4f));
  }
  st.scroll_to = -1;
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, {0, 0});
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 mouse = ImGui::GetMousePos();
  const bool list_hovered = ImGui::IsWindowHovered();
  const std::int64_t marked = st.hovered;  // hovered in the plot this frame
  std::int64_t hovered = -1;
  auto box = [&](ImVec2 b0, float w, const std::string& text, viz::Color c, std::int64_t i) {
    const ImVec2 b1{b0.x + w, b0.y + line};
    dl->AddRectFilled(b0, b1, im_color(c), 2.0f);
    const ImU32 ink = viz::luminance(c) < 0.45 ? IM_COL32(255, 255, 255, 255) : IM_COL32(20, 20, 20, 255);
    const ImVec4 clip{b0.x, b0.y, b1.x, b1.y};
    dl->AddText(nullptr, 0.0f, {b0.x + kPadX, b0.y + kPadY}, ink, text.c_str(), text.c_str() + text.size(), 0.0f,
                &clip);
    if (i == st.selected) dl->AddRect({b0.x - 1, b0.y - 1}, {b1.x + 1, b1.y + 1}, kSelectedInk, 2.0f, 0, 2.0f);
    if (i == marked && i != st.selected)
      dl->AddRect({b0.x - 1, b0.y - 1}, {b1.x + 1, b1.y + 1}, kHoveredInk, 2.0f, 0, 1.5f);
    if (list_hovered && mouse.x >= b0.x && mouse.x < b1.x && mouse.y >= b0.y && mouse.y < b1.y) hovered = i;
  };
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(st.row_start.size()), pitch);
  while (clipper.Step()) {
    for (int rw = clipper.DisplayStart; rw < clipper.DisplayEnd; ++rw) {
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const std::int64_t first = st.row_start[static_cast<std::size_t>(rw)];
      const std::int64_t end =
          rw + 1 < static_cast<int>(st.row_start.size()) ? st.row_start[static_cast<std::size_t>(rw) + 1] : n;
      float x = 0;
      for (std::int64_t i = first; i < end; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const float w = std::min(st.box_w[k], col);
        const bool agree = t.steps[k].agree();
        box({p.x + x, p.y}, w, st.left[k], agree ? kAgreeColor : figures::kOnlyAColor, i);
        box({p.x + col + kMidGap + x, p.y}, w, st.right[k], agree ? kAgreeColor : figures::kOnlyBColor, i);
        x += w + kGapX;
      }
      ImGui::Dummy({2 * col + kMidGap, pitch});
    }
  }
  ImGui::PopStyleVar();
  // The divider between the two texts.
  const ImVec2 wp = ImGui::GetWindowPos();
  const float mid = ImGui::GetCursorStartPos().x + wp.x - ImGui::GetScrollX() + col + kMidGap / 2;
  dl->AddLine({mid, wp.y}, {mid, wp.y + ImGui::GetWindowHeight()}, ImGui::GetColorU32(ImGuiCol_Separator));
  if (hovered >= 0) {
    st.hovered = hovered;
    ImGui::BeginTooltip();
    ImGui::Text("decode step %lld", static_cast<long long>(hovered));
    step_lines(r, t, hovered);
    ImGui::TextDisabled("click: select this step");
    ImGui::EndTooltip();
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) st.selected = hovered;
  }
  ImGui::EndChild();
}

/// Vertical lines at the selected and hovered steps over every panel of the plot.
void mark_steps(const FidelityState& st) {
  if (!st.fig.valid()) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = st.fig.origin();
  for (const auto& [step, color, thick] :
       {std::tuple{st.selected, kSelectedInk, 1.5f}, std::tuple{st.hovered, IM_COL32(60, 60, 60, 200), 1.0f}}) {
    if (step < 0) continue;
    for (const viz::PanelLayout& L : st.fig.layout().panels) {
      const double x = L.x.map.to_px(static_cast<double>(step));
      if (!std::isfinite(x) || x < L.plot.x || x > L.plot.right()) continue;
      dl->AddLine({o.x + static_cast<float>(x), o.y + static_cast<float>(L.plot.y)},
                  {o.x + static_cast<float>(x), o.y + static_cast<float>(L.plot.bottom())}, color, thick);
    }
  }
}

}  // namespace

void fidelity(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  FidelityState& st = s.fidelity;
  ImGui::Checkbox("top-1 as running mean", &st.opt.running_mean);
  std::vector<const RunData*> runs = {s.a.get()};
  for (const auto& o : s.others) runs.push_back(o.get());
  std::string key = std::to_string(st.opt.running_mean);
  for (const RunData* r : runs) {
    key += '|';
    key += run_key(r);
    ImGui::SameLine();
    ImGui::TextDisabled("   #%lld: mean KL %s, top-1 %s", static_cast<long long>(r->ref.run),
                        format_num(r->summary_metric("mean_kl"), "%.4g").c_str(),
                        format_num(r->summary_metric("top1_agreement"), "%.3f").c_str());
  }
  st.text_run = std::clamp(st.text_run, 0, static_cast<int>(runs.size()) - 1);
  const RunData& shown = *runs[static_cast<std::size_t>(st.text_run)];
  const FidelityTokens& shown_tokens = tokens_of(s, shown);
  // A run opens on its step of largest KL (the spike to explain first).
  if (const std::string shown_key = run_key(&shown); st.selected_for != shown_key) {
    st.selected_for = shown_key;
    st.selected = -1;
    double worst = -1;
    for (std::size_t i = 0; i < shown_tokens.steps.size(); ++i)
      if (const double kl = shown_tokens.steps[i].kl; std::isfinite(kl) && kl > worst) worst = kl, st.selected = i;
    st.scroll_to = st.selected;
  }
  if (st.selected >= static_cast<std::int64_t>(shown_tokens.steps.size())) st.selected = -1;

  // The texts take the lower part of the view; a run without tokens only a line saying why.
  const float avail_h = ImGui::GetContentRegionAvail().y;
  const float line_h = ImGui::GetFrameHeightWithSpacing();
  constexpr float kMinFigure = 380;  // three line panels stay readable
  const float texts_h =
      shown_tokens.steps.empty() ? 2 * line_h : std::max(5 * line_h, std::min(0.42f * avail_h, avail_h - kMinFigure));
  st.fig.draw(
      key, figure_size(texts_h), [&] { return figures::fidelity_figure(runs, st.opt); }, ui.fonts, ui.textures);
  st.hovered = -1;
  if (ImGui::IsItemHovered())
    if (const auto hit = st.fig.hit(ImGui::GetMousePos())) {
      const auto step = std::llround(hit->x);
      st.hovered = step;
      ImGui::BeginTooltip();
      ImGui::Text("decode step %lld", static_cast<long long>(step));
      for (const RunData* r : runs) step_lines(*r, tokens_of(s, *r), step);
      ImGui::TextDisabled("click: select this step in the texts below");
      ImGui::EndTooltip();
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left) && step >= 0 &&
          step < static_cast<long long>(shown_tokens.steps.size()))
        st.selected = st.scroll_to = step;
    }

  if (runs.size() > 1) {  // whose texts
    ImGui::SetNextItemWidth(260);
    const std::string label = std::string("texts of #").append(std::to_string(shown.ref.run));
    if (ImGui::BeginCombo("##fidelity_text_run", label.c_str())) {
      for (std::size_t i = 0; i < runs.size(); ++i)
        if (ImGui::Selectable(ellipsize(runs[i]->title(), 60).c_str(), static_cast<int>(i) == st.text_run))
          st.text_run = static_cast<int>(i);
      ImGui::EndCombo();
    }
    ImGui::SameLine();
  }
  if (shown_tokens.steps.empty())
    ImGui::TextDisabled("%s", shown_tokens.note.c_str());
  else
    token_texts(s, shown, shown_tokens);
  mark_steps(st);
}

}  // namespace kvscope::gui::panels
