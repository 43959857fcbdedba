// Figure layout: grid, margins, axes, ticks, colour bars, legends, token strips.
// Sections (search for "// ---- NAME"):
//   number formatting                      decimals_for, drop_negative_zero, to_fixed
//   ticks                                  nice_step, nice_ticks, format_tick
//   axis maps, downsampling, colour range  AxisMap::to_px / to_data, downsample, color_range
//   drawing context                        detail::Ctx (fonts and line heights of a theme)
//   panel helpers                          inset, take_title, DataRange, resolve, in_span
//   tick placement                         crowded, user / linear / log / axis / categorical ticks
//   axes                                   AxesSpec, layout_axes (plot rectangle, x / y maps)
//   legends                                make_legend, place_legend
//   categories and colour bars             cats_of, plan_colorbar, place_colorbar
//   panels: heatmap                        sample_points (legend placement), layout_heatmap
//   panels: line and scatter               series_entries, layout_xy, layout_line, layout_scatter
//   panels: bar chart                      layout_bar
//   panels: token strip                    layout_tokens
//   figure                                 layout_figure (title, grid of panels, caption)
#include "kvscope/viz/layout.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "layout_internal.h"
#include "text.h"

namespace kvscope::viz {

// ---- number formatting --------------------------------------------------------------------------

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Smallest number of decimals that writes `step` exactly (up to 1e-6 relative), at most 10.
int decimals_for(double step) {
  step = std::abs(step);
  double s = step;
  for (int d = 0; d <= 10; ++d, s *= 10)
    if (std::abs(s - std::round(s)) <= 1e-6 * std::max(1.0, s)) return d;
  return 10;
}

std::string drop_negative_zero(std::string s) {
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("0.", 1) == std::string::npos) s.erase(0, 1);
  return s;
}

std::string to_fixed(double v, int decimals) {
  char buf[128];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  return drop_negative_zero(std::string(buf, r.ptr));
}

}  // namespace

// ---- ticks --------------------------------------------------------------------------------------

double nice_step(double span, int target, double min_step) {
  span = std::abs(span);
  if (!(span > 0) || !std::isfinite(span)) span = 1;
  const double raw = span / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  if (min_step > 0 && step < min_step) {
    const double m = std::pow(10.0, std::floor(std::log10(min_step)));
    const double g = min_step / m;
    step = (g <= 1 + 1e-9 ? 1 : g <= 2 + 1e-9 ? 2 : g <= 5 + 1e-9 ? 5 : 10) * m;
  }
  return step;
}

std::vector<double> nice_ticks(double lo, double hi, int target, double min_step) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (lo > hi) std::swap(lo, hi);
  if (lo == hi) {
    const double d = std::max(0.5, std::abs(lo) * 0.1);
    lo -= d;
    hi += d;
  }
  const double step = nice_step(hi - lo, target, min_step);
  // Steps below 1 that are 1/k (0.1, 0.2, 0.25, 0.5, ...): divide, which is exact for the ends.
  const double inv = 1.0 / step;
  const bool divide = step < 1 && std::abs(inv - std::round(inv)) < 1e-9 * inv;
  const double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  std::vector<double> out;
  if (k1 - k0 > 10000) return out;
  for (double k = k0; k <= k1; k += 1) {
    double v = divide ? k / std::round(inv) : k * step;
    if (std::abs(v) < step * 1e-9) v = 0;
    out.push_back(v);
  }
  return out;
}

std::string format_tick(double v, double step) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  step = std::abs(step);
  if (!(step > 0) || !std::isfinite(step)) step = std::abs(v) > 0 ? std::abs(v) : 1;
  if (std::abs(v) < step * 1e-9) v = 0;
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (step < 1e-4 || step >= 1e9) {
    const double e = std::floor(std::log10(a) + 1e-12);
    const int d = std::min(6, decimals_for(step / std::pow(10.0, e)));
    char buf[128];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, d);
    return std::string(buf, r.ptr);
  }
  if (step >= 1e5) return to_fixed(v / 1e6, decimals_for(step / 1e6)) + "M";
  if (step >= 1e3) return to_fixed(v / 1e3, decimals_for(step / 1e3)) + "k";
  return to_fixed(v, decimals_for(step));
}

// ---- axis maps, downsampling, colour range ------------------------------------------------------

double AxisMap::to_px(double v) const {
  if (std::isnan(v)) return kNaN;
  double t;
  if (log) {
    if (!(v > 0)) return kNaN;
    t = (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  } else {
    t = (v - lo) / (hi - lo);
  }
  return p0 + t * (p1 - p0);
}

double AxisMap::to_data(double px) const {
  const double t = (px - p0) / (p1 - p0);
  if (log) return std::pow(10.0, std::log10(lo) + t * (std::log10(hi) - std::log10(lo)));
  return lo + t * (hi - lo);
}

std::vector<float> downsample(std::span<const float> values, std::int64_t rows, std::int64_t cols,
                              std::int64_t out_rows, std::int64_t out_cols, Aggregate how) {
  if (rows < 0 || cols < 0 || values.size() != static_cast<std::size_t>(rows * cols))
    throw std::invalid_argument("downsample: " + std::to_string(values.size()) + " values for " + std::to_string(rows) +
                                "x" + std::to_string(cols));
  if (out_rows < 1 || out_cols < 1 || out_rows > std::max<std::int64_t>(rows, 1) ||
      out_cols > std::max<std::int64_t>(cols, 1))
    throw std::invalid_argument("downsample: output " + std::to_string(out_rows) + "x" + std::to_string(out_cols) +
                                " must be 1.." + std::to_string(rows) + " x 1.." + std::to_string(cols));
  const auto bins = [](std::int64_t n, std::int64_t m) {
    std::vector<std::int64_t> bin(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t k = i * n / m; k < (i + 1) * n / m; ++k) bin[static_cast<std::size_t>(k)] = i;
    return bin;
  };
  const auto rb = bins(rows, out_rows), cb = bins(cols, out_cols);
  const std::size_t n_out = static_cast<std::size_t>(out_rows * out_cols);
  std::vector<float> out(n_out, std::numeric_limits<float>::quiet_NaN());
  if (how == Aggregate::Max) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* orow = out.data() + rb[static_cast<std::size_t>(r)] * out_cols;
      const float* in = values.data() + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const float v = in[c];
        float& o = orow[cb[static_cast<std::size_t>(c)]];
        if (std::isfinite(v) && !(o >= v)) o = v;  // !(o >= v) is true for o NaN
      }
    }
  } else {
    std::vector<double> sum(n_out, 0.0);
    std::vector<std::int64_t> count(n_out, 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::size_t obase = static_cast<std::size_t>(rb[static_cast<std::size_t>(r)] * out_cols);
      const float* in = values.data() + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        if (!std::isfinite(in[c])) continue;
        const std::size_t o = obase + static_cast<std::size_t>(cb[static_cast<std::size_t>(c)]);
        sum[o] += in[c];
        ++count[o];
      }
    }
    for (std::size_t o = 0; o < n_out; ++o)
      if (count[o] > 0) out[o] = static_cast<float>(sum[o] / static_cast<double>(count[o]));
  }
  return out;
}

