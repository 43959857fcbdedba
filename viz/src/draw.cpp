// Drawing a laid-out Figure onto a Canvas.
#include "kvscope/viz/draw.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "layout_internal.h"
#include "text.h"

namespace kvscope::viz {
namespace {

using detail::Ctx;

constexpr double kTickLen = 4;

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

// Colour of a value on a colormap over range r (NaN: missing).
struct ValueColors {
  const Colormap& cm;
  Range r;
  Color missing;
  Color operator()(double v) const {
    if (!std::isfinite(v)) return missing;
    return cm.at((v - r.lo) / (r.hi - r.lo));
  }
};

void draw_marker(Canvas& cv, Marker m, Point p, double r, Color fill, const std::optional<Stroke>& outline = {}) {
  switch (m) {
    case Marker::None:
      return;
    case Marker::Circle:
      cv.fill_circle(p, r, fill);
      if (outline) cv.stroke_circle(p, r, *outline);
      return;
    case Marker::Square: {
      const double s = r * 0.886;
      const Rect q{p.x - s, p.y - s, 2 * s, 2 * s};
      cv.fill_rect(q, fill);
      if (outline) cv.rect(q, *outline);
      return;
    }
    case Marker::Triangle: {
      const Point pts[] = {{p.x, p.y - r * 1.2}, {p.x + r * 1.05, p.y + r * 0.65}, {p.x - r * 1.05, p.y + r * 0.65}};
      cv.fill_polygon(pts, fill);
      if (outline) cv.stroke_polygon(pts, *outline);
      return;
    }
    case Marker::Diamond: {
      const Point pts[] = {{p.x, p.y - r * 1.3}, {p.x + r, p.y}, {p.x, p.y + r * 1.3}, {p.x - r, p.y}};
      cv.fill_polygon(pts, fill);
      if (outline) cv.stroke_polygon(pts, *outline);
      return;
    }
    case Marker::Cross: {
      const Stroke s{fill, std::max(1.2, r / 2.2)};
      cv.line({p.x - r, p.y - r}, {p.x + r, p.y + r}, s);
      cv.line({p.x - r, p.y + r}, {p.x + r, p.y - r}, s);
      return;
    }
  }
}

void draw_panel_title(Ctx& c, const PanelLayout& L, const std::string& title) {
  if (title.empty() || L.title.empty()) return;
  const double cx = std::clamp(L.plot.x + L.plot.w / 2, L.title.x, L.title.right());
  double half = std::min(cx - L.cell.x, L.cell.right() - cx);
  const std::string shown = detail::elide(c.m, detail::clean_line(title), c.title, std::max(0.0, 2 * half));
  c.m.text({cx, L.title.y}, shown, c.title, c.th.foreground, HAlign::Center, VAlign::Top);
}

void draw_grid(Ctx& c, const PanelLayout& L, bool xgrid, bool ygrid) {
  const Stroke s{c.th.grid, 0.8};
  c.m.push_clip(L.plot);
  if (xgrid)
    for (const auto& t : L.x.ticks)
      if (!t.label.empty()) c.m.line({t.px, L.plot.y}, {t.px, L.plot.bottom()}, s);
  if (ygrid)
    for (const auto& t : L.y.ticks)
      if (!t.label.empty()) c.m.line({L.plot.x, t.px}, {L.plot.right(), t.px}, s);
  c.m.pop_clip();
}

double widest(Ctx& c, const std::vector<Tick>& ticks) {
  double w = 0;
  for (const auto& t : ticks) w = std::max(w, c.m.measure(t.label, c.tick).width);
  return w;
}

// Frame, ticks, tick labels and axis labels.
void draw_axes(Ctx& c, const PanelLayout& L, const Axis& x, const Axis& y) {
  const Color fg = c.th.foreground;
  const Stroke tick{fg, 0.8};
  c.m.rect(L.plot, Stroke{fg, 0.9});
  const double label_y = L.plot.bottom() + kTickLen + 3;
  for (const auto& t : L.x.ticks) {
    const double len = t.label.empty() ? kTickLen * 0.6 : kTickLen;
    c.m.line({t.px, L.plot.bottom()}, {t.px, L.plot.bottom() + len}, tick);
    if (t.label.empty()) continue;
    if (L.x.rotated_labels)
      c.m.text({t.px, label_y}, t.label, c.tick, fg, HAlign::Right, VAlign::Middle, TextDir::Up);
    else
      c.m.text({t.px, label_y}, t.label, c.tick, fg, HAlign::Center, VAlign::Top);
  }
  for (const auto& t : L.y.ticks) {
    const double len = t.label.empty() ? kTickLen * 0.6 : kTickLen;
    c.m.line({L.plot.x - len, t.px}, {L.plot.x, t.px}, tick);
    if (!t.label.empty()) c.m.text({L.plot.x - kTickLen - 3, t.px}, t.label, c.tick, fg, HAlign::Right, VAlign::Middle);
  }
  if (!x.label.empty()) {
    const double below = L.x.rotated_labels ? widest(c, L.x.ticks) : c.tick_h;
    double half = L.plot.w / 2;
    if (!L.mask_key.empty()) half = std::max(0.0, L.mask_key.x - 8 - (L.plot.x + L.plot.w / 2));
    c.m.text({L.plot.x + L.plot.w / 2, label_y + below + 4},
             detail::elide(c.m, detail::clean_line(x.label), c.label, 2 * half), c.label, fg, HAlign::Center,
             VAlign::Top);
  }
  if (!y.label.empty()) {
    const double left = L.plot.x - kTickLen - 3 - widest(c, L.y.ticks) - 6;
    c.m.text({left, L.plot.y + L.plot.h / 2}, detail::elide(c.m, detail::clean_line(y.label), c.label, L.cell.h - 8),
             c.label, fg, HAlign::Center, VAlign::Bottom, TextDir::Up);
  }
}

void draw_colorbar(Ctx& c, const PanelLayout& L, const Colormap& cm, const std::string& label) {
  if (L.colorbar.empty()) return;
  const Rect& bar = L.colorbar;
  Image img;
  img.width = 1;
  img.height = 256;
  img.pixels.resize(256);
  for (int k = 0; k < 256; ++k) img.pixels[static_cast<std::size_t>(k)] = cm.table()[static_cast<std::size_t>(255 - k)];
  c.m.image(bar, img, ImageFilter::Linear);
  const Color fg = c.th.foreground;
  c.m.rect(bar, Stroke{fg, 0.8});
  for (const auto& t : L.cbar.ticks) {
    c.m.line({bar.right(), t.px}, {bar.right() + kTickLen, t.px}, Stroke{fg, 0.8});
    c.m.text({bar.right() + kTickLen + 3, t.px}, t.label, c.tick, fg, HAlign::Left, VAlign::Middle);
  }
  if (!label.empty()) {
    const double x = bar.right() + kTickLen + 3 + widest(c, L.cbar.ticks) + 6;
    c.m.text({x, bar.y + bar.h / 2}, detail::elide(c.m, detail::clean_line(label), c.label, std::max(bar.h, 40.0)),
             c.label, fg, HAlign::Center, VAlign::Top, TextDir::Up);
  }
}

void draw_legend_sample(Canvas& cv, const LegendEntry& e, double x0, double y) {
  if (e.swatch) {
    cv.fill_rect({x0 + 3, y - 5, 16, 10}, e.color);
    return;
  }
  if (e.line != LineStyle::None) cv.line({x0, y}, {x0 + 22, y}, Stroke{e.color, e.line_width, e.line});
  draw_marker(cv, e.marker, {x0 + 11, y}, 3.5, e.color);
}

void draw_legend(Ctx& c, const LegendLayout& g) {
  if (g.entries.empty() || g.box.empty()) return;
  c.m.fill_rect(g.box, c.th.background.with_alpha(225));
  c.m.rect(g.box, Stroke{Color::hex(0xbbbbbb), 0.8});
  for (std::size_t i = 0; i < g.entries.size(); ++i) {
    const auto& e = g.entries[i];
    const double y = g.box.y + 3 + (static_cast<double>(i) + 0.5) * g.row_h;
    draw_legend_sample(c.m, e, g.box.x + 6, y);
    c.m.text({g.box.x + 6 + 22 + 5, y}, e.label, c.legend, c.th.foreground, HAlign::Left, VAlign::Middle);
  }
}

// Marks one rectangle of a heatmap mask.
// color: nullopt = a dark line under a light one, visible on any colormap.
void mark_rect(Canvas& cv, const Rect& r, MaskStyle style, const std::optional<Color>& color) {
  const Color dark{0, 0, 0, 190}, light{255, 255, 255, 235};
  switch (style) {
    case MaskStyle::Shade:
      cv.fill_rect(r, Color{255, 255, 255, 150});
      return;
    case MaskStyle::Outline: {
      const double w = 1.2;
      const Rect in{r.x + w / 2, r.y + w / 2, std::max(0.0, r.w - w), std::max(0.0, r.h - w)};
      if (!color) cv.rect(in, Stroke{dark, 2.2 * w});
      cv.rect(in, Stroke{color.value_or(light), w});
      return;
    }
    case MaskStyle::Hatch: {
      // Lines x + y = 6k in figure coordinates, so neighbouring runs line up.
      const double pitch = 6;
      cv.push_clip(r);
      const double k0 = std::floor((r.x + r.y) / pitch), k1 = std::ceil((r.right() + r.bottom()) / pitch);
      for (int pass = color ? 1 : 0; pass < 2; ++pass) {
        const Stroke s = pass == 0 ? Stroke{dark, 2.0} : Stroke{color.value_or(light), color ? 1.0 : 0.9};
        for (double k = k0; k <= k1; k += 1) {
          const double d = k * pitch;
          cv.line({d - r.y, r.y}, {d - r.bottom(), r.bottom()}, s);
        }
      }
      cv.pop_clip();
      return;
    }
  }
}

void draw_heatmap(Ctx& c, const Heatmap& h, const PanelLayout& L) {
  const Rect& P = L.plot;
  const double ratio = std::max(c.m.pixel_ratio(), 1e-3);
  const auto dw = std::max<std::int64_t>(1, std::llround(P.w * ratio));
  const auto dh = std::max<std::int64_t>(1, std::llround(P.h * ratio));
  c.m.image(P, heatmap_image(h, L.value_range, dw, dh, c.th.missing), ImageFilter::Nearest);
  if (!h.mask.empty() && h.rows > 0 && h.cols > 0) {
    const std::int64_t ar = std::min(h.rows, dh), ac = std::min(h.cols, dw);
    std::vector<float> m(h.mask.size());
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = h.mask[i] ? 1.0f : 0.0f;
    if (ar != h.rows || ac != h.cols) m = downsample(m, h.rows, h.cols, ar, ac, Aggregate::Max);
    const double cw = P.w / static_cast<double>(ac), ch = P.h / static_cast<double>(ar);
    c.m.push_clip(P);
    for (std::int64_t i = 0; i < ar; ++i) {
      const double y = h.origin_top ? P.y + static_cast<double>(i) * ch : P.bottom() - static_cast<double>(i + 1) * ch;
      for (std::int64_t j = 0; j < ac;) {
        if (!(m[static_cast<std::size_t>(i * ac + j)] > 0)) {
          ++j;
          continue;
        }
        std::int64_t e = j;
        while (e < ac && m[static_cast<std::size_t>(i * ac + e)] > 0) ++e;
        mark_rect(c.m, {P.x + static_cast<double>(j) * cw, y, static_cast<double>(e - j) * cw, ch}, h.mask_style,
                  h.mask_color);
        j = e;
      }
    }
    c.m.pop_clip();
  }
  draw_axes(c, L, h.x, h.y);
  for (std::size_t k = 0; k < L.category_keys.size() && k < h.categories.size(); ++k) {
    const Rect& r = L.category_keys[k];
    c.m.fill_rect(r, h.categories[k].color.value_or(categorical(k)));
    c.m.rect(r, Stroke{c.th.foreground, 0.6});
    c.m.text({r.right() + 4, r.y + r.h / 2}, detail::clean_line(h.categories[k].name), c.legend, c.th.foreground,
             HAlign::Left, VAlign::Middle);
  }
  if (h.categories.empty()) draw_colorbar(c, L, colormap(h.colormap), h.colorbar_label);
  if (!L.mask_key.empty()) {
    c.m.fill_rect(L.mask_key, colormap(h.colormap).at(0.5));
    mark_rect(c.m, L.mask_key, h.mask_style, h.mask_color);
    c.m.rect(L.mask_key, Stroke{c.th.foreground, 0.6});
    c.m.text({L.mask_key.right() + 4, L.mask_key.y + L.mask_key.h / 2}, detail::clean_line(h.mask_label), c.legend,
             c.th.foreground, HAlign::Left, VAlign::Middle);
  }
}

void draw_line(Ctx& c, const LinePlot& p, const PanelLayout& L) {
  c.m.push_clip(L.plot);
  for (const XSpan& sp : p.spans) {
    const double a = L.x.map.to_px(sp.lo - 0.5), b = L.x.map.to_px(sp.hi + 0.5);
    if (std::isfinite(a) && std::isfinite(b))
      c.m.fill_rect({std::min(a, b), L.plot.y, std::max(1.0, std::abs(b - a)), L.plot.h}, sp.color.with_alpha(56));
  }
  c.m.pop_clip();
  draw_grid(c, L, p.x.grid, p.y.grid);
  c.m.push_clip(L.plot);
  std::vector<Point> run;
  for (std::size_t si = 0; si < p.series.size(); ++si) {
    const auto& s = p.series[si];
    const Color col = s.color.value_or(categorical(si));
    if (s.line != LineStyle::None) {
      const Stroke st{col, s.width, s.line};
      run.clear();
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        const double px = L.x.map.to_px(s.x[i]), py = L.y.map.to_px(s.y[i]);
        if (std::isfinite(px) && std::isfinite(py)) {
          run.push_back({px, py});
        } else {
          if (run.size() >= 2) c.m.polyline(run, st);
          run.clear();
        }
      }
      if (run.size() >= 2) c.m.polyline(run, st);
    }
    if (s.marker != Marker::None)
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        const double px = L.x.map.to_px(s.x[i]), py = L.y.map.to_px(s.y[i]);
        if (std::isfinite(px) && std::isfinite(py)) draw_marker(c.m, s.marker, {px, py}, s.marker_size, col);
      }
  }
  for (const RefLine& r : p.rules) {
    const Stroke st{r.color, r.width, r.line};
    if (r.vertical) {
      const double px = L.x.map.to_px(r.value);
      if (std::isfinite(px)) c.m.line({px, L.plot.y}, {px, L.plot.bottom()}, st);
    } else {
      const double py = L.y.map.to_px(r.value);
      if (std::isfinite(py)) c.m.line({L.plot.x, py}, {L.plot.right(), py}, st);
    }
  }
  c.m.pop_clip();
  draw_axes(c, L, p.x, p.y);
  draw_legend(c, L.legend);
}

