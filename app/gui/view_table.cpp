#include "view_table.h"

#include "app_state.h"
#include "panels/panels.h"

namespace kvscope::gui {
namespace {

// name, tab title, draw function, figure (nullptr: none). Tab order.
constexpr ViewEntry kViews[] = {
    {"sessions", "Sessions", panels::sessions, nullptr},
    {"run", "Run", panels::run, nullptr},
    {"heads", "Heads", panels::heads, [](AppState& s) { return &s.heads.fig; }},
    {"tokens", "Tokens", panels::tokens, [](AppState& s) { return &s.tokens.overview; }},
    {"attention", "Attention", panels::attention, [](AppState& s) { return &s.attention.fig; }},
    {"keys", "Key geometry", panels::keys, [](AppState& s) { return &s.keys.fig; }},
    {"channels", "Channels", panels::channels, [](AppState& s) { return &s.channels.fig; }},
    {"budgets", "Budgets", panels::budgets, [](AppState& s) { return &s.budgets.fig; }},
    {"fidelity", "Fidelity", panels::fidelity, [](AppState& s) { return &s.fidelity.fig; }},
    {"timeline", "Timeline", panels::timeline, [](AppState& s) { return &s.timeline.fig; }},
    {"selection", "Selection", panels::selection, [](AppState& s) { return &s.selection.fig; }},
    {"compare", "Compare", panels::compare, [](AppState& s) { return &s.compare.fig; }},
    {"eval", "Eval", panels::eval, [](AppState& s) { return &s.eval.fig; }},
};

}  // namespace

std::span<const ViewEntry> view_table() { return kViews; }

const ViewEntry* view_entry(View v) {
  for (const ViewEntry& e : kViews)
    if (e.name == v.name()) return &e;
  return nullptr;
}

std::string view_names(std::string_view sep) {
  std::string out;
  for (const ViewEntry& e : kViews) out += (out.empty() ? "" : std::string(sep)) + std::string(e.name);
  return out;
}

void draw_view(AppState& s, Ui& ui, View v) {
  if (const ViewEntry* e = view_entry(v)) e->draw(s, ui);
}

FigureView* figure_of(AppState& s, View v) {
  const ViewEntry* e = view_entry(v);
  return e && e->figure ? e->figure(s) : nullptr;
}

// ---- view_types.h --------------------------------------------------------------------------------

View ViewRange::iterator::operator*() const { return kViews[i].view(); }
ViewRange::iterator ViewRange::end() const { return {std::size(kViews)}; }
std::size_t ViewRange::size() const { return std::size(kViews); }

const char* view_title(View v) {
  const ViewEntry* e = view_entry(v);
  return e ? e->title : "";
}

std::optional<View> parse_view(std::string_view name) {
  if (const ViewEntry* e = view_entry(View(name))) return e->view();
  return std::nullopt;
}

bool view_has_figure(View v) {
  const ViewEntry* e = view_entry(v);
  return e && e->figure;
}

}  // namespace kvscope::gui