Range color_range(std::span<const float> values, const std::optional<Range>& fixed, const Colormap& cmap) {
  if (fixed) return *fixed;
  double lo = kInf, hi = -kInf;
  for (float v : values)
    if (std::isfinite(v)) {
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
    }
  if (lo > hi) return cmap.diverging() ? Range{-1, 1} : Range{0, 1};
  if (cmap.diverging()) {
    double m = std::max(std::abs(lo), std::abs(hi));
    if (m == 0) m = 1;
    return {-m, m};
  }
  if (lo == hi) {
    const double d = lo == 0 ? 0.5 : std::abs(lo) * 0.1;
    return {lo - d, hi + d};
  }
  // Near-constant values (a spread under 1% of their magnitude, e.g. 287 vs 288 kept entries) get
  // a scale 10% of their magnitude wide around their middle, so noise is not shown at full contrast.
  const double mag = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo < 0.01 * mag) {
    const double mid = 0.5 * (lo + hi);
    return {mid - 0.05 * mag, mid + 0.05 * mag};
  }
  return {lo, hi};
}

// ---- drawing context ----------------------------------------------------------------------------

namespace detail {

Ctx::Ctx(Canvas& canvas, const Theme& theme) : m(canvas), th(theme) {
  tick = Font{theme.tick_size};
  label = Font{theme.label_size};
  title = Font{theme.panel_title_size, true};
  legend = Font{theme.legend_size};
  token = Font{theme.token_size};
  tick_h = detail::line_height(m, tick);
  label_h = detail::line_height(m, label);
  title_h = detail::line_height(m, title);
  legend_h = detail::line_height(m, legend);
}

}  // namespace detail

// ---- panel helpers ------------------------------------------------------------------------------

