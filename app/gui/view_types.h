#pragma once
// Plain value types shared by the views, the figure builders and the command line: which view,
// what is selected, and each view's display options.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

/// What the views look at: a layer, a KV head and optionally a prompt token (-1 = none).
struct Selection {
  std::int64_t layer = 0;
  std::int64_t head = 0;  ///< KV head
  std::int64_t token = -1;
  friend bool operator==(const Selection&, const Selection&) = default;
};

/// Which run a per-run view shows in compare mode: A, B or the difference A - B.
enum class Side { kA, kB, kDiff };

/// Heads overview: the layer x KV head map of one metric.
struct HeadsOptions {
  int metric = -1;  ///< index into heads_metric_names(); -1: every metric, one small map each
  Side side = Side::kA;
};
/// Metrics the heads overview can map: the summary metrics, then "kept" and "kept_frac".
const std::array<const char*, 9>& heads_metric_names();

/// Tokens view colouring.
enum class TokenColoring { kKeptSelectedHead, kKeepRate, kAttention };
struct TokensOptions {
  TokenColoring coloring = TokenColoring::kKeptSelectedHead;
};

struct AttentionOptions {
  bool log_scale = true;  ///< log10 colour / y scale
};

struct KeysOptions {
  int bins = 40;
};

struct ChannelsOptions {
  bool cv = false;  ///< heatmap of channel CV instead of mean saliency
};

struct BudgetsOptions {
  Side side = Side::kA;
};

struct FidelityOptions {
  bool running_mean = true;  ///< top-1 as a running mean instead of 0/1 points
};

}  // namespace kvscope::gui