void draw_scatter(Ctx& c, const ScatterPlot& p, const PanelLayout& L) {
  draw_grid(c, L, p.x.grid, p.y.grid);
  c.m.push_clip(L.plot);
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const auto& gr = p.groups[g];
    const Color col = gr.color.value_or(categorical(g)).with_alpha(215);
    for (std::size_t i = 0; i < gr.x.size(); ++i) {
      const double px = L.x.map.to_px(gr.x[i]), py = L.y.map.to_px(gr.y[i]);
      if (std::isfinite(px) && std::isfinite(py)) draw_marker(c.m, gr.marker, {px, py}, gr.size, col);
    }
  }
  for (const auto& h : p.highlights) {
    const double px = L.x.map.to_px(h.x), py = L.y.map.to_px(h.y);
    if (std::isfinite(px) && std::isfinite(py))
      draw_marker(c.m, h.marker, {px, py}, h.size, h.color, Stroke{c.th.foreground, 1.1});
  }
  c.m.pop_clip();
  for (const auto& h : p.highlights) {
    const double px = L.x.map.to_px(h.x), py = L.y.map.to_px(h.y);
    if (h.label.empty() || !std::isfinite(px) || !std::isfinite(py) || !L.plot.contains({px, py})) continue;
    const std::string label = detail::clean_line(h.label);
    const double w = c.m.measure(label, c.legend).width;
    // Right of the point unless that leaves the plot.
    const bool right = px + h.size + 4 + w <= L.plot.right();
    const double tx = right ? px + h.size + 4 : px - h.size - 4;
    // A light backing so the label reads over dense points.
    c.m.fill_rect({right ? tx - 1.5 : tx - w - 1.5, py - c.legend_h / 2 - 1, w + 3, c.legend_h + 2},
                  c.th.background.with_alpha(200));
    c.m.text({tx, py}, label, c.legend, c.th.foreground, right ? HAlign::Left : HAlign::Right, VAlign::Middle);
  }
  draw_axes(c, L, p.x, p.y);
  draw_legend(c, L.legend);
}