namespace {

using detail::Ctx;

constexpr double kTickLen = 4;
constexpr double kColorbarGap = 10, kColorbarW = 14;

Rect inset(Rect r, double d) { return {r.x + d, r.y + d, std::max(0.0, r.w - 2 * d), std::max(0.0, r.h - 2 * d)}; }

// Takes the title line off the top of `inner`.
Rect take_title(Ctx& c, Rect& inner, const std::string& title, bool force) {
  if (title.empty() && !force) return {};
  const double h = c.title_h;
  const Rect r{inner.x, inner.y, inner.w, h};
  inner.y += h + 6;
  inner.h = std::max(0.0, inner.h - h - 6);
  return r;
}

struct DataRange {
  double lo = kInf, hi = -kInf;
  void add(double v, bool log) {
    if (!std::isfinite(v) || (log && v <= 0)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

Range resolve(const Axis& a, const DataRange& d, double pad) {
  if (a.range) return *a.range;
  if (d.empty()) return a.log ? Range{1, 10} : Range{0, 1};
  if (a.log) {
    double l0 = std::log10(d.lo), l1 = std::log10(d.hi);
    if (l0 == l1) l0 -= 0.5, l1 += 0.5;
    const double p = (l1 - l0) * pad;
    return {std::pow(10.0, l0 - p), std::pow(10.0, l1 + p)};
  }
  double lo = d.lo, hi = d.hi;
  if (lo == hi) {
    const double w = lo == 0 ? 0.5 : std::abs(lo) * 0.1;
    lo -= w;
    hi += w;
  }
  const double p = (hi - lo) * pad;
  return {lo - p, hi + p};
}

bool in_span(const AxisMap& map, double px) {
  const double a = std::min(map.p0, map.p1), b = std::max(map.p0, map.p1);
  return px >= a - 0.5 && px <= b + 0.5;
}

// ---- tick placement -----------------------------------------------------------------------------

// True when neighbouring labels would touch.
bool crowded(Ctx& c, const std::vector<Tick>& ticks, bool horizontal) {
  const Tick* prev = nullptr;
  double prev_w = 0;
  for (const auto& t : ticks) {
    if (t.label.empty()) continue;
    const double w = horizontal ? c.m.measure(t.label, c.tick).width : c.tick_h;
    if (prev && std::abs(t.px - prev->px) < (w + prev_w) / 2 + (horizontal ? 8 : 2)) return true;
    prev = &t;
    prev_w = w;
  }
  return false;
}

std::vector<Tick> user_ticks(const Axis& a, const AxisMap& map) {
  double step = kInf;
  for (std::size_t i = 1; i < a.ticks.size(); ++i) {
    const double d = std::abs(a.ticks[i] - a.ticks[i - 1]);
    if (d > 0) step = std::min(step, d);
  }
  if (!std::isfinite(step)) step = a.ticks.empty() || a.ticks[0] == 0 ? 1 : std::abs(a.ticks[0]);
  std::vector<Tick> out;
  for (std::size_t i = 0; i < a.ticks.size(); ++i) {
    const double px = map.to_px(a.ticks[i]);
    if (std::isnan(px) || !in_span(map, px)) continue;
    out.push_back({a.ticks[i], px, a.tick_labels.empty() ? format_tick(a.ticks[i], step) : a.tick_labels[i]});
  }
  return out;
}

std::vector<Tick> linear_ticks(Ctx& c, const AxisMap& map, bool horizontal, double min_step, int max_target = 10) {
  const double length = std::abs(map.p1 - map.p0);
  int target = std::clamp(static_cast<int>(std::lround(length / (horizontal ? 80.0 : 42.0))), 2, max_target);
  for (;; --target) {
    const auto values = nice_ticks(map.lo, map.hi, target, min_step);
    const double step = values.size() >= 2 ? values[1] - values[0] : nice_step(map.hi - map.lo, target, min_step);
    std::vector<Tick> ticks;
    for (double v : values) {
      const double px = map.to_px(v);
      if (in_span(map, px)) ticks.push_back({v, px, format_tick(v, step)});
    }
    if (!crowded(c, ticks, horizontal)) return ticks;
    if (target <= 2) {  // still crowded (tiny plot): keep every other tick until they fit
      while (ticks.size() > 2 && crowded(c, ticks, horizontal)) {
        std::vector<Tick> half;
        for (std::size_t i = 0; i < ticks.size(); i += 2) half.push_back(ticks[i]);
        ticks = std::move(half);
      }
      return ticks;
    }
  }
}

std::vector<Tick> log_ticks(Ctx& c, const AxisMap& map, bool horizontal) {
  const double l0 = std::log10(map.lo), l1 = std::log10(map.hi);
  if (l1 - l0 < 1) {  // less than a decade: plain nice ticks
    AxisMap lin = map;
    lin.log = false;
    auto ticks = linear_ticks(c, lin, horizontal, 0, 4);
    for (auto& t : ticks) t.px = map.to_px(t.value);
    std::erase_if(ticks, [&](const Tick& t) { return std::isnan(t.px); });
    return ticks;
  }
  const double length = std::abs(map.p1 - map.p0);
  const int k0 = static_cast<int>(std::ceil(l0 - 1e-9)), k1 = static_cast<int>(std::floor(l1 + 1e-9));
  const int decades = k1 - k0 + 1;
  const int target = std::clamp(static_cast<int>(length / (horizontal ? 60.0 : 30.0)), 2, 12);
  int every = std::max(1, (decades + target - 1) / target);
  std::vector<Tick> ticks;
  for (;; ++every) {
    ticks.clear();
    for (int k = k0; k <= k1; ++k) {
      if (((k % every) + every) % every != 0) continue;
      const double v = std::pow(10.0, k);
      ticks.push_back({v, map.to_px(v), format_tick(v, v)});
    }
    if (!crowded(c, ticks, horizontal) || every > decades) break;
  }
  if (every == 1 && l1 - l0 <= 8) {
    std::vector<Tick> minor;
    for (int k = static_cast<int>(std::floor(l0)); k <= k1; ++k)
      for (int j = 2; j <= 9; ++j) {
        const double v = j * std::pow(10.0, k);
        if (v >= map.lo && v <= map.hi) minor.push_back({v, map.to_px(v), ""});
      }
    // Under three labelled decades: also label 2x and 5x, if they do not crowd.
    if (ticks.size() < 3) {
      std::vector<Tick> labelled = ticks;
      for (const auto& t : minor) {
        const double mant = t.value / std::pow(10.0, std::floor(std::log10(t.value) + 1e-9));
        if (std::abs(mant - 2) < 1e-6 || std::abs(mant - 5) < 1e-6)
          labelled.push_back({t.value, t.px, format_tick(t.value, t.value)});
      }
      std::sort(labelled.begin(), labelled.end(), [](const Tick& a, const Tick& b) { return a.value < b.value; });
      if (!crowded(c, labelled, horizontal)) {
        for (auto& t : minor)
          for (const auto& l : labelled)
            if (l.value == t.value) t.label = l.label;
      }
    }
    ticks.insert(ticks.end(), minor.begin(), minor.end());
  }
  return ticks;
}

std::vector<Tick> axis_ticks(Ctx& c, const Axis& a, const AxisMap& map, bool horizontal, double min_step) {
  if (!a.ticks.empty()) return user_ticks(a, map);
  return map.log ? log_ticks(c, map, horizontal) : linear_ticks(c, map, horizontal, min_step);
}

// Categorical ticks (one per label at data value `value`), thinned so labels do not touch and
// elided to max_label_w.
std::vector<Tick> category_ticks(Ctx& c, const std::vector<std::pair<double, std::string>>& cats, const AxisMap& map,
                                 bool horizontal, bool rotated, double max_label_w) {
  std::vector<Tick> out;
  if (cats.empty()) return out;
  const double spacing =
      cats.size() >= 2 ? std::abs(map.to_px(cats[1].first) - map.to_px(cats[0].first)) : std::abs(map.p1 - map.p0);
  double need = c.tick_h * 1.1;
  if (horizontal && !rotated) {
    double w = 0;
    for (const auto& [v, s] : cats) w = std::max(w, std::min(max_label_w, c.m.measure(s, c.tick).width));
    need = w + 6;
  }
  const std::size_t k = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(need / std::max(spacing, 1e-9))));
  for (std::size_t i = 0; i < cats.size(); i += k)
    out.push_back({cats[i].first, map.to_px(cats[i].first), detail::elide(c.m, cats[i].second, c.tick, max_label_w)});
  return out;
}

double max_label_width(Ctx& c, const std::vector<Tick>& ticks) {
  double w = 0;
  for (const auto& t : ticks)
    if (!t.label.empty()) w = std::max(w, c.m.measure(t.label, c.tick).width);
  return w;
}

// ---- axes ---------------------------------------------------------------------------------------

struct AxesSpec {
  const Axis* x = nullptr;
  const Axis* y = nullptr;
  Range xr, yr;
  bool xlog = false, ylog = false;
  double x_min_step = 0, y_min_step = 0;
  std::vector<std::pair<double, std::string>> x_cats, y_cats;  // categorical axes
  bool y_down = false;                                         // y lo at the top (heatmap rows from the top)
  double right_reserve = 0;                                    // colour bar / outside legend
  bool allow_rotated_x = false;                                // bar categories
  bool key_row = false;  // keep the x-label row even without an x label (heatmap mask key)
};

// Places the plot rectangle inside `inner` leaving room for ticks and labels; fills L.plot/x/y.
void layout_axes(Ctx& c, PanelLayout& L, Rect inner, const AxesSpec& s) {
  const double xlabel_h = s.x->label.empty() && !s.key_row ? 0 : std::max(c.label_h, s.key_row ? c.legend_h : 0.0) + 4;
  const double ylabel_w = s.y->label.empty() ? 0 : c.label_h + 6;
  const double top_pad = c.tick_h / 2 + 1;
  const double right_pad = std::max({s.right_reserve, 14.0, c.min_right - (L.cell.right() - inner.right())});
  const double min_left = c.min_left - (inner.x - L.cell.x);
  double left = std::max(ylabel_w + kTickLen + 3 + 30, min_left);
  double bottom = kTickLen + 3 + c.tick_h + xlabel_h;
  for (int pass = 0;; ++pass) {
    L.plot = {inner.x + left, inner.y + top_pad, std::max(10.0, inner.w - left - right_pad),
              std::max(10.0, inner.h - top_pad - bottom)};
    L.x.map = {s.xr.lo, s.xr.hi, L.plot.x, L.plot.right(), s.xlog};
    L.y.map = s.y_down ? AxisMap{s.yr.lo, s.yr.hi, L.plot.y, L.plot.bottom(), s.ylog}
                       : AxisMap{s.yr.lo, s.yr.hi, L.plot.bottom(), L.plot.y, s.ylog};
    const double max_y_label = inner.w * 0.35;
    if (!s.y->ticks.empty() || s.y_cats.empty())
      L.y.ticks = axis_ticks(c, *s.y, L.y.map, false, s.y_min_step);
    else
      L.y.ticks = category_ticks(c, s.y_cats, L.y.map, false, false, max_y_label);
    for (auto& t : L.y.ticks) t.label = detail::elide(c.m, t.label, c.tick, max_y_label);

    L.x.rotated_labels = false;
    double new_bottom = kTickLen + 3 + c.tick_h + xlabel_h;
    if (!s.x->ticks.empty() || s.x_cats.empty()) {
      L.x.ticks = axis_ticks(c, *s.x, L.x.map, true, s.x_min_step);
    } else {
      const double slot = L.plot.w / static_cast<double>(s.x_cats.size());
      double widest = 0;
      for (const auto& [v, lab] : s.x_cats) widest = std::max(widest, c.m.measure(lab, c.tick).width);
      if (s.allow_rotated_x && widest > slot - 4) {
        const double max_w = std::max(20.0, inner.h * 0.4);
        L.x.rotated_labels = true;
        L.x.ticks = category_ticks(c, s.x_cats, L.x.map, true, true, max_w);
        new_bottom = kTickLen + 3 + std::min(widest, max_w) + xlabel_h;
      } else {
        L.x.ticks = category_ticks(c, s.x_cats, L.x.map, true, false, std::max(slot * 4, 40.0));
      }
    }
    const double new_left = std::max(ylabel_w + kTickLen + 3 + max_label_width(c, L.y.ticks), min_left);
    if ((std::abs(new_left - left) < 0.5 && std::abs(new_bottom - bottom) < 0.5) || pass == 3) break;
    left = new_left;
    bottom = new_bottom;
  }
}

// ---- legends ------------------------------------------------------------------------------------

// Legend size for entries (labels elided to max_w overall).
LegendLayout make_legend(Ctx& c, std::vector<LegendEntry> entries, double max_w) {
  LegendLayout g;
  if (entries.empty()) return g;
  g.row_h = c.legend_h * 1.3;
  const double chrome = 6 + 22 + 5 + 6;
  double tw = 0;
  for (auto& e : entries) {
    e.label = detail::elide(c.m, e.label, c.legend, std::max(10.0, max_w - chrome));
    tw = std::max(tw, c.m.measure(e.label, c.legend).width);
  }
  g.entries = std::move(entries);
  g.box = {0, 0, chrome + tw, g.row_h * static_cast<double>(g.entries.size()) + 6};
  return g;
}

// Puts an inside legend into a corner of the plot; Auto picks the corner over the fewest points.
void place_legend(LegendLayout& g, LegendPos pos, const Rect& plot, const std::vector<Point>& points) {
  if (g.entries.empty()) return;
  const double m = 6;
  const Rect tr{plot.right() - m - g.box.w, plot.y + m, g.box.w, g.box.h};
  const Rect tl{plot.x + m, plot.y + m, g.box.w, g.box.h};
  const Rect br{plot.right() - m - g.box.w, plot.bottom() - m - g.box.h, g.box.w, g.box.h};
  const Rect bl{plot.x + m, plot.bottom() - m - g.box.h, g.box.w, g.box.h};
  switch (pos) {
    case LegendPos::TopRight:
      g.box = tr;
      return;
    case LegendPos::TopLeft:
      g.box = tl;
      return;
    case LegendPos::BottomRight:
      g.box = br;
      return;
    case LegendPos::BottomLeft:
      g.box = bl;
      return;
    case LegendPos::Outside:
      g.box = {plot.right() + 10, plot.y, g.box.w, g.box.h};
      return;
    case LegendPos::None:
      g = {};
      return;
    case LegendPos::Auto:
      break;
  }
  const Rect cands[] = {tr, tl, br, bl};
  std::size_t best = 0, best_count = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < 4; ++i) {
    std::size_t n = 0;
    for (const auto& p : points) n += cands[i].contains(p);
    if (n < best_count) best = i, best_count = n;
  }
  g.box = cands[best];
}

// ---- categories and colour bars -----------------------------------------------------------------

std::vector<std::pair<double, std::string>> cats_of(const std::vector<std::string>& labels, double origin,
                                                    double step) {
  std::vector<std::pair<double, std::string>> out;
  for (std::size_t i = 0; i < labels.size(); ++i)
    out.emplace_back(origin + static_cast<double>(i) * step, detail::clean_line(labels[i]));
  return out;
}

// Colour bar at the right of the plot: reserve its width before the axes, place it after.
struct ColorbarPlan {
  std::vector<double> values;
  double step = 1;
  double width = 0;
};

ColorbarPlan plan_colorbar(Ctx& c, Range vr, const std::string& label, double est_h) {
  ColorbarPlan p;
  const int target = std::clamp(static_cast<int>(est_h / 45), 2, 8);
  p.values = nice_ticks(vr.lo, vr.hi, target);
  p.step = p.values.size() >= 2 ? p.values[1] - p.values[0] : nice_step(vr.hi - vr.lo, target);
  double w = 0;
  for (double v : p.values) w = std::max(w, c.m.measure(format_tick(v, p.step), c.tick).width);
  p.width = kColorbarGap + kColorbarW + kTickLen + 3 + w + (label.empty() ? 0 : 6 + c.label_h) + 2;
  return p;
}

void place_colorbar(PanelLayout& L, const ColorbarPlan& p, Range vr, Rect bar) {
  L.colorbar = bar;
  L.cbar.map = {vr.lo, vr.hi, bar.bottom(), bar.y, false};
  L.cbar.ticks.clear();
  for (double v : p.values) {
    const double px = L.cbar.map.to_px(v);
    if (in_span(L.cbar.map, px)) L.cbar.ticks.push_back({v, px, format_tick(v, p.step)});
  }
}

// ---- panels: heatmap ----------------------------------------------------------------------------

// Up to `per_series` points of a series, evenly sampled, for legend placement.
template <class XS, class YS>
void sample_points(const XS& xs, const YS& ys, const PanelLayout& L, std::vector<Point>& out,
                   std::size_t per_series = 400) {
  const std::size_t n = std::min(xs.size(), ys.size());
  const std::size_t stride = std::max<std::size_t>(1, n / per_series);
  for (std::size_t i = 0; i < n; i += stride) {
    const double px = L.x.map.to_px(xs[i]), py = L.y.map.to_px(ys[i]);
    if (std::isfinite(px) && std::isfinite(py)) out.push_back({px, py});
  }
}

PanelLayout layout_heatmap(Ctx& c, const Heatmap& h, Rect cell) {
  PanelLayout L;
  L.cell = cell;
  Rect inner = inset(cell, 4);
  const bool categorical = !h.categories.empty();
  const bool key = (!h.mask.empty() && !h.mask_label.empty()) || categorical;
  L.title = take_title(c, inner, h.title, false);
  const Colormap& cm = colormap(h.colormap);
  L.value_range =
      categorical ? Range{0, static_cast<double>(h.categories.size())} : color_range(h.values, h.value_range, cm);
  auto cbp = plan_colorbar(c, L.value_range, h.colorbar_label, inner.h * 0.8);
  if (categorical) cbp.width = 0;

  AxesSpec s;
  s.x = &h.x;
  s.y = &h.y;
  const double cols = static_cast<double>(std::max<std::int64_t>(h.cols, 1));
  const double rows = static_cast<double>(std::max<std::int64_t>(h.rows, 1));
  s.xr = {h.x_origin - h.x_step / 2, h.x_origin + (cols - 0.5) * h.x_step};
  s.yr = {h.y_origin - h.y_step / 2, h.y_origin + (rows - 0.5) * h.y_step};
  s.x_min_step = h.x_step;
  s.y_min_step = h.y_step;
  s.x_cats = cats_of(h.col_labels, h.x_origin, h.x_step);
  s.y_cats = cats_of(h.row_labels, h.y_origin, h.y_step);
  s.y_down = h.origin_top;
  s.right_reserve = cbp.width;
  s.key_row = key;
  layout_axes(c, L, inner, s);
  const double row_y = L.plot.bottom() + kTickLen + 3 + c.tick_h + 4;
  const double key_y = row_y + (std::max(c.label_h, c.legend_h) - 10) / 2;
  if (categorical) {
    // Swatches right-aligned in the x-label row, in category order.
    double x = L.plot.right();
    for (auto it = h.categories.rbegin(); it != h.categories.rend(); ++it) {
      x -= c.m.measure(detail::clean_line(it->name), c.legend).width + 4 + 16;
      L.category_keys.insert(L.category_keys.begin(), Rect{x, key_y, 16, 10});
      x -= 12;
    }
    return L;
  }
  if (key) {
    // Right-aligned in the x-label row, under the plot.
    const double tw = c.m.measure(detail::clean_line(h.mask_label), c.legend).width;
    L.mask_key = {L.plot.right() - tw - 4 - 16, key_y, 16, 10};
  }
  place_colorbar(L, cbp, L.value_range, {L.plot.right() + kColorbarGap, L.plot.y, kColorbarW, L.plot.h});
  return L;
}

// ---- panels: line and scatter -------------------------------------------------------------------

std::vector<LegendEntry> series_entries(const LinePlot& p) {
  std::vector<LegendEntry> out;
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const auto& s = p.series[i];
    if (s.name.empty()) continue;
    out.push_back({detail::clean_line(s.name), s.color.value_or(categorical(i)), s.line, s.marker, false, s.width});
  }
  for (const RefLine& r : p.rules)
    if (!r.name.empty()) out.push_back({detail::clean_line(r.name), r.color, r.line, Marker::None, false, r.width});
  for (const XSpan& sp : p.spans)
    if (!sp.name.empty())
      out.push_back({detail::clean_line(sp.name), sp.color.with_alpha(90), LineStyle::None, Marker::None, true});
  return out;
}

