#pragma once
// The figure model of kvscope_viz: plain data with no drawing state. draw_figure() (draw.h) renders
// a Figure onto any Canvas (Cairo for PNG/SVG/PDF export in cairo_export.h, ImGui draw lists in the
// app), and export_csv() writes the numbers behind it, so what is seen is what is exported.
//
// Units: pixels, y down, origin at the figure's top-left (PNG pixels at scale 1; SVG/PDF points).
// Data coordinates are doubles; heatmap and token values are floats (NaN = no data).
// A Figure is a grid of panels; each panel kind is one struct of the Panel variant.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvscope/viz/colormap.h"

namespace kvscope::viz {

/// A closed interval [lo, hi] of data values.
struct Range {
  double lo = 0, hi = 1;
  friend bool operator==(const Range&, const Range&) = default;
};

/// One axis of a panel. Range and ticks are automatic unless set.
struct Axis {
  std::string label;                     // under the x axis / left of the y axis (rotated)
  std::optional<Range> range;            // nullopt: from the data (lines: tight x, y padded 5%)
  bool log = false;                      // log10 scale; values <= 0 are not drawn
  std::vector<double> ticks;             // major ticks; empty: nice_ticks() (linear) or decades (log)
  std::vector<std::string> tick_labels;  // empty, or one label per entry of `ticks`
  bool grid = true;                      // light grid lines at the major ticks
};

/// How many cells (tokens) that fall on one device pixel are reduced to one colour.
enum class Aggregate {
  Max,   // largest finite value; categories: the highest category index present
  Mean,  // mean of the finite values; categories: the most frequent (ties: the higher index)
};

enum class LineStyle { Solid, Dashed, Dotted, None };
enum class Marker { None, Circle, Square, Triangle, Diamond, Cross };

/// Where a legend goes. Auto: the inside corner that covers the fewest data points.
enum class LegendPos { Auto, TopRight, TopLeft, BottomRight, BottomLeft, Outside, None };

/// How Heatmap::mask marks cells (e.g. channels SPARK/ThinK pruned).
enum class MaskStyle {
  Hatch,    // diagonal lines over marked cells
  Outline,  // a rectangle around each horizontal run of marked cells
  Shade,    // a translucent veil over marked cells
};

/// A named category of a TokenStrip or a categorical Heatmap (e.g. kept, evicted, sink, window).
struct TokenCategory {
  std::string name;
  std::optional<Color> color;  // nullopt: categorical(index of the category)
};

/// A rows x cols matrix drawn as coloured cells with a colour bar, e.g. attention (queries x keys),
/// per-head statistics (layers x heads), channel saliency (heads x channels).
/// Axes: with labels, the axis is categorical (one label per row/column, thinned to fit); without,
/// it is numeric with column c centred at x_origin + c * x_step (row r: y_origin + r * y_step), as
/// matplotlib's imshow. Axis::range and Axis::log are ignored; Axis::label/ticks/tick_labels apply.
/// Drawing: when cells outnumber device pixels, cells are reduced per pixel with `aggregate`
/// (a 32 x 32768 map becomes an image of at most the plot's size), never drawn one by one.
/// CSV: one row per cell (series "value") and one per nonzero mask cell (series "mask").
struct Heatmap {
  std::string title;
  std::int64_t rows = 0, cols = 0;
  std::vector<float> values;            // row-major [rows, cols]; NaN = no data (Theme::missing)
  std::vector<std::string> row_labels;  // empty, or `rows` labels (e.g. "L3 H7")
  std::vector<std::string> col_labels;  // empty, or `cols` labels
  Axis x, y;                            // x: columns, y: rows
  double x_origin = 0, x_step = 1;      // numeric column coordinates (e.g. token positions)
  double y_origin = 0, y_step = 1;      // numeric row coordinates
  bool origin_top = true;               // row 0 at the top (matrix convention); false: at the bottom
  std::string colormap = "viridis";     // colormap() name; checked by validate()
  std::optional<Range> value_range;     // colour scale; nullopt: [min, max] of the finite values
                                        // (symmetric around 0 for diverging maps such as coolwarm)
  std::string colorbar_label;
  Aggregate aggregate = Aggregate::Max;
  std::vector<std::uint8_t> mask;  // empty, or row-major [rows, cols]; nonzero = marked
  MaskStyle mask_style = MaskStyle::Hatch;
  std::string mask_label;  // key text under the plot, right-aligned (e.g. "pruned")
  /// Non-empty: a categorical map. values are category indices (0 .. n - 1; NaN = none), drawn in
  /// the category's colour with a key under the plot instead of a colour bar; a pixel holding several
  /// cells shows the highest index among them (order categories by priority; `aggregate` ignored).
  /// colormap and value_range are ignored; the CSV value is the index, its label the name.
  std::vector<TokenCategory> categories;
  std::optional<Color> mask_color;  // hatch/outline colour; nullopt: dark-under-light lines
                                    // that show on any colormap (Shade: always a white veil)
};

/// One line of a LinePlot.
struct Series {
  std::string name;            // legend entry; empty: not in the legend
  std::vector<double> x, y;    // same length; a NaN breaks the line
  std::optional<Color> color;  // nullopt: categorical(index of the series)
  LineStyle line = LineStyle::Solid;
  Marker marker = Marker::None;
  double width = 1.6;        // px
  double marker_size = 3.5;  // radius in px
};

/// A shaded interval [lo, hi] of the x axis, drawn behind the data (e.g. the observation window or
/// sink tokens a scorer always keeps).
struct XSpan {
  double lo = 0, hi = 0;
  Color color = Color::hex(0x999999);  // drawn at 22% opacity
  std::string name;                    // legend entry (a swatch); empty: not in the legend
};

/// A reference line across the plot: horizontal at y = value (e.g. the budget's cutoff score), or
/// vertical at x = value. A horizontal line's value is part of the y range.
struct RefLine {
  bool vertical = false;
  double value = 0;
  Color color = Color::hex(0x222222);
  LineStyle line = LineStyle::Dashed;
  double width = 1.2;  // px
  std::string name;    // legend entry; empty: not in the legend
};

/// Lines over a shared x axis (e.g. fidelity vs budget per policy, KL per decode step).
/// CSV: one row per point: series = name, row = series index, col = point index, x, y; then one
/// row per span (series "span", x = lo, y = hi, label = name) and per reference line (series
/// "hline" / "vline", the value in x or y, label = name).
struct LinePlot {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  std::vector<XSpan> spans;    // behind the grid and data
  std::vector<RefLine> rules;  // over the data
  LegendPos legend = LegendPos::Auto;
};

/// One group of points of a ScatterPlot.
struct ScatterGroup {
  std::string name;            // legend entry; empty: not in the legend
  std::vector<double> x, y;    // same length; NaN points are skipped
  std::optional<Color> color;  // nullopt: categorical(index of the group)
  Marker marker = Marker::Circle;
  double size = 3.0;  // marker radius in px
};

/// A point drawn on top of every group, larger, outlined and labelled (e.g. KeyDiff's anchor key).
struct Highlight {
  std::string label;  // drawn next to the point and in the legend
  double x = 0, y = 0;
  Color color = Color::hex(0xd7191c);
  Marker marker = Marker::Diamond;
  double size = 6.5;  // marker radius in px
};

/// Points in groups (e.g. key geometry: cos to mean key vs norm, kept vs evicted; PCA of keys).
/// CSV: one row per point (series = group name; row = group index, col = point index) and one
/// per highlight (series "highlight", label = its label).
struct ScatterPlot {
  std::string title;
  Axis x, y;
  std::vector<ScatterGroup> groups;
  std::vector<Highlight> highlights;
  LegendPos legend = LegendPos::Auto;
};

/// Tokens of a prompt in reading order, each coloured by its category or value (e.g. kept=green,
/// evicted=grey; or attention received). The token count n is tokens.size(), or, with no token
/// text (long prompts), category.size() or values.size(); the given vectors must agree on n.
/// Drawing: tokens as text boxes wrapped into lines; when they do not fit the panel (or there is
/// no text), as a bar strip of 1-px cells wrapped into rows, labelled with each row's first
/// position; when even that does not fit, `aggregate` reduces several tokens to one pixel.
/// Colour: by category when `category` is set, else by value through `colormap`.
/// CSV: one row per token: col = index, x = first_position + index, value = value (when given)
/// else category index, series = category name, label = token text.
struct TokenStrip {
  std::string title;
  std::vector<std::string> tokens;  // UTF-8 text per token; '\n' is drawn as a return arrow
  std::vector<int> category;        // empty, or per token an index into categories (-1: none)
  std::vector<TokenCategory> categories;
  std::vector<float> values;  // empty, or per token (NaN: no data)
  std::string colormap = "viridis";
  std::optional<Range> value_range;  // nullopt: [min, max] of the finite values
  std::string colorbar_label;
  Aggregate aggregate = Aggregate::Max;
  std::int64_t first_position = 0;  // position of token 0 (row labels in bar mode, CSV x)
  /// Bar mode in one row whatever the count: tokens reduced with `aggregate` to the plot's width,
  /// under a position axis (cell c centred on its tokens), so the strip lines up with the position
  /// axes of the panels above it (Figure::share_x).
  bool single_row = false;
};

/// One series of a BarChart: one value per category.
struct BarSeries {
  std::string name;            // legend entry; empty: not in the legend
  std::vector<double> values;  // categories.size() values; NaN: no bar
  std::optional<Color> color;  // nullopt: categorical(index of the series)
};

/// Grouped vertical bars (e.g. bytes stored per policy, per-stage cost). Bars start at 0 (at the
/// axis minimum on a log axis). x.label names the categories; x.range/log/ticks are ignored.
/// CSV: one row per bar: series = name, row = series index, col = category index, x = category
/// index, y = value, label = category.
struct BarChart {
  std::string title;
  std::vector<std::string> categories;
  std::vector<BarSeries> series;
  Axis x, y;
  LegendPos legend = LegendPos::Auto;
};

/// One panel of a figure.
using Panel = std::variant<Heatmap, LinePlot, ScatterPlot, TokenStrip, BarChart>;

/// Fonts, sizes (px) and colours of a figure.
struct Theme {
  std::string font_family = "DejaVu Sans";  // Cairo falls back through fontconfig if absent
  double title_size = 17, panel_title_size = 13.5, label_size = 12, tick_size = 10.5;
  double legend_size = 10.5, caption_size = 10.5, token_size = 11;
  Color background = Color::hex(0xffffff);
  Color foreground = Color::hex(0x222222);  // text, axes
  Color grid = Color::hex(0xe6e6e6);
  Color missing = Color::hex(0xd0d0d0);  // NaN heatmap cells and tokens without a colour
  double padding = 12;                   // around the figure and between panels
};

/// A figure: title, grid of panels, caption line (the run's pipeline, model, budget).
struct Figure {
  std::string title;
  std::string caption;              // under the panels; wrapped when longer than the width
  int width = 900, height = 600;    // px (PNG pixels at scale 1, SVG/PDF points)
  int columns = 0;                  // panels per grid row; 0: ceil(sqrt(panel count))
  std::vector<double> row_weights;  // empty, or one relative height per grid row
  std::vector<double> col_weights;  // empty, or one relative width per grid column
  /// The panels of each grid column share their plot areas' left and right edges (the widest
  /// margins win), so stacked position axes line up pixel for pixel.
  bool share_x = false;
  std::vector<Panel> panels;  // row-major in the grid
  Theme theme;
};

/// "heatmap", "line", "scatter", "tokens" or "bar" (the CSV `kind` column).
std::string_view kind_name(const Panel& panel);

/// The panel's title.
const std::string& panel_title(const Panel& panel);

/// Checks sizes and names: heatmap values/mask/labels against rows x cols, series x/y lengths,
/// token vectors, category indices, bar values per category, colormap names, figure size and
/// weights. Throws std::invalid_argument "panel I (kind 'title'): problem" on the first problem.
void validate(const Figure& figure);

}  // namespace kvscope::viz
