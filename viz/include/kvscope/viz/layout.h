#pragma once
// Layout of a Figure: where the title, caption, panels, plot areas, axes, ticks, colour bars and
// legends go, and the data <-> pixel mappings. draw_figure() draws from it; an interactive
// backend uses the same layout for hit tests (which cell / token / point is under the mouse).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvscope/viz/canvas.h"
#include "kvscope/viz/figure.h"

namespace kvscope::viz {

/// Tick step for about `target` intervals over `span`: 1, 2 or 5 times a power of ten
/// (Heckbert, "Nice numbers for graph labels", Graphics Gems 1990), at least `min_step`.
double nice_step(double span, int target, double min_step = 0);

/// Multiples of nice_step(hi - lo, target, min_step) inside [lo, hi] (ends included up to
/// rounding), ascending; values within 1e-9 steps of 0 are exactly 0. lo > hi is swapped; lo == hi
/// is widened to lo +- 0.5 (+- 10% of |lo| when larger). Empty if an end is not finite.
std::vector<double> nice_ticks(double lo, double hi, int target = 6, double min_step = 0);

/// Tick label for v on an axis of tick spacing `step`: just enough decimals for the step
/// ("0.25"); suffix k for steps from 1e3 ("12.5k") and M from 1e5 ("0.3M", "2.5M"); exponent
/// form for steps below 1e-4 or from 1e9 ("2.5e-05"); never "-0".
std::string format_tick(double v, double step);

/// Affine (or log10) map between a data interval and a pixel interval.
struct AxisMap {
  double lo = 0, hi = 1;  // data values at p0 and p1
  double p0 = 0, p1 = 1;  // pixels (p1 < p0 for an upward y axis)
  bool log = false;       // log10 scale (lo, hi > 0)
  /// Pixel of data value v; NaN when v is NaN or v <= 0 on a log axis.
  double to_px(double v) const;
  /// Data value at pixel px.
  double to_data(double px) const;
};

/// One tick: data value, pixel position along its axis, label (empty: minor tick).
struct Tick {
  double value = 0, px = 0;
  std::string label;
};

struct AxisLayout {
  AxisMap map;
  std::vector<Tick> ticks;
  bool rotated_labels = false;  // x labels drawn reading upwards (crowded bar categories)
};

/// One legend row: a line sample and/or marker, or a filled swatch.
struct LegendEntry {
  std::string label;
  Color color;
  LineStyle line = LineStyle::None;
  Marker marker = Marker::None;
  bool swatch = false;  // filled box (bars, token categories)
  double line_width = 1.6;
};

struct LegendLayout {
  Rect box;  // empty: no legend
  std::vector<LegendEntry> entries;
  double row_h = 0;
};

/// Where the tokens of a TokenStrip went.
struct TokenStripLayout {
  bool bars = false;                            // false: text boxes; true: bar strip
  std::vector<Rect> boxes;                      // text mode: one box per token
  std::vector<std::string> texts;               // text mode: the shown text per token (escaped, elided)
  std::int64_t per_cell = 1;                    // bar mode: tokens reduced into one cell
  std::int64_t cells_per_row = 0;               // bar mode
  std::int64_t rows = 0;                        // bar mode
  double cell_w = 1, row_h = 0, row_pitch = 0;  // bar mode: px per cell, row height, row spacing
};

/// Geometry of one panel.
struct PanelLayout {
  Rect cell;      // the grid cell
  Rect title;     // panel title line (empty: no title)
  Rect plot;      // the data area
  Rect colorbar;  // empty: none
  AxisLayout x, y;
  AxisLayout cbar;    // colour bar: value -> pixel (vertical)
  Range value_range;  // heatmap / token values coloured over this range
  LegendLayout legend;
  TokenStripLayout tokens;
  Rect mask_key;                    // heatmap mask key swatch, label to its right (empty: none)
  std::vector<Rect> category_keys;  // categorical heatmap: one swatch per category, name to its right
};

struct FigureLayout {
  Rect title;                              // empty: no title
  std::vector<std::string> caption_lines;  // caption wrapped to the figure width
  Rect caption;                            // empty: no caption
  std::vector<PanelLayout> panels;         // one per Figure::panels entry
};

/// Lays out `figure` using `measurer` for text sizes (nothing is drawn). Expects a valid figure
/// (see validate()).
FigureLayout layout_figure(const Figure& figure, Canvas& measurer);

/// Reduces a row-major [rows, cols] matrix to [out_rows, out_cols] (each at most the input's):
/// output cell (i, j) covers input rows [floor(i*rows/out_rows), floor((i+1)*rows/out_rows)) and
/// likewise columns, reduced with `how` over its finite values (NaN if none). Throws
/// std::invalid_argument on inconsistent sizes.
std::vector<float> downsample(std::span<const float> values, std::int64_t rows, std::int64_t cols,
                              std::int64_t out_rows, std::int64_t out_cols, Aggregate how);

/// The colour range a heatmap or token strip uses: value_range if set, else the finite min/max
/// (symmetric +-max|v| for diverging maps); widened when empty or degenerate, and to 10% of the
/// values' magnitude around their middle when they spread less than 1% of it (near-constant).
Range color_range(std::span<const float> values, const std::optional<Range>& fixed, const Colormap& cmap);

}  // namespace kvscope::viz