// Shared by line and scatter plots: legend sizing, axes, legend placement.
template <class P>
PanelLayout layout_xy(Ctx& c, const P& p, Rect cell, Range xr, Range yr, std::vector<LegendEntry> entries,
                      const std::vector<std::pair<const std::vector<double>*, const std::vector<double>*>>& data) {
  PanelLayout L;
  L.cell = cell;
  Rect inner = inset(cell, 4);
  L.title = take_title(c, inner, p.title, false);
  L.legend = make_legend(c, std::move(entries), inner.w * 0.45);
  AxesSpec s;
  s.x = &p.x;
  s.y = &p.y;
  s.xr = xr;
  s.yr = yr;
  s.xlog = p.x.log;
  s.ylog = p.y.log;
  if (p.legend == LegendPos::Outside && !L.legend.entries.empty()) s.right_reserve = L.legend.box.w + 16;
  layout_axes(c, L, inner, s);
  std::vector<Point> pts;
  if (p.legend == LegendPos::Auto)
    for (const auto& [xs, ys] : data) sample_points(*xs, *ys, L, pts);
  place_legend(L.legend, p.legend, L.plot, pts);
  return L;
}

PanelLayout layout_line(Ctx& c, const LinePlot& p, Rect cell) {
  DataRange dx, dy;
  std::vector<std::pair<const std::vector<double>*, const std::vector<double>*>> data;
  for (const auto& s : p.series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      const bool okx = std::isfinite(s.x[i]) && (!p.x.log || s.x[i] > 0);
      const bool oky = std::isfinite(s.y[i]) && (!p.y.log || s.y[i] > 0);
      if (okx && oky) {
        dx.add(s.x[i], p.x.log);
        dy.add(s.y[i], p.y.log);
      }
    }
    data.emplace_back(&s.x, &s.y);
  }
  for (const RefLine& r : p.rules)
    if (!r.vertical && std::isfinite(r.value) && (!p.y.log || r.value > 0)) dy.add(r.value, p.y.log);
  // Tight x unless markers would be cut in half at the ends.
  const bool markers =
      std::any_of(p.series.begin(), p.series.end(), [](const Series& s) { return s.marker != Marker::None; });
  return layout_xy(c, p, cell, resolve(p.x, dx, markers ? 0.03 : 0.0), resolve(p.y, dy, 0.05), series_entries(p), data);
}

