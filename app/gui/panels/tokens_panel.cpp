// Tokens: the prompt as text boxes coloured kept/evicted for the selected head, by keep rate over
// all heads, or by the selected head's attention. Rows are wrapped once per width and drawn with
// ImGuiListClipper, so only visible rows cost anything (32K-token prompts stay fluent). A bar strip
// overview on top (the exported figure) jumps to a position when clicked. In a compare the view
// shows A, B, or A - B: each token coloured by which run kept it (both, only A, only B, neither).
#include <algorithm>
#include <cmath>

#include "../ui_util.h"
#include "figures.h"
#include "kvscope/viz/colormap.h"
#include "panels.h"
#include "score_rank.h"

namespace kvscope::gui::panels {
namespace {

constexpr float kPadX = 3, kPadY = 1, kGapX = 2, kGapY = 3;

void layout_rows(TokensState& st, const std::shared_ptr<const RunData>& run, float width) {
  const RunData& a = *run;
  if (st.laid_for != run) {
    st.shown.resize(a.token_text.size());
    st.token_w.resize(a.token_text.size());
    for (std::size_t i = 0; i < a.token_text.size(); ++i) {
      st.shown[i] = display_token(a.token_text[i]);
      st.token_w[i] = ImGui::CalcTextSize(st.shown[i].c_str()).x + 2 * kPadX;
    }
  }
  st.laid_for = run;
  st.laid_width = width;
  st.row_start.clear();
  float x = 0;
  bool break_after = true;
  for (std::size_t i = 0; i < st.token_w.size(); ++i) {
    const float w = std::min(st.token_w[i], width);
    if (break_after || x + w > width) {
      st.row_start.push_back(static_cast<std::int32_t>(i));
      x = 0;
    }
    x += w + kGapX;
    break_after = a.token_text[i].find('\n') != std::string::npos;
  }
}

std::int64_t row_of(const TokensState& st, std::int64_t token) {
  auto it = std::upper_bound(st.row_start.begin(), st.row_start.end(), static_cast<std::int32_t>(token));
  return std::max<std::int64_t>(0, (it - st.row_start.begin()) - 1);
}

// Text in the needle colour (the key of the needle outlines).
ImVec4 needle_ink() { return ImGui::ColorConvertU32ToFloat4(im_color(figures::kNeedleColor)); }

bool in_needle(const RunData& a, std::int64_t i) {
  for (const auto& [lo, hi] : a.needles)
    if (i >= lo && i < hi) return true;
  return false;
}

void token_tooltip(const AppState& s, const RunData& a, std::int64_t i) {
  const Selection& sel = s.sel;
  ImGui::BeginTooltip();
  ImGui::Text("position %lld   id %d", static_cast<long long>(i),
              a.record.info.prompt.tokens[static_cast<std::size_t>(i)]);
  ImGui::TextUnformatted(("\"" + display_token(a.token_text[static_cast<std::size_t>(i)]) + "\"").c_str());
  if (in_needle(a, i)) ImGui::TextColored(needle_ink(), "needle token");
  ImGui::Separator();
  ImGui::Text("L%lld H%lld: %s", static_cast<long long>(sel.layer), static_cast<long long>(sel.head),
              a.kept_at(sel.layer, sel.head, i) ? "kept" : "evicted");
  if (const RunData* b = s.b(); b && s.tokens.opt.side == Side::kDiff && i < b->n_tok)
    ImGui::Text("A %s, B %s", s.a->kept_at(sel.layer, sel.head, i) ? "kept" : "evicted",
                b->kept_at(sel.layer, sel.head, i) ? "kept" : "evicted");
  score_tooltip_lines(a, sel.layer, sel.head, i);
  if (const float* att = a.attention_row(sel.layer, sel.head))
    ImGui::TextDisabled("window-mean attention %.3g", att[i]);
  if (const float* cos = a.cos_row(sel.layer, sel.head)) ImGui::Text("cosine to mean key %.3f", cos[i]);
  if (a.has_kept && sel.layer >= 0 && sel.layer < a.n_layer) {
    std::string heads;
    std::int64_t n = 0;
    for (std::int64_t h = 0; h < a.n_head_kv; ++h)
      if (a.kept_at(sel.layer, h, i)) heads += (heads.empty() ? "" : " ") + std::to_string(h), ++n;
    ImGui::Text("layer %lld: kept by %lld of %lld KV heads%s%s", static_cast<long long>(sel.layer),
                static_cast<long long>(n), static_cast<long long>(a.n_head_kv), n ? ": " : "",
                ellipsize(heads, 80).c_str());
    const auto total = a.n_layer * a.n_head_kv;
    if (const auto* kc = a.keep_count()) {
      const auto k = (*kc)[static_cast<std::size_t>(i)];
      ImGui::Text("all layers: kept by %u of %lld heads (%.0f%%)", k, static_cast<long long>(total),
                  total ? 100.0 * k / static_cast<double>(total) : 0.0);
    }
  }
  ImGui::TextDisabled("click: select this token");
  ImGui::EndTooltip();
}

}  // namespace

void tokens(AppState& s, Ui& ui) {
  if (no_run(s)) return;
  TokensState& st = s.tokens;
  int mode = static_cast<int>(st.opt.coloring);
  ImGui::RadioButton("kept by selected head", &mode, static_cast<int>(TokenColoring::kKeptSelectedHead));
  ImGui::SameLine();
  ImGui::RadioButton("keep rate over all heads", &mode, static_cast<int>(TokenColoring::kKeepRate));
  ImGui::SameLine();
  ImGui::RadioButton("attention of selected head", &mode, static_cast<int>(TokenColoring::kAttention));
  ImGui::SameLine();
  ImGui::BeginDisabled(!s.a->has_score);
  ImGui::RadioButton("decisive score of selected head", &mode, static_cast<int>(TokenColoring::kScore));
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", s.a->has_score ? "what the budget stage ranked: the pipeline's own score per token"
                                           : "this run recorded no decisive score (capture full, a scoring stage)");
  st.opt.coloring = static_cast<TokenColoring>(mode);
  side_selector(s, st.opt.side);
  const auto& shown = shown_run(s, st.opt.side);
  const RunData& a = *shown;
  const bool diff = st.opt.side == Side::kDiff;
  const auto b = s.b_run();
  ImGui::SameLine();
  ImGui::SetNextItemWidth(110);
  ImS64 pos = st.goto_pos;
  if (ImGui::InputScalar("##goto", ImGuiDataType_S64, &pos, nullptr, nullptr, "%lld",
                         ImGuiInputTextFlags_EnterReturnsTrue)) {
    st.goto_pos = std::clamp<ImS64>(pos, 0, std::max<std::int64_t>(0, a.n_tok - 1));
    st.scroll_to = st.goto_pos;
    s.sel.token = st.goto_pos;
  } else {
    st.goto_pos = pos;
  }
  ImGui::SameLine();
  if (ImGui::Button("go to position")) {
    st.scroll_to = std::clamp<std::int64_t>(st.goto_pos, 0, std::max<std::int64_t>(0, a.n_tok - 1));
    s.sel.token = st.scroll_to;
  }
  if (!a.needles.empty()) {
    ImGui::SameLine();
    if (ImGui::Button("go to needle")) {
      st.scroll_to = s.sel.token = a.needles.front().first;
      st.goto_pos = st.scroll_to;
    }
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("select the needle's first token and scroll to it");
  }
  ImGui::SameLine();
  position_range_control(s.sel, a.n_tok);
  if (!a.tokens_from_tokenizer) {
    ImGui::SameLine();
    ImGui::TextDisabled("  token ids shown (%s)", ellipsize(a.tokenizer_note, 60).c_str());
  }
  if (a.turns.size() > 1)
    ImGui::TextDisabled("The prompt is turn 1 of %zu; the Timeline view shows each turn's positions, steps and texts.",
                        a.turns.size());

