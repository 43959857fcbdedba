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
  friend bool operator==(const Selection&, const Selection&) = default;
};

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
enum class TokenColoring { kKeptSelectedHead, kKeepRate, kAttention };
struct TokensOptions {
  TokenColoring coloring = TokenColoring::kKeptSelectedHead;
  Side side = Side::kA;  ///< kDiff: kept by both / only A / only B / neither (coloring ignored)
};

struct AttentionOptions {
  bool log_scale = true;  ///< log10 colour / y scale
  Side side = Side::kA;
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