PanelLayout layout_scatter(Ctx& c, const ScatterPlot& p, Rect cell) {
  DataRange dx, dy;
  std::vector<std::pair<const std::vector<double>*, const std::vector<double>*>> data;
  std::vector<LegendEntry> entries;
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const auto& gr = p.groups[g];
    for (std::size_t i = 0; i < gr.x.size(); ++i) {
      if (std::isfinite(gr.x[i]) && std::isfinite(gr.y[i]) && (!p.x.log || gr.x[i] > 0) && (!p.y.log || gr.y[i] > 0)) {
        dx.add(gr.x[i], p.x.log);
        dy.add(gr.y[i], p.y.log);
      }
    }
    data.emplace_back(&gr.x, &gr.y);
    if (!gr.name.empty())
      entries.push_back({detail::clean_line(gr.name), gr.color.value_or(categorical(g)), LineStyle::None, gr.marker});
  }
  std::vector<double> hx, hy;
  for (const auto& h : p.highlights) {
    dx.add(h.x, p.x.log);
    dy.add(h.y, p.y.log);
    hx.push_back(h.x);
    hy.push_back(h.y);
    if (!h.label.empty()) entries.push_back({detail::clean_line(h.label), h.color, LineStyle::None, h.marker});
  }
  data.emplace_back(&hx, &hy);
  return layout_xy(c, p, cell, resolve(p.x, dx, 0.05), resolve(p.y, dy, 0.05), std::move(entries), data);
}