  // Overview strip: the exported figure, once the parts it colours by are decoded.
  const ImVec2 overview_size{ImGui::GetContentRegionAvail().x, a.needles.empty() ? 150.0f : 240.0f};
  const bool ready = diff ? await_parts(s, {&s.a, &b}, {Part::kKept}, s.sel.layer, overview_size)
                     : mode == static_cast<int>(TokenColoring::kKeepRate)
                         ? await_parts(s, {&shown}, {Part::kKeepCount}, s.sel.layer, overview_size)
                         : await_parts(s, {&shown}, {Part::kKept, Part::kAttention, Part::kCos, Part::kScore},
                                       s.sel.layer, overview_size);
  if (!ready) return;
  const std::string key = run_key(&a) + (diff ? run_key(b.get()) : "") + "|" + std::to_string(mode) + "|" +
                          std::to_string(s.sel.layer) + "," + std::to_string(s.sel.head) + "|" +
                          std::to_string(s.sel.pos_lo) + "-" + std::to_string(s.sel.pos_hi);
  st.overview.draw(
      key, overview_size,
      [&] { return diff ? figures::tokens_diff_figure(*s.a, *b, s.sel) : figures::tokens_figure(a, st.opt, s.sel); },
      ui.fonts, ui.textures);
  const bool overview_hovered = ImGui::IsItemHovered();
  if (!diff) position_zoom(s.sel, a.n_tok, st.overview, st.drag);
  if (overview_hovered && !(st.drag.active && st.drag.moved)) {
    if (const auto hit = st.overview.hit(ImGui::GetMousePos()); hit && hit->position >= 0 && hit->position < a.n_tok) {
      token_tooltip(s, a, hit->position);
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) st.scroll_to = s.sel.token = hit->position;
    }
  }

  // Colour of a token in the current mode: attention as log10; the decisive score as log10 when
  // every score is positive, always-kept entries at the top of the scale.
  const float* att = a.attention_row(s.sel.layer, s.sel.head);
  const float* sc = a.score_row(s.sel.layer, s.sel.head);
  float lo = 0, hi = 1;
  bool score_log = true;
  if (mode == static_cast<int>(TokenColoring::kAttention) && att) {
    lo = 1e30f, hi = -1e30f;
    for (std::int64_t i = 0; i < a.n_tok; ++i) {
      const float v = std::log10(std::max(att[i], 1e-9f));
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (!(hi > lo)) hi = lo + 1;
  } else if (mode == static_cast<int>(TokenColoring::kScore) && sc) {
    lo = 1e30f, hi = -1e30f;
    for (std::int64_t i = 0; i < a.n_tok; ++i)
      if (std::isfinite(sc[i]) && !figures::always_kept_score(sc[i])) score_log &= sc[i] > 0;
    for (std::int64_t i = 0; i < a.n_tok; ++i)
      if (std::isfinite(sc[i]) && !figures::always_kept_score(sc[i])) {
        const float v = score_log ? std::log10(std::max(sc[i], 1e-9f)) : sc[i];
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
    if (!(hi > lo)) hi = lo + 1;
  }
  const double heads = static_cast<double>(std::max<std::int64_t>(1, a.n_layer * a.n_head_kv));
  const auto* keep_count = a.keep_count();
  auto color_of = [&](std::int64_t i) -> viz::Color {
    if (diff) {
      const bool ka = s.a->kept_at(s.sel.layer, s.sel.head, i),
                 kb = i < b->n_tok && b->kept_at(s.sel.layer, s.sel.head, i);
      return ka && kb ? figures::kKeptColor
             : ka     ? figures::kOnlyAColor
             : kb     ? figures::kOnlyBColor
                      : figures::kEvictedColor;
    }
    switch (static_cast<TokenColoring>(mode)) {
      case TokenColoring::kKeptSelectedHead:
        return a.kept_at(s.sel.layer, s.sel.head, i) ? figures::kKeptColor : figures::kEvictedColor;
      case TokenColoring::kKeepRate:
        return keep_count ? viz::map("viridis", (*keep_count)[static_cast<std::size_t>(i)] / heads)
                          : figures::kEvictedColor;
      case TokenColoring::kAttention:
        if (!att) return figures::kEvictedColor;
        return viz::map("magma", (std::log10(std::max(att[i], 1e-9f)) - lo) / (hi - lo));
      case TokenColoring::kScore: {
        if (!sc || std::isnan(sc[i])) return figures::kEvictedColor;
        if (figures::always_kept_score(sc[i])) return viz::map("magma", 1.0);
        const float v = score_log ? std::log10(std::max(sc[i], 1e-9f)) : sc[i];
        return viz::map("magma", (v - lo) / (hi - lo));
      }
    }
    return figures::kEvictedColor;
  };

  const bool strike_evicted =
      !diff && a.has_kept &&
      (mode == static_cast<int>(TokenColoring::kScore) || mode == static_cast<int>(TokenColoring::kAttention));
  if (strike_evicted)
    ImGui::TextDisabled("struck through: evicted by L%lld H%lld", static_cast<long long>(s.sel.layer),
                        static_cast<long long>(s.sel.head));
  if (!a.needles.empty())  // the key of the needle outlines below
    ImGui::TextColored(needle_ink(), "outlined: %s", figures::needle_text(a, s.sel).c_str());
  ImGui::BeginChild("token_list", ImGui::GetContentRegionAvail(), true);
  const float width = ImGui::GetContentRegionAvail().x;
  if (st.laid_for != shown || std::abs(st.laid_width - width) > 0.5f) layout_rows(st, shown, width);
  const float line = ImGui::GetTextLineHeight() + 2 * kPadY;
  const float pitch = line + kGapY;
  if (st.scroll_to >= 0 && st.scroll_to < a.n_tok) {
    const float y = static_cast<float>(row_of(st, st.scroll_to)) * pitch;
    ImGui::SetScrollY(std::max(0.0f, y - ImGui::GetWindowHeight() * 0.4f));
    st.scroll_to = -1;
  }
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, {0, 0});
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 mouse = ImGui::GetMousePos();
  const bool list_hovered = ImGui::IsWindowHovered();
  std::int64_t hovered = -1;
  const ImU32 needle_col = im_color(figures::kNeedleColor);
  auto needle_tok = [&](std::int64_t i) { return !a.needles.empty() && in_needle(a, i); };
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(st.row_start.size()), pitch);
  while (clipper.Step()) {
    for (int r = clipper.DisplayStart; r < clipper.DisplayEnd; ++r) {
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const std::int64_t first = st.row_start[static_cast<std::size_t>(r)];
      const std::int64_t end =
          r + 1 < static_cast<int>(st.row_start.size()) ? st.row_start[static_cast<std::size_t>(r) + 1] : a.n_tok;
      float x = p.x;
      for (std::int64_t i = first; i < end; ++i) {
        const float w = std::min(st.token_w[static_cast<std::size_t>(i)], width);
        const ImVec2 b0{x, p.y}, b1{x + w, p.y + line};
        const viz::Color c = color_of(i);
        dl->AddRectFilled(b0, b1, im_color(c), 2.0f);
        const ImU32 ink = viz::luminance(c) < 0.45 ? IM_COL32(255, 255, 255, 255) : IM_COL32(20, 20, 20, 255);
        const std::string& t = st.shown[static_cast<std::size_t>(i)];
        const ImVec4 clip{b0.x, b0.y, b1.x, b1.y};
        dl->AddText(nullptr, 0.0f, {b0.x + kPadX, b0.y + kPadY}, ink, t.c_str(), t.c_str() + t.size(), 0.0f, &clip);
        // Colouring by a score: evicted tokens are struck through, so kept and evicted stay apart.
        if (strike_evicted && !a.kept_at(s.sel.layer, s.sel.head, i))
          dl->AddLine({b0.x + 1, 0.5f * (b0.y + b1.y)}, {b1.x - 1, 0.5f * (b0.y + b1.y)}, ink, 1.5f);
        if (needle_tok(i)) {  // outlined, with an underline that shows also on the selected token
          dl->AddRect({b0.x - 1, b0.y - 1}, {b1.x + 1, b1.y + 1}, needle_col, 2.0f, 0, 2.0f);
          dl->AddLine({b0.x, b1.y + 1.5f}, {b1.x, b1.y + 1.5f}, needle_col, 2.0f);
        }
        if (i == s.sel.token)
          dl->AddRect({b0.x - 1, b0.y - 1}, {b1.x + 1, b1.y + 1}, IM_COL32(220, 30, 30, 255), 2.0f, 0, 2.0f);
        if (list_hovered && mouse.x >= b0.x && mouse.x < b1.x && mouse.y >= b0.y && mouse.y < b1.y) hovered = i;
        x += w + kGapX;
      }
      ImGui::Dummy({width, pitch});
    }
  }
  ImGui::PopStyleVar();
  st.hovered = hovered;
  if (hovered >= 0) {
    token_tooltip(s, a, hovered);
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) s.sel.token = hovered;
  }
  ImGui::EndChild();
}

}  // namespace kvscope::gui::panels
