#pragma once
// The head-pattern figure (HS-SFT Figs. 6-8 and docs/methods.md §5.5's tool signal): a layer x KV-head
// map of dense and streaming heads coloured by the entries each keeps, the streaming window per
// layer, and, for learned patterns, the training loss curve. Built from a pattern file
// (kvscope.head_pattern.v1, docs/head-patterns.md) into the viz figure model, for the Budgets view
// and export.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kvscope/core/head_pattern.h"
#include "kvscope/viz/figure.h"

namespace kvscope::figures {

/// What the figure shows besides the pattern itself.
struct HeadPatternFigureData {
  int64_t reference_length =
      0;  ///< N: the map's colours are min(N, sink + window) and N for dense heads; 0 = largest sink + window
  double budget_achieved = -1;  ///< kept fraction at N; < 0 = computed from the pattern
  struct LossPoint {
    double step = 0, loss = 0;
    std::string phase;  ///< one line per phase ("duo", "hs-sft"): their objectives differ
  };
  std::vector<LossPoint> loss;  ///< the training curve; empty = no panel
};

/// Panels: (1) heatmap layers x KV heads, value = entries kept on an N-token context, dense heads
/// outlined ("dense"); (2) bars: window (tokens, sinks excluded) of each layer's streaming heads
/// (NaN where a layer has none; several windows in one layer: their mean); (3) the loss curve if
/// given. Always a valid figure (viz::validate); an empty pattern gives panels titled "no heads".
viz::Figure head_pattern_figure(const HeadPattern& pattern, const HeadPatternFigureData& data);

/// Reads `pattern_json` (load_head_pattern) and its optional "reference_length",
/// "budget_achieved" and "learned".loss_curve rows [step, loss, ..., phase] (pattern_file.h), then builds the figure
/// above. Throws InputError(path, ...) for a missing or malformed file.
viz::Figure head_pattern_figure(const std::filesystem::path& pattern_json);

}  // namespace kvscope::figures