// ---- panels: bar chart --------------------------------------------------------------------------

PanelLayout layout_bar(Ctx& c, const BarChart& b, Rect cell) {
  PanelLayout L;
  L.cell = cell;
  Rect inner = inset(cell, 4);
  L.title = take_title(c, inner, b.title, false);
  std::vector<LegendEntry> entries;
  for (std::size_t i = 0; i < b.series.size(); ++i)
    if (!b.series[i].name.empty())
      entries.push_back({detail::clean_line(b.series[i].name), b.series[i].color.value_or(categorical(i)),
                         LineStyle::None, Marker::None, true});
  L.legend = make_legend(c, std::move(entries), inner.w * 0.45);

  DataRange dy;
  for (const auto& s : b.series)
    for (double v : s.values) dy.add(v, b.y.log);
  Range yr;
  if (b.y.range) {
    yr = *b.y.range;
  } else if (b.y.log) {
    yr = resolve(b.y, dy, 0.05);
  } else {
    double lo = dy.empty() ? 0 : std::min(0.0, dy.lo), hi = dy.empty() ? 1 : std::max(0.0, dy.hi);
    if (lo == hi) hi = 1;
    const double span = hi - lo;
    if (hi > 0) hi += 0.05 * span;
    if (lo < 0) lo -= 0.05 * span;
    yr = {lo, hi};
  }
  AxesSpec s;
  s.x = &b.x;
  s.y = &b.y;
  const double n = static_cast<double>(std::max<std::size_t>(b.categories.size(), 1));
  s.xr = {-0.5, n - 0.5};
  s.yr = yr;
  s.ylog = b.y.log;
  s.x_cats = cats_of(b.categories, 0, 1);
  s.allow_rotated_x = true;
  Axis x_no_ticks = b.x;
  x_no_ticks.ticks.clear();
  x_no_ticks.tick_labels.clear();
  s.x = &x_no_ticks;
  if (b.legend == LegendPos::Outside && !L.legend.entries.empty()) s.right_reserve = L.legend.box.w + 16;
  layout_axes(c, L, inner, s);
  std::vector<Point> pts;  // bar tops
  if (b.legend == LegendPos::Auto) {
    const double group = 0.8, bw = group / static_cast<double>(std::max<std::size_t>(b.series.size(), 1));
    for (std::size_t si = 0; si < b.series.size(); ++si)
      for (std::size_t k = 0; k < b.categories.size(); ++k) {
        const double x0 = static_cast<double>(k) - group / 2 + static_cast<double>(si) * bw;
        const double py = L.y.map.to_px(b.series[si].values[k]);
        if (!std::isfinite(py)) continue;
        const double base = L.y.map.to_px(b.y.log ? yr.lo : 0.0);
        // Sample the bar's area so a tall bar under a corner counts.
        for (double f = 0; f <= 1.0; f += 0.25)
          for (double g = 0; g <= 1.0; g += 0.25) pts.push_back({L.x.map.to_px(x0 + f * bw), py + g * (base - py)});
      }
  }
  place_legend(L.legend, b.legend, L.plot, pts);
  return L;
}