void draw_bar(Ctx& c, const BarChart& b, const PanelLayout& L) {
  draw_grid(c, L, false, b.y.grid);
  c.m.push_clip(L.plot);
  const double base = L.y.map.to_px(b.y.log ? L.y.map.lo : 0.0);
  const double group = 0.8, bw = group / static_cast<double>(std::max<std::size_t>(b.series.size(), 1));
  for (std::size_t si = 0; si < b.series.size(); ++si) {
    const Color col = b.series[si].color.value_or(categorical(si));
    for (std::size_t k = 0; k < b.categories.size(); ++k) {
      const double py = L.y.map.to_px(b.series[si].values[k]);
      if (!std::isfinite(py)) continue;
      const double x0 = L.x.map.to_px(static_cast<double>(k) - group / 2 + static_cast<double>(si) * bw);
      const double x1 = L.x.map.to_px(static_cast<double>(k) - group / 2 + static_cast<double>(si + 1) * bw);
      const double gap = std::min(1.0, (x1 - x0) * 0.1);
      c.m.fill_rect({x0 + gap / 2, std::min(py, base), std::max(0.5, x1 - x0 - gap), std::abs(py - base)}, col);
    }
  }
  if (!b.y.log && L.y.map.lo < 0 && L.y.map.hi > 0)
    c.m.line({L.plot.x, base}, {L.plot.right(), base}, Stroke{c.th.foreground, 0.8});
  c.m.pop_clip();
  draw_axes(c, L, b.x, b.y);
  draw_legend(c, L.legend);
}

