#pragma once
// Shared measuring context of layout and drawing (internal to kvscope_viz).
#include "kvscope/viz/canvas.h"
#include "kvscope/viz/figure.h"

namespace kvscope::viz::detail {

/// The fonts of a theme and their line heights, measured once per figure.
struct Ctx {
  Ctx(Canvas& canvas, const Theme& theme);
  Canvas& m;
  const Theme& th;
  Font tick, label, title, legend, token;
  double tick_h = 0, label_h = 0, title_h = 0, legend_h = 0;
  /// Figure::share_x: the least distance from the panel cell's left / right edge to the plot's.
  double min_left = 0, min_right = 0;
};

}  // namespace kvscope::viz::detail