// ---- panels: token strip ------------------------------------------------------------------------

PanelLayout layout_tokens(Ctx& c, const TokenStrip& t, Rect cell) {
  PanelLayout L;
  L.cell = cell;
  Rect inner = inset(cell, 4);
  L.title = take_title(c, inner, t.title, false);
  const std::size_t n = !t.tokens.empty() ? t.tokens.size() : !t.category.empty() ? t.category.size() : t.values.size();
  const bool by_category = !t.category.empty();

  // Key: category swatches in rows at the bottom, or a colour bar at the right.
  double right = 0;
  ColorbarPlan cbp;
  if (by_category) {
    std::vector<LegendEntry> entries;
    for (std::size_t k = 0; k < t.categories.size(); ++k)
      entries.push_back({detail::clean_line(t.categories[k].name), t.categories[k].color.value_or(categorical(k)),
                         LineStyle::None, Marker::None, true});
    L.legend.entries = std::move(entries);
    L.legend.row_h = c.legend_h * 1.3;
    if (!L.legend.entries.empty()) {
      // Flow the entries left to right; the box spans the rows used.
      double x = 0, rows = 1;
      for (const auto& e : L.legend.entries) {
        const double w = 14 + 4 + c.m.measure(e.label, c.legend).width + 14;
        if (x > 0 && x + w > inner.w) x = 0, rows += 1;
        x += w;
      }
      const double h = rows * L.legend.row_h;
      L.legend.box = {inner.x, inner.bottom() - h, inner.w, h};
      inner.h = std::max(0.0, inner.h - h - 4);
    }
  } else if (!t.values.empty()) {
    L.value_range = color_range(t.values, t.value_range, colormap(t.colormap));
    cbp = plan_colorbar(c, L.value_range, t.colorbar_label, inner.h * 0.8);
    right = cbp.width;
  }
  Rect area{inner.x, inner.y, std::max(10.0, inner.w - right), std::max(4.0, inner.h)};
  TokenStripLayout& T = L.tokens;

  // Text mode when every token fits as a box.
  bool text_fits = !t.tokens.empty() && !t.single_row;
  if (text_fits) {
    const double box_h = detail::line_height(c.m, c.token) + 4, pitch = box_h + 3;
    const auto max_lines = static_cast<std::size_t>(std::max(0.0, std::floor((area.h + 3) / pitch)));
    // Quick bound: a box is at least ~8 px wide.
    if (max_lines == 0 || static_cast<double>(n) * 10 > area.w * static_cast<double>(max_lines)) text_fits = false;
    double x = area.x, y = area.y;
    std::size_t lines = 1;
    for (std::size_t i = 0; text_fits && i < n; ++i) {
      std::string shown = detail::token_display(t.tokens[i]);
      double w = c.m.measure(shown, c.token).width + 6;
      if (w > area.w) {
        shown = detail::elide(c.m, shown, c.token, area.w - 6);
        w = area.w;
      }
      if (x > area.x && x + w > area.right()) {
        x = area.x;
        y += pitch;
        if (++lines > max_lines) text_fits = false;
      }
      T.boxes.push_back({x, y, w, box_h});
      T.texts.push_back(std::move(shown));
      x += w + 2;
      if (t.tokens[i].find('\n') != std::string::npos && i + 1 < n) {
        x = area.x;
        y += pitch;
        if (++lines > max_lines) text_fits = false;
      }
    }
    if (text_fits) {
      L.plot = {area.x, area.y, area.w, static_cast<double>(lines) * pitch - 3};
    } else {
      T.boxes.clear();
      T.texts.clear();
    }
  }
  if (!text_fits && t.single_row) {
    // One row aligned with the panels above: plot edges at the shared margins.
    T.bars = true;
    const auto total = static_cast<std::int64_t>(std::max<std::size_t>(n, 1));
    const double x0 = std::max(area.x + 30, L.cell.x + c.min_left);
    const double x1 = std::min(area.right(), L.cell.right() - std::max(c.min_right, right));
    const double w = std::max(10.0, x1 - x0);
    const auto W = static_cast<std::int64_t>(std::max(1.0, std::floor(w)));
    T.per_cell = std::max<std::int64_t>(1, (total + W - 1) / W);
    T.cells_per_row = (total + T.per_cell - 1) / T.per_cell;
    T.rows = 1;
    T.cell_w = w / static_cast<double>(T.cells_per_row);
    T.row_h = std::clamp(area.h - (kTickLen + 3 + c.tick_h + c.label_h + 4), 4.0, 36.0);
    T.row_pitch = T.row_h;
    L.plot = {x0, area.y, w, T.row_h};
    const double first = static_cast<double>(t.first_position) - 0.5;
    L.x.map = {first, first + static_cast<double>(T.cells_per_row * T.per_cell), L.plot.x, L.plot.right(), false};
    L.x.ticks = linear_ticks(c, L.x.map, true, 1);
  } else if (!text_fits) {
    T.bars = true;
    const double note_h = c.label_h + 4;  // "token position (1 px = k tokens)"
    area.h = std::max(4.0, area.h - note_h);
    const auto total = static_cast<std::int64_t>(n);
    // Left column for row start positions.
    const std::string widest = std::to_string(t.first_position + std::max<std::int64_t>(total - 1, 0));
    const double label_w = c.m.measure(widest, c.tick).width + kTickLen + 4;
    const auto W = static_cast<std::int64_t>(std::max(1.0, std::floor(area.w - label_w)));
    if (total <= W) {
      T.per_cell = 1;
      T.cells_per_row = std::max<std::int64_t>(total, 1);
      T.rows = 1;
      T.cell_w = static_cast<double>(W) / static_cast<double>(T.cells_per_row);
      T.row_h = std::min(area.h, 36.0);
      T.row_pitch = T.row_h;
      L.plot = {area.x + label_w, area.y, static_cast<double>(W), T.row_h};
    } else {
      const double min_row_h = 3, gap = 1;
      const auto max_rows = std::max<std::int64_t>(1, static_cast<std::int64_t>((area.h + gap) / (min_row_h + gap)));
      T.per_cell = std::max<std::int64_t>(1, (total + W * max_rows - 1) / (W * max_rows));
      const std::int64_t cells = (total + T.per_cell - 1) / T.per_cell;
      T.rows = (cells + W - 1) / W;
      T.cells_per_row = T.rows == 1 ? cells : W;
      T.cell_w = 1;
      T.row_h = std::min(24.0, (area.h - static_cast<double>(T.rows - 1) * gap) / static_cast<double>(T.rows));
      const double g = T.row_h >= 6 ? 2 : gap;
      T.row_pitch = T.row_h + g;
      L.plot = {area.x + label_w, area.y, static_cast<double>(T.cells_per_row),
                static_cast<double>(T.rows) * T.row_pitch - g};
    }
    // Position axis under a single row.
    if (T.rows == 1) {
      L.x.map = {static_cast<double>(t.first_position),
                 static_cast<double>(t.first_position + T.cells_per_row * T.per_cell), L.plot.x, L.plot.right(), false};
      L.x.ticks = linear_ticks(c, L.x.map, true, 1);
    }
  }
  if (!by_category && !t.values.empty()) {
    // Colour bar beside the strip, at least 60 px tall when there is room.
    const double h = std::min(std::max(L.plot.h, 60.0), std::max(inner.bottom() - L.plot.y, 10.0));
    place_colorbar(L, cbp, L.value_range, {area.right() + kColorbarGap, L.plot.y, kColorbarW, h});
  }
  return L;
}

}  // namespace

