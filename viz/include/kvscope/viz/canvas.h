#pragma once
// Canvas: the small drawing interface draw_figure() renders through. Implemented by the Cairo
// backend (PNG/SVG/PDF, cairo_export.cpp) and meant to be implemented by an ImGui draw-list
// backend (ImDrawList: AddLine/AddPolyline/AddRect/AddRectFilled/AddConvexPolyFilled/
// AddCircle(Filled)/AddText/AddImage/PushClipRect), so every primitive here maps onto one of those.
// Units: px, origin top-left, y down. Text is UTF-8 (draw code passes valid UTF-8 only).
#include <span>
#include <string_view>
#include <vector>

#include "kvscope/viz/colormap.h"
#include "kvscope/viz/figure.h"

namespace kvscope::viz {

struct Point {
  double x = 0, y = 0;
};

/// An axis-aligned rectangle; w or h <= 0 means empty.
struct Rect {
  double x = 0, y = 0, w = 0, h = 0;
  double right() const { return x + w; }
  double bottom() const { return y + h; }
  bool empty() const { return w <= 0 || h <= 0; }
  bool contains(Point p) const { return p.x >= x && p.x <= x + w && p.y >= y && p.y <= y + h; }
};

enum class HAlign { Left, Center, Right };
/// Vertical text alignment against the font's ascent/descent (not the glyphs' ink), so labels of
/// one font line up whatever their letters.
enum class VAlign { Top, Middle, Baseline, Bottom };
/// Up: rotated 90 degrees counter-clockwise (reads bottom to top, y-axis labels); the alignment
/// applies in the text's own frame.
enum class TextDir { Horizontal, Up };

/// A font request; the family is the canvas's (Theme::font_family for the Cairo backend).
struct Font {
  double size = 10;  // px (em size)
  bool bold = false;
  bool italic = false;
};

struct Stroke {
  Color color;
  double width = 1;
  LineStyle style = LineStyle::Solid;  // None: draws nothing
};

/// Width of one line of text and the font's ascent and descent (all px, positive).
struct TextMetrics {
  double width = 0, ascent = 0, descent = 0;
};

/// An RGBA image, row-major, width * height pixels, straight alpha (heatmap cells, colour bars,
/// token bar strips); at most the destination's device pixels, since draw code reduces first. An
/// ImGui backend uploads it as a texture (and may cache it by content across frames).
struct Image {
  int width = 0, height = 0;
  std::vector<Color> pixels;
};

/// Nearest: one crisp block per image pixel (cells); Linear: smooth (colour bars).
enum class ImageFilter { Nearest, Linear };

/// Abstract drawing target. Calls happen in painter's order; clips nest (each push intersects).
class Canvas {
 public:
  virtual ~Canvas() = default;
  /// Metrics of one line of text in `font`.
  virtual TextMetrics measure(std::string_view text, const Font& font) = 0;
  virtual void line(Point a, Point b, const Stroke& stroke) = 0;
  /// Connected segments through the points (not closed).
  virtual void polyline(std::span<const Point> points, const Stroke& stroke) = 0;
  /// Outline of r (the stroke is centred on the edge).
  virtual void rect(const Rect& r, const Stroke& stroke) = 0;
  virtual void fill_rect(const Rect& r, Color color) = 0;
  /// Fills a convex polygon (markers).
  virtual void fill_polygon(std::span<const Point> points, Color color) = 0;
  /// Outlines a closed polygon.
  virtual void stroke_polygon(std::span<const Point> points, const Stroke& stroke) = 0;
  virtual void fill_circle(Point center, double radius, Color color) = 0;
  virtual void stroke_circle(Point center, double radius, const Stroke& stroke) = 0;
  /// One line of text placed so that `anchor` is at the given alignment point.
  virtual void text(Point anchor, std::string_view text, const Font& font, Color color, HAlign h, VAlign v,
                    TextDir dir = TextDir::Horizontal) = 0;
  /// Draws `image` scaled into dst.
  virtual void image(const Rect& dst, const Image& image, ImageFilter filter) = 0;
  /// Restricts drawing to r intersected with the current clip until the matching pop_clip().
  virtual void push_clip(const Rect& r) = 0;
  virtual void pop_clip() = 0;
  /// Device pixels per px: heatmaps and strips are reduced to this resolution (PNG: its scale;
  /// vector outputs: a fixed 2; ImGui: the framebuffer scale).
  virtual double pixel_ratio() const { return 1.0; }
};

}  // namespace kvscope::viz