std::size_t token_count(const TokenStrip& t) {
  return !t.tokens.empty() ? t.tokens.size() : !t.category.empty() ? t.category.size() : t.values.size();
}

void draw_tokens(Ctx& c, const TokenStrip& t, const PanelLayout& L) {
  const std::size_t n = token_count(t);
  const bool by_category = !t.category.empty();
  const Colormap& cm = colormap(t.colormap);
  const ValueColors vc{cm, L.value_range, c.th.missing};
  std::vector<Color> cat_colors;
  for (std::size_t k = 0; k < t.categories.size(); ++k)
    cat_colors.push_back(t.categories[k].color.value_or(categorical(k)));
  const auto color_of_category = [&](int k) { return k >= 0 ? cat_colors[static_cast<std::size_t>(k)] : c.th.missing; };
  const auto token_color = [&](std::size_t i) -> Color {
    if (by_category) return color_of_category(t.category[i]);
    if (!t.values.empty()) return vc(t.values[i]);
    return c.th.missing;
  };
  const TokenStripLayout& T = L.tokens;
  const Color fg = c.th.foreground;
  if (!T.bars) {
    for (std::size_t i = 0; i < T.boxes.size(); ++i) {
      const Color bg = token_color(i);
      c.m.fill_rect(T.boxes[i], bg);
      const Color ink = luminance(bg) < 0.45 ? Color::hex(0xffffff) : fg;
      c.m.push_clip(T.boxes[i]);
      c.m.text({T.boxes[i].x + 3, T.boxes[i].y + T.boxes[i].h / 2}, T.texts[i], c.token, ink, HAlign::Left,
               VAlign::Middle);
      c.m.pop_clip();
    }
  } else if (n > 0) {
    // One image pixel per cell; cells past the last token stay transparent.
    const std::int64_t cells = (static_cast<std::int64_t>(n) + T.per_cell - 1) / T.per_cell;
    Image img;
    img.width = static_cast<int>(T.cells_per_row);
    img.height = static_cast<int>(T.rows);
    img.pixels.assign(static_cast<std::size_t>(img.width) * static_cast<std::size_t>(img.height), Color{0, 0, 0, 0});
    std::vector<std::int64_t> counts(t.categories.size());
    for (std::int64_t q = 0; q < cells; ++q) {
      const std::size_t a = static_cast<std::size_t>(q * T.per_cell);
      const std::size_t e = std::min(n, static_cast<std::size_t>((q + 1) * T.per_cell));
      Color col = c.th.missing;
      if (by_category) {
        int pick = -1;
        if (t.aggregate == Aggregate::Max) {
          for (std::size_t i = a; i < e; ++i) pick = std::max(pick, t.category[i]);
        } else {
          std::fill(counts.begin(), counts.end(), 0);
          std::int64_t best = 0;
          for (std::size_t i = a; i < e; ++i)
            if (t.category[i] >= 0) ++counts[static_cast<std::size_t>(t.category[i])];
          for (std::size_t k = 0; k < counts.size(); ++k)
            if (counts[k] > 0 && counts[k] >= best) best = counts[k], pick = static_cast<int>(k);
        }
        col = color_of_category(pick);
      } else if (!t.values.empty()) {
        const auto agg = downsample(std::span<const float>(t.values.data() + a, e - a), 1,
                                    static_cast<std::int64_t>(e - a), 1, 1, t.aggregate);
        col = vc(agg[0]);
      }
      img.pixels[static_cast<std::size_t>(q)] = col;
    }
    const Rect strip{L.plot.x, L.plot.y, static_cast<double>(T.cells_per_row) * T.cell_w, L.plot.h};
    if (T.rows == 1) {
      c.m.image({strip.x, strip.y, strip.w, T.row_h}, img, ImageFilter::Nearest);
    } else {
      // Stretch over all rows, then paint the gaps between rows.
      c.m.image({strip.x, strip.y, strip.w, static_cast<double>(T.rows) * T.row_pitch}, img, ImageFilter::Nearest);
      for (std::int64_t r = 0; r + 1 < T.rows; ++r)
        c.m.fill_rect({strip.x - 0.5, strip.y + static_cast<double>(r) * T.row_pitch + T.row_h, strip.w + 1,
                       T.row_pitch - T.row_h},
                      c.th.background);
      c.m.fill_rect({strip.x - 0.5, strip.y + static_cast<double>(T.rows) * T.row_pitch - (T.row_pitch - T.row_h),
                     strip.w + 1, T.row_pitch - T.row_h + 0.5},
                    c.th.background);
    }
    // Row start positions.
    const auto every = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(c.tick_h * 1.05 / T.row_pitch)));
    if (T.rows > 1)
      for (std::int64_t r = 0; r < T.rows; r += every)
        c.m.text({strip.x - kTickLen, strip.y + static_cast<double>(r) * T.row_pitch + T.row_h / 2},
                 std::to_string(t.first_position + r * T.cells_per_row * T.per_cell), c.tick, fg, HAlign::Right,
                 VAlign::Middle);
    double note_y = strip.y + static_cast<double>(T.rows) * T.row_pitch + 2;
    if (T.rows == 1) {
      note_y = strip.y + T.row_h + kTickLen + 3;
      for (const auto& tk : L.x.ticks) {
        c.m.line({tk.px, strip.y + T.row_h}, {tk.px, strip.y + T.row_h + kTickLen}, Stroke{fg, 0.8});
        c.m.text({tk.px, note_y}, tk.label, c.tick, fg, HAlign::Center, VAlign::Top);
      }
      note_y += c.tick_h + 2;
    }
    std::string note = "token position";
    if (T.per_cell > 1)
      note += " (1 px = " + std::to_string(T.per_cell) + " tokens, " +
              (t.aggregate == Aggregate::Max ? (by_category ? "highest category" : "max")
                                             : (by_category ? "majority" : "mean")) +
              ")";
    if (T.rows > 1) note += "; rows start at the position on the left";
    c.m.text({strip.x, note_y}, detail::elide(c.m, note, c.tick, L.cell.right() - strip.x), c.tick, fg, HAlign::Left,
             VAlign::Top);
  }
  // Key.
  if (by_category && !L.legend.box.empty()) {
    double x = L.legend.box.x, y = L.legend.box.y;
    for (const auto& e : L.legend.entries) {
      const double w = 14 + 4 + c.m.measure(e.label, c.legend).width + 14;
      if (x > L.legend.box.x && x + w > L.legend.box.right()) x = L.legend.box.x, y += L.legend.row_h;
      const double cy = y + L.legend.row_h / 2;
      c.m.fill_rect({x, cy - 5, 14, 10}, e.color);
      c.m.text({x + 18, cy}, e.label, c.legend, fg, HAlign::Left, VAlign::Middle);
      x += w;
    }
  }
  if (!by_category && !t.values.empty()) draw_colorbar(c, L, cm, t.colorbar_label);
}

}  // namespace

