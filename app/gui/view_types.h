#pragma once
// Plain value types of the views and the command line: which view, plus the figure library's
// selection, compare side and per-figure options (app/figures/figure_options.h) under gui names.
#include <array>
#include <optional>
#include <string_view>

#include "figure_options.h"

namespace kvscope::gui {

/// The views of the main window, in tab order. Names are the `--view NAME` values.
enum class View { kSessions, kRun, kHeads, kTokens, kAttention, kKeys, kChannels, kBudgets, kFidelity, kSelection, kCompare };
inline constexpr std::array<View, 11> kAllViews = {View::kSessions,  View::kRun,       View::kHeads,    View::kTokens,
                                                   View::kAttention, View::kKeys,      View::kChannels, View::kBudgets,
                                                   View::kFidelity,  View::kSelection, View::kCompare};
/// "sessions", "run", "heads", "tokens", "attention", "keys", "channels", "budgets", "fidelity",
/// "selection", "compare".
std::string_view view_name(View v);
/// Tab title ("Sessions", "Heads", "Key geometry", ...).
const char* view_title(View v);
std::optional<View> parse_view(std::string_view name);
/// True for views that draw a figure (exportable).
bool view_has_figure(View v);

using figures::AttentionOptions;
using figures::BudgetsOptions;
using figures::ChannelsOptions;
using figures::FidelityOptions;
using figures::heads_metric_names;
using figures::HeadsOptions;
using figures::KeysOptions;
using figures::Selection;
using figures::Side;
using figures::TokenColoring;
using figures::TokensOptions;

}  // namespace kvscope::gui
