#pragma once
// Plain value types of the figure builders (figures.h), shared by the GUI views and kvscope-cli
// export: what is selected, which side of a compare is shown, and each figure's display options.
#include <array>
#include <cstdint>

namespace kvscope::figures {

/// What the figures look at: a layer, a KV head and optionally a prompt token (-1 = none).
struct Selection {
  std::int64_t layer = 0;
  std::int64_t head = 0;  ///< KV head
  std::int64_t token = -1;
  /// The prompt positions every position axis shows, [pos_lo, pos_hi] inclusive (zoom and pan,
  /// linked across views); pos_hi < 0 = the whole prompt.
  std::int64_t pos_lo = 0, pos_hi = -1;
  friend bool operator==(const Selection&, const Selection&) = default;
};

/// The position window of `sel` clamped to a prompt of n tokens: {lo, hi} inclusive, {0, n - 1}
/// when not zoomed (and {0, -1} for an empty prompt).
struct PositionWindow {
  std::int64_t lo = 0, hi = -1;
  std::int64_t size() const { return hi - lo + 1; }
  bool zoomed = false;  ///< a strict sub-range of the prompt
};
PositionWindow position_window(const Selection& sel, std::int64_t n_tok);

/// Which run a per-run figure shows when two runs are compared: A, B or the difference A - B.
enum class Side { kA, kB, kDiff };

/// Heads overview: the layer x KV head map of one metric.
struct HeadsOptions {
  int metric = -1;  ///< index into heads_metric_names(); -1: every metric, one small map each
  Side side = Side::kA;
};
/// Metrics the heads overview can map: the summary metrics, then "kept" and "kept_frac".
const std::array<const char*, 9>& heads_metric_names();

/// Tokens view colouring.
/// kScore: the selected head's decisive score (what the budget stage ranked; capture full).
enum class TokenColoring { kKeptSelectedHead, kKeepRate, kAttention, kScore };
struct TokensOptions {
  TokenColoring coloring = TokenColoring::kKeptSelectedHead;
  Side side = Side::kA;  ///< kDiff: kept by both / only A / only B / neither (coloring ignored)
};

struct AttentionOptions {
  bool log_scale = true;  ///< log10 colour / y scale (linear when a score is <= 0)
  Side side = Side::kA;
  /// Plot the decisive score (what the budget stage ranked) when the run recorded it; false: the
  /// window-mean attention of capture.
  bool decisive_score = true;
};

struct KeysOptions {
  int bins = 40;
  Side side = Side::kA;
};

struct ChannelsOptions {
  bool cv = false;  ///< heatmap of channel CV instead of mean saliency
  Side side = Side::kA;
};

struct BudgetsOptions {
  Side side = Side::kA;
  /// For a run whose pipeline has a "heads" stage: also the pattern's panels (dense/streaming map,
  /// window per layer) read from its `pattern` file.
  bool head_pattern = true;
};

struct FidelityOptions {
  bool running_mean = true;  ///< top-1 as a running mean instead of 0/1 points
};

}  // namespace kvscope::figures