Image heatmap_image(const Heatmap& h, Range range, std::int64_t max_w, std::int64_t max_h, Color missing) {
  Image img;
  if (h.rows <= 0 || h.cols <= 0) {
    img.width = img.height = 1;
    img.pixels = {missing};
    return img;
  }
  const std::int64_t ow = std::clamp<std::int64_t>(max_w, 1, h.cols), oh = std::clamp<std::int64_t>(max_h, 1, h.rows);
  std::vector<float> reduced;
  std::span<const float> vals(h.values);
  if (ow != h.cols || oh != h.rows) {
    reduced = downsample(h.values, h.rows, h.cols, oh, ow, h.categories.empty() ? h.aggregate : Aggregate::Max);
    vals = reduced;
  }
  const Colormap& cm = colormap(h.colormap);
  const double scale = 255.0 / (range.hi - range.lo);
  std::vector<Color> palette;
  for (std::size_t k = 0; k < h.categories.size(); ++k)
    palette.push_back(h.categories[k].color.value_or(categorical(k)));
  img.width = static_cast<int>(ow);
  img.height = static_cast<int>(oh);
  img.pixels.resize(static_cast<std::size_t>(ow * oh));
  for (std::int64_t i = 0; i < oh; ++i) {
    Color* out = img.pixels.data() + (h.origin_top ? i : oh - 1 - i) * ow;
    const float* in = vals.data() + i * ow;
    for (std::int64_t j = 0; j < ow; ++j) {
      const double v = in[j];
      if (!std::isfinite(v)) {
        out[j] = missing;
        continue;
      }
      if (!palette.empty()) {
        out[j] = palette[std::min(palette.size() - 1, static_cast<std::size_t>(std::max(0.0, v)))];
        continue;
      }
      const double t = std::clamp((v - range.lo) * scale, 0.0, 255.0);
      out[j] = cm.table()[static_cast<std::size_t>(std::lround(t))];
    }
  }
  return img;
}

