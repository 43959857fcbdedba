#pragma once
// Rendering a Figure onto a Canvas: background, title, panels (axes, ticks, grid, data, colour
// bars, legends) and caption, in a fixed order so output is deterministic.
#include <cstdint>

#include "kvscope/viz/canvas.h"
#include "kvscope/viz/figure.h"
#include "kvscope/viz/layout.h"

namespace kvscope::viz {

/// Validates (validate(): std::invalid_argument), lays out and draws `figure` onto `canvas`.
void draw_figure(const Figure& figure, Canvas& canvas);

/// Draws `figure` with a layout from layout_figure() (e.g. kept by an interactive view).
void draw_figure(const Figure& figure, const FigureLayout& layout, Canvas& canvas);

/// The cells of `heatmap` as an image of at most max_w x max_h pixels (at least 1 x 1): when the
/// matrix is larger it is first reduced with downsample(heatmap.aggregate); values are coloured
/// over `range` with heatmap.colormap, NaN as `missing`. Row 0 is the image's top row when
/// heatmap.origin_top, else its bottom row.
Image heatmap_image(const Heatmap& heatmap, Range range, std::int64_t max_w, std::int64_t max_h, Color missing);

}  // namespace kvscope::viz
