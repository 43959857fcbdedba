// Figure helpers and validation.
#include "kvscope/viz/figure.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kvscope::viz {
namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

void check_colormap(const std::string& name, const std::string& where) {
  try {
    (void)colormap(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + e.what());
  }
}

void check_axis(const Axis& a, const char* which, const std::string& where) {
  if (!a.tick_labels.empty() && a.tick_labels.size() != a.ticks.size())
    throw std::invalid_argument(where + which + " axis has " + std::to_string(a.tick_labels.size()) +
                                " tick labels for " + std::to_string(a.ticks.size()) + " ticks");
  if (a.range && !(std::isfinite(a.range->lo) && std::isfinite(a.range->hi) && a.range->lo < a.range->hi))
    throw std::invalid_argument(where + which + " axis range must be finite with lo < hi");
  if (a.log && a.range && a.range->lo <= 0)
    throw std::invalid_argument(where + which + " axis is log but its range starts at " + std::to_string(a.range->lo));
}

void check_value_range(const std::optional<Range>& r, const std::string& where) {
  if (r && !(std::isfinite(r->lo) && std::isfinite(r->hi) && r->lo < r->hi))
    throw std::invalid_argument(where + "value_range must be finite with lo < hi");
}

std::string sz(std::size_t n) { return std::to_string(n); }

}  // namespace

std::string_view kind_name(const Panel& panel) {
  return std::visit(Overload{[](const Heatmap&) { return std::string_view("heatmap"); },
                             [](const LinePlot&) { return std::string_view("line"); },
                             [](const ScatterPlot&) { return std::string_view("scatter"); },
                             [](const TokenStrip&) { return std::string_view("tokens"); },
                             [](const BarChart&) { return std::string_view("bar"); }},
                    panel);
}

const std::string& panel_title(const Panel& panel) {
  return std::visit([](const auto& p) -> const std::string& { return p.title; }, panel);
}