// ---- figure -------------------------------------------------------------------------------------

FigureLayout layout_figure(const Figure& f, Canvas& m) {
  FigureLayout out;
  const Theme& th = f.theme;
  Ctx c(m, th);
  const double pad = th.padding, W = f.width, H = f.height;
  double top = pad, bottom = H - pad;
  if (!f.title.empty()) {
    const double h = detail::line_height(m, Font{th.title_size, true});
    out.title = {pad, top, W - 2 * pad, h};
    top += h + pad * 0.75;
  }
  if (!f.caption.empty()) {
    const Font cf{th.caption_size, false, true};
    out.caption_lines = detail::wrap(m, detail::clean_line(f.caption), cf, W - 2 * pad);
    if (out.caption_lines.size() > 4) {
      out.caption_lines.resize(4);
      out.caption_lines[3] = detail::elide(m, out.caption_lines[3] + " \xe2\x80\xa6", cf, W - 2 * pad);
    }
    const double lh = detail::line_height(m, cf) * 1.25;
    const double h = lh * static_cast<double>(out.caption_lines.size());
    out.caption = {pad, bottom - h, W - 2 * pad, h};
    bottom -= h + pad * 0.5;
  }
  const std::size_t n = f.panels.size();
  if (n == 0) return out;
  const std::size_t cols = f.columns > 0 ? static_cast<std::size_t>(f.columns)
                                         : static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const std::size_t rows = (n + cols - 1) / cols;
  const auto split = [](double start, double length, std::size_t k, const std::vector<double>& weights, double gap) {
    std::vector<std::pair<double, double>> spans;  // (start, size)
    double total = 0;
    for (std::size_t i = 0; i < k; ++i) total += weights.empty() ? 1.0 : weights[i];
    const double usable = std::max(0.0, length - gap * static_cast<double>(k - 1));
    double pos = start;
    for (std::size_t i = 0; i < k; ++i) {
      const double size = usable * (weights.empty() ? 1.0 : weights[i]) / total;
      spans.emplace_back(pos, size);
      pos += size + gap;
    }
    return spans;
  };
  const auto xs = split(pad, W - 2 * pad, cols, f.col_weights, pad * 0.5);
  const auto ys = split(top, std::max(0.0, bottom - top), rows, f.row_weights, pad * 0.5);
  const auto lay = [&](std::size_t i) {
    const auto [cx, cw] = xs[i % cols];
    const auto [cy, ch] = ys[i / cols];
    const Rect cell{cx, cy, cw, ch};
    return std::visit(
        [&](const auto& p) -> PanelLayout {
          using T = std::decay_t<decltype(p)>;
          if constexpr (std::is_same_v<T, Heatmap>)
            return layout_heatmap(c, p, cell);
          else if constexpr (std::is_same_v<T, LinePlot>)
            return layout_line(c, p, cell);
          else if constexpr (std::is_same_v<T, ScatterPlot>)
            return layout_scatter(c, p, cell);
          else if constexpr (std::is_same_v<T, TokenStrip>)
            return layout_tokens(c, p, cell);
          else
            return layout_bar(c, p, cell);
        },
        f.panels[i]);
  };
  for (std::size_t i = 0; i < n; ++i) out.panels.push_back(lay(i));
  if (f.share_x && n > 1) {
    // Lay each column out again with the widest left and right margins of its panels.
    for (std::size_t col = 0; col < cols; ++col) {
      double ml = 0, mr = 0;
      for (std::size_t i = col; i < n; i += cols) {
        const PanelLayout& L = out.panels[i];
        if (L.plot.w <= 0) continue;
        ml = std::max(ml, L.plot.x - L.cell.x);
        mr = std::max(mr, L.cell.right() - L.plot.right());
      }
      c.min_left = ml;
      c.min_right = mr;
      for (std::size_t i = col; i < n; i += cols) out.panels[i] = lay(i);
    }
    c.min_left = c.min_right = 0;
  }
  return out;
}

}  // namespace kvscope::viz
