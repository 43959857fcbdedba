#include "view_types.h"

namespace kvscope::gui {

std::string_view view_name(View v) {
  switch (v) {
    case View::kSessions: return "sessions";
    case View::kRun: return "run";
    case View::kHeads: return "heads";
    case View::kTokens: return "tokens";
    case View::kAttention: return "attention";
    case View::kKeys: return "keys";
    case View::kChannels: return "channels";
    case View::kBudgets: return "budgets";
    case View::kFidelity: return "fidelity";
    case View::kSelection: return "selection";
    case View::kCompare: return "compare";
  }
  return "sessions";
}

const char* view_title(View v) {
  switch (v) {
    case View::kSessions: return "Sessions";
    case View::kRun: return "Run";
    case View::kHeads: return "Heads";
    case View::kTokens: return "Tokens";
    case View::kAttention: return "Attention";
    case View::kKeys: return "Key geometry";
    case View::kChannels: return "Channels";
    case View::kBudgets: return "Budgets";
    case View::kFidelity: return "Fidelity";
    case View::kSelection: return "Selection";
    case View::kCompare: return "Compare";
  }
  return "";
}

std::optional<View> parse_view(std::string_view name) {
  for (View v : kAllViews)
    if (view_name(v) == name) return v;
  return std::nullopt;
}

bool view_has_figure(View v) { return v != View::kSessions && v != View::kRun; }

}  // namespace kvscope::gui
