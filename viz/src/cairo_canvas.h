#pragma once
// Canvas on a cairo_t (internal to kvscope_viz; cairo_export.cpp builds the surfaces).
#include <cairo.h>

#include <string>

#include "kvscope/viz/canvas.h"

namespace kvscope::viz::detail {

class CairoCanvas final : public Canvas {
 public:
  /// Draws on cr (not owned) in `family` (Cairo toy font API); pixel_ratio: device px per px.
  CairoCanvas(cairo_t* cr, std::string family, double pixel_ratio);
  TextMetrics measure(std::string_view text, const Font& font) override;
  void line(Point a, Point b, const Stroke& stroke) override;
  void polyline(std::span<const Point> points, const Stroke& stroke) override;
  void rect(const Rect& r, const Stroke& stroke) override;
  void fill_rect(const Rect& r, Color color) override;
  void fill_polygon(std::span<const Point> points, Color color) override;
  void stroke_polygon(std::span<const Point> points, const Stroke& stroke) override;
  void fill_circle(Point center, double radius, Color color) override;
  void stroke_circle(Point center, double radius, const Stroke& stroke) override;
  void text(Point anchor, std::string_view text, const Font& font, Color color, HAlign h, VAlign v,
            TextDir dir) override;
  void image(const Rect& dst, const Image& image, ImageFilter filter) override;
  void push_clip(const Rect& r) override;
  void pop_clip() override;
  double pixel_ratio() const override { return ratio_; }

 private:
  void set_color(Color c);
  void set_font(const Font& f);
  bool set_stroke(const Stroke& s);  // false: nothing to draw
  cairo_t* cr_;
  std::string family_;
  double ratio_;
  int clip_depth_ = 0;
};

/// Font options that make text metrics independent of the surface type (no hinting of metrics), so
/// PNG, SVG and PDF of one figure share one layout.
void set_font_options(cairo_t* cr);

}  // namespace kvscope::viz::detail