void validate(const Figure& figure) {
  if (figure.width < 16 || figure.height < 16 || figure.width > 32768 || figure.height > 32768)
    throw std::invalid_argument("figure size " + std::to_string(figure.width) + "x" + std::to_string(figure.height) +
                                " is outside 16..32768 px");
  if (figure.columns < 0) throw std::invalid_argument("figure columns must be >= 0");
  for (double w : figure.row_weights)
    if (!(w > 0 && std::isfinite(w))) throw std::invalid_argument("figure row_weights must be positive");
  for (double w : figure.col_weights)
    if (!(w > 0 && std::isfinite(w))) throw std::invalid_argument("figure col_weights must be positive");
  const std::size_t n = figure.panels.size();
  const std::size_t cols = figure.columns > 0 ? static_cast<std::size_t>(figure.columns)
                                              : static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const std::size_t rows = cols == 0 ? 0 : (n + cols - 1) / cols;
  if (!figure.row_weights.empty() && figure.row_weights.size() != rows)
    throw std::invalid_argument("figure row_weights has " + sz(figure.row_weights.size()) + " entries for " + sz(rows) +
                                " grid rows");
  if (!figure.col_weights.empty() && figure.col_weights.size() != cols)
    throw std::invalid_argument("figure col_weights has " + sz(figure.col_weights.size()) + " entries for " + sz(cols) +
                                " grid columns");

  for (std::size_t i = 0; i < n; ++i) {
    const Panel& panel = figure.panels[i];
    const std::string where =
        "panel " + sz(i) + " (" + std::string(kind_name(panel)) + " '" + panel_title(panel) + "'): ";
    std::visit(
        Overload{
            [&](const Heatmap& h) {
              if (h.rows < 0 || h.cols < 0) throw std::invalid_argument(where + "negative rows or cols");
              const auto cells = static_cast<std::size_t>(h.rows) * static_cast<std::size_t>(h.cols);
              if (h.values.size() != cells)
                throw std::invalid_argument(where + "values has " + sz(h.values.size()) +
                                            " entries, rows*cols = " + sz(cells));
              if (!h.mask.empty() && h.mask.size() != cells)
                throw std::invalid_argument(where + "mask has " + sz(h.mask.size()) +
                                            " entries, rows*cols = " + sz(cells));
              if (!h.row_labels.empty() && h.row_labels.size() != static_cast<std::size_t>(h.rows))
                throw std::invalid_argument(where + "row_labels has " + sz(h.row_labels.size()) + " entries for " +
                                            std::to_string(h.rows) + " rows");
              if (!h.col_labels.empty() && h.col_labels.size() != static_cast<std::size_t>(h.cols))
                throw std::invalid_argument(where + "col_labels has " + sz(h.col_labels.size()) + " entries for " +
                                            std::to_string(h.cols) + " cols");
              if (!(h.x_step > 0 && h.y_step > 0 && std::isfinite(h.x_step) && std::isfinite(h.y_step) &&
                    std::isfinite(h.x_origin) && std::isfinite(h.y_origin)))
                throw std::invalid_argument(where + "x/y origin must be finite and steps positive");
              check_axis(h.x, "x", where);
              check_axis(h.y, "y", where);
              check_colormap(h.colormap, where);
              check_value_range(h.value_range, where);
              if (!h.categories.empty())
                for (float v : h.values)
                  if (!std::isnan(v) && !(v >= 0 && v < static_cast<float>(h.categories.size()) && v == std::floor(v)))
                    throw std::invalid_argument(where + "value " + std::to_string(v) +
                                                " is not a category index (0 .. " + sz(h.categories.size() - 1) + ")");
            },
            [&](const LinePlot& p) {
              check_axis(p.x, "x", where);
              check_axis(p.y, "y", where);
              for (const auto& sp : p.spans)
                if (!(std::isfinite(sp.lo) && std::isfinite(sp.hi) && sp.lo <= sp.hi))
                  throw std::invalid_argument(where + "span '" + sp.name + "' is not a finite interval lo <= hi");
              for (const auto& r : p.rules)
                if (!std::isfinite(r.value) || !(r.width >= 0))
                  throw std::invalid_argument(where + "reference line '" + r.name + "' has a non-finite value");
              for (const auto& s : p.series) {
                if (s.x.size() != s.y.size())
                  throw std::invalid_argument(where + "series '" + s.name + "' has " + sz(s.x.size()) + " x and " +
                                              sz(s.y.size()) + " y values");
                if (!(s.width >= 0) || !(s.marker_size >= 0))
                  throw std::invalid_argument(where + "series '" + s.name + "' has a negative width or marker size");
              }
            },
            [&](const ScatterPlot& p) {
              check_axis(p.x, "x", where);
              check_axis(p.y, "y", where);
              for (const auto& g : p.groups) {
                if (g.x.size() != g.y.size())
                  throw std::invalid_argument(where + "group '" + g.name + "' has " + sz(g.x.size()) + " x and " +
                                              sz(g.y.size()) + " y values");
                if (!(g.size >= 0)) throw std::invalid_argument(where + "group '" + g.name + "' has a negative size");
              }
            },
            [&](const TokenStrip& t) {
              std::size_t count = !t.tokens.empty()     ? t.tokens.size()
                                  : !t.category.empty() ? t.category.size()
                                                        : t.values.size();
              if (!t.category.empty() && t.category.size() != count)
                throw std::invalid_argument(where + "category has " + sz(t.category.size()) + " entries for " +
                                            sz(count) + " tokens");
              if (!t.values.empty() && t.values.size() != count)
                throw std::invalid_argument(where + "values has " + sz(t.values.size()) + " entries for " + sz(count) +
                                            " tokens");
              for (std::size_t k = 0; k < t.category.size(); ++k)
                if (t.category[k] < -1 || t.category[k] >= static_cast<int>(t.categories.size()))
                  throw std::invalid_argument(where + "token " + sz(k) + " has category " +
                                              std::to_string(t.category[k]) + ", only " + sz(t.categories.size()) +
                                              " categories");
              check_colormap(t.colormap, where);
              check_value_range(t.value_range, where);
            },
            [&](const BarChart& b) {
              check_axis(b.y, "y", where);
              for (const auto& s : b.series)
                if (s.values.size() != b.categories.size())
                  throw std::invalid_argument(where + "series '" + s.name + "' has " + sz(s.values.size()) +
                                              " values for " + sz(b.categories.size()) + " categories");
            },
        },
        panel);
  }
}

}  // namespace kvscope::viz