void draw_figure(const Figure& figure, Canvas& canvas) {
  validate(figure);
  draw_figure(figure, layout_figure(figure, canvas), canvas);
}

void draw_figure(const Figure& f, const FigureLayout& layout, Canvas& cv) {
  Ctx c(cv, f.theme);
  const Theme& th = f.theme;
  cv.fill_rect({0, 0, static_cast<double>(f.width), static_cast<double>(f.height)}, th.background);
  if (!layout.title.empty()) {
    const Font tf{th.title_size, true};
    cv.text({layout.title.x + layout.title.w / 2, layout.title.y},
            detail::elide(cv, detail::clean_line(f.title), tf, layout.title.w), tf, th.foreground, HAlign::Center,
            VAlign::Top);
  }
  for (std::size_t i = 0; i < f.panels.size() && i < layout.panels.size(); ++i) {
    const PanelLayout& L = layout.panels[i];
    std::visit(
        Overload{[&](const Heatmap& p) { draw_heatmap(c, p, L); }, [&](const LinePlot& p) { draw_line(c, p, L); },
                 [&](const ScatterPlot& p) { draw_scatter(c, p, L); },
                 [&](const TokenStrip& p) { draw_tokens(c, p, L); }, [&](const BarChart& p) { draw_bar(c, p, L); }},
        f.panels[i]);
    draw_panel_title(c, L, panel_title(f.panels[i]));
  }
  if (!layout.caption.empty()) {
    const Font cf{th.caption_size, false, true};
    const double lh = detail::line_height(cv, cf) * 1.25;
    const auto mix = [](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>((a * 2 + b) / 3); };
    const Color muted{mix(th.foreground.r, th.background.r), mix(th.foreground.g, th.background.g),
                      mix(th.foreground.b, th.background.b)};
    for (std::size_t k = 0; k < layout.caption_lines.size(); ++k)
      cv.text({layout.caption.x, layout.caption.y + static_cast<double>(k) * lh}, layout.caption_lines[k], cf, muted,
              HAlign::Left, VAlign::Top);
  }
}

}  // namespace kvscope::viz
