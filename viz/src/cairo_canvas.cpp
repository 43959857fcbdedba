// Cairo implementation of Canvas.
#include "cairo_canvas.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "text.h"

namespace kvscope::viz::detail {

void set_font_options(cairo_t* cr) {
  cairo_font_options_t* o = cairo_font_options_create();
  cairo_font_options_set_hint_metrics(o, CAIRO_HINT_METRICS_OFF);
  cairo_font_options_set_hint_style(o, CAIRO_HINT_STYLE_NONE);
  cairo_font_options_set_antialias(o, CAIRO_ANTIALIAS_GRAY);
  cairo_set_font_options(cr, o);
  cairo_font_options_destroy(o);
}

CairoCanvas::CairoCanvas(cairo_t* cr, std::string family, double pixel_ratio)
    : cr_(cr), family_(std::move(family)), ratio_(pixel_ratio) {
  set_font_options(cr_);
  cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
}

void CairoCanvas::set_color(Color c) { cairo_set_source_rgba(cr_, c.r / 255.0, c.g / 255.0, c.b / 255.0, c.a / 255.0); }

void CairoCanvas::set_font(const Font& f) {
  cairo_select_font_face(cr_, family_.c_str(), f.italic ? CAIRO_FONT_SLANT_ITALIC : CAIRO_FONT_SLANT_NORMAL,
                         f.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr_, f.size);
}

bool CairoCanvas::set_stroke(const Stroke& s) {
  if (s.style == LineStyle::None || !(s.width > 0) || s.color.a == 0) return false;
  set_color(s.color);
  cairo_set_line_width(cr_, s.width);
  const double w = std::max(s.width, 0.75);
  if (s.style == LineStyle::Dashed) {
    const double d[] = {4 * w, 2.5 * w};
    cairo_set_dash(cr_, d, 2, 0);
    cairo_set_line_cap(cr_, CAIRO_LINE_CAP_BUTT);
  } else if (s.style == LineStyle::Dotted) {
    const double d[] = {0, 2.2 * w};
    cairo_set_dash(cr_, d, 2, 0);
    cairo_set_line_cap(cr_, CAIRO_LINE_CAP_ROUND);
  } else {
    cairo_set_dash(cr_, nullptr, 0, 0);
    cairo_set_line_cap(cr_, CAIRO_LINE_CAP_BUTT);
  }
  return true;
}

TextMetrics CairoCanvas::measure(std::string_view text, const Font& font) {
  set_font(font);
  const std::string s = clean_line(text);
  cairo_text_extents_t te;
  cairo_text_extents(cr_, s.c_str(), &te);
  cairo_font_extents_t fe;
  cairo_font_extents(cr_, &fe);
  return {te.x_advance, fe.ascent, fe.descent};
}

void CairoCanvas::line(Point a, Point b, const Stroke& stroke) {
  if (!set_stroke(stroke)) return;
  cairo_move_to(cr_, a.x, a.y);
  cairo_line_to(cr_, b.x, b.y);
  cairo_stroke(cr_);
}

void CairoCanvas::polyline(std::span<const Point> points, const Stroke& stroke) {
  if (points.size() < 2 || !set_stroke(stroke)) return;
  cairo_move_to(cr_, points[0].x, points[0].y);
  for (std::size_t i = 1; i < points.size(); ++i) cairo_line_to(cr_, points[i].x, points[i].y);
  cairo_stroke(cr_);
}

void CairoCanvas::rect(const Rect& r, const Stroke& stroke) {
  if (!set_stroke(stroke)) return;
  cairo_rectangle(cr_, r.x, r.y, r.w, r.h);
  cairo_stroke(cr_);
}

void CairoCanvas::fill_rect(const Rect& r, Color color) {
  if (r.empty() || color.a == 0) return;
  set_color(color);
  cairo_rectangle(cr_, r.x, r.y, r.w, r.h);
  cairo_fill(cr_);
}

void CairoCanvas::fill_polygon(std::span<const Point> points, Color color) {
  if (points.size() < 3) return;
  set_color(color);
  cairo_move_to(cr_, points[0].x, points[0].y);
  for (std::size_t i = 1; i < points.size(); ++i) cairo_line_to(cr_, points[i].x, points[i].y);
  cairo_close_path(cr_);
  cairo_fill(cr_);
}

void CairoCanvas::stroke_polygon(std::span<const Point> points, const Stroke& stroke) {
  if (points.size() < 2 || !set_stroke(stroke)) return;
  cairo_move_to(cr_, points[0].x, points[0].y);
  for (std::size_t i = 1; i < points.size(); ++i) cairo_line_to(cr_, points[i].x, points[i].y);
  cairo_close_path(cr_);
  cairo_stroke(cr_);
}

void CairoCanvas::fill_circle(Point c, double radius, Color color) {
  if (!(radius > 0)) return;
  set_color(color);
  cairo_new_sub_path(cr_);
  cairo_arc(cr_, c.x, c.y, radius, 0, 2 * M_PI);
  cairo_fill(cr_);
}

void CairoCanvas::stroke_circle(Point c, double radius, const Stroke& stroke) {
  if (!(radius > 0) || !set_stroke(stroke)) return;
  cairo_new_sub_path(cr_);
  cairo_arc(cr_, c.x, c.y, radius, 0, 2 * M_PI);
  cairo_stroke(cr_);
}

void CairoCanvas::text(Point anchor, std::string_view text, const Font& font, Color color, HAlign h, VAlign v,
                       TextDir dir) {
  const std::string s = clean_line(text);
  if (s.empty()) return;
  const TextMetrics tm = measure(s, font);
  const double dx = h == HAlign::Left ? 0 : h == HAlign::Center ? -tm.width / 2 : -tm.width;
  const double dy = v == VAlign::Top        ? tm.ascent
                    : v == VAlign::Middle   ? (tm.ascent - tm.descent) / 2
                    : v == VAlign::Baseline ? 0
                                            : -tm.descent;
  cairo_save(cr_);
  cairo_translate(cr_, anchor.x, anchor.y);
  if (dir == TextDir::Up) cairo_rotate(cr_, -M_PI / 2);
  set_color(color);
  cairo_move_to(cr_, dx, dy);
  cairo_show_text(cr_, s.c_str());
  cairo_new_path(cr_);
  cairo_restore(cr_);
}

void CairoCanvas::image(const Rect& dst, const Image& src, ImageFilter filter) {
  if (dst.empty() || src.width <= 0 || src.height <= 0 ||
      src.pixels.size() != static_cast<std::size_t>(src.width) * static_cast<std::size_t>(src.height))
    return;
  // SVG/PDF viewers smooth embedded images whatever the filter asks for: upscale nearest-filtered
  // images by whole factors to the output resolution first, so cells keep sharp edges.
  Image upscaled;
  const bool vector = cairo_surface_get_type(cairo_get_target(cr_)) != CAIRO_SURFACE_TYPE_IMAGE;
  if (vector && filter == ImageFilter::Nearest) {
    const auto factor = [&](double want, int have) {
      return std::clamp(static_cast<int>(std::ceil(want / have)), 1, std::max(1, 4096 / have));
    };
    const int kx = factor(dst.w * ratio_, src.width), ky = factor(dst.h * ratio_, src.height);
    if (kx > 1 || ky > 1) {
      upscaled.width = src.width * kx;
      upscaled.height = src.height * ky;
      upscaled.pixels.resize(static_cast<std::size_t>(upscaled.width) * static_cast<std::size_t>(upscaled.height));
      for (int y = 0; y < upscaled.height; ++y)
        for (int x = 0; x < upscaled.width; ++x)
          upscaled.pixels[static_cast<std::size_t>(y) * upscaled.width + x] =
              src.pixels[static_cast<std::size_t>(y / ky) * src.width + x / kx];
    }
  }
  const Image& img = upscaled.width > 0 ? upscaled : src;
  cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, img.width, img.height);
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(s);
    return;
  }
  cairo_surface_flush(s);
  unsigned char* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  for (int y = 0; y < img.height; ++y) {
    auto* row = reinterpret_cast<std::uint32_t*>(data + static_cast<std::ptrdiff_t>(y) * stride);
    const Color* in = img.pixels.data() + static_cast<std::ptrdiff_t>(y) * img.width;
    for (int x = 0; x < img.width; ++x) {
      const Color c = in[x];
      const std::uint32_t a = c.a;
      const auto pm = [a](std::uint32_t v) { return (v * a + 127) / 255; };  // premultiplied
      row[x] = (a << 24) | (pm(c.r) << 16) | (pm(c.g) << 8) | pm(c.b);
    }
  }
  cairo_surface_mark_dirty(s);
  cairo_pattern_t* p = cairo_pattern_create_for_surface(s);
  cairo_matrix_t m;
  cairo_matrix_init_scale(&m, img.width / dst.w, img.height / dst.h);
  cairo_matrix_translate(&m, -dst.x, -dst.y);
  cairo_pattern_set_matrix(p, &m);
  cairo_pattern_set_filter(p, filter == ImageFilter::Nearest ? CAIRO_FILTER_NEAREST : CAIRO_FILTER_GOOD);
  cairo_pattern_set_extend(p, filter == ImageFilter::Nearest ? CAIRO_EXTEND_NONE : CAIRO_EXTEND_PAD);
  cairo_save(cr_);
  cairo_set_source(cr_, p);
  cairo_rectangle(cr_, dst.x, dst.y, dst.w, dst.h);
  cairo_fill(cr_);
  cairo_restore(cr_);
  cairo_pattern_destroy(p);
  cairo_surface_destroy(s);
}

void CairoCanvas::push_clip(const Rect& r) {
  cairo_save(cr_);
  cairo_rectangle(cr_, r.x, r.y, std::max(0.0, r.w), std::max(0.0, r.h));
  cairo_clip(cr_);
  ++clip_depth_;
}

void CairoCanvas::pop_clip() {
  if (clip_depth_ == 0) return;
  cairo_restore(cr_);
  --clip_depth_;
}

}  // namespace kvscope::viz::detail
