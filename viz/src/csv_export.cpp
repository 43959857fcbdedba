// Long-format CSV of the data behind a figure (format in cairo_export.h).
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "kvscope/viz/cairo_export.h"
#include "text.h"

namespace kvscope::viz {
namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

template <class T>
std::string num(T v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + '"';
}

class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) {}
  // panel,kind,series,row,col,x,y,value,label
  void row(std::size_t panel, std::string_view kind, const std::string& series, const std::string& r,
           const std::string& c, const std::string& x, const std::string& y, const std::string& value,
           const std::string& label) {
    line_.clear();
    line_ += std::to_string(panel);
    line_ += ',';
    line_ += kind;
    line_ += ',';
    line_ += field(series);
    for (const std::string* f : {&r, &c, &x, &y, &value}) {
      line_ += ',';
      line_ += *f;
    }
    line_ += ',';
    line_ += field(label);
    line_ += '\n';
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
  }

 private:
  std::ostream& out_;
  std::string line_;
};

}  // namespace

void export_csv(const Figure& figure, const std::filesystem::path& out) {
  validate(figure);
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  if (!file) throw ExportError(out, std::string("cannot open for writing: ") + std::strerror(errno));
  file << "panel,kind,series,row,col,x,y,value,label\n";
  Writer w(file);
  const std::string none;
  for (std::size_t pi = 0; pi < figure.panels.size(); ++pi) {
    const Panel& panel = figure.panels[pi];
    const std::string_view kind = kind_name(panel);
    std::visit(Overload{
                   [&](const Heatmap& h) {
                     const bool labelled = !h.row_labels.empty() || !h.col_labels.empty();
                     std::vector<std::string> xs(static_cast<std::size_t>(h.cols)), cs(xs.size()), cl(xs.size());
                     for (std::int64_t c = 0; c < h.cols; ++c) {
                       const auto k = static_cast<std::size_t>(c);
                       xs[k] = num(h.x_origin + static_cast<double>(c) * h.x_step);
                       cs[k] = std::to_string(c);
                       if (!h.col_labels.empty()) cl[k] = detail::valid_utf8(h.col_labels[k]);
                     }
                     for (int pass = 0; pass < 2; ++pass) {
                       if (pass == 1 && h.mask.empty()) break;
                       const std::string series = pass == 0 ? "value" : "mask";
                       for (std::int64_t r = 0; r < h.rows; ++r) {
                         const std::string rs = std::to_string(r),
                                           ys = num(h.y_origin + static_cast<double>(r) * h.y_step);
                         const std::string rl =
                             h.row_labels.empty() ? "" : detail::valid_utf8(h.row_labels[static_cast<std::size_t>(r)]);
                         for (std::int64_t c = 0; c < h.cols; ++c) {
                           const auto i = static_cast<std::size_t>(r * h.cols + c);
                           const auto k = static_cast<std::size_t>(c);
                           if (pass == 1 && h.mask[i] == 0) continue;
                           std::string label = labelled ? rl + "|" + cl[k] : none;
                           if (pass == 0 && !h.categories.empty() && std::isfinite(h.values[i]))
                             label = detail::valid_utf8(h.categories[static_cast<std::size_t>(h.values[i])].name);
                           w.row(pi, kind, series, rs, cs[k], xs[k], ys, pass == 0 ? num(h.values[i]) : "1", label);
                         }
                       }
                     }
                   },
                   [&](const LinePlot& p) {
                     for (std::size_t s = 0; s < p.series.size(); ++s) {
                       const auto& se = p.series[s];
                       const std::string name = detail::valid_utf8(se.name), ss = std::to_string(s);
                       for (std::size_t i = 0; i < se.x.size(); ++i)
                         w.row(pi, kind, name, ss, std::to_string(i), num(se.x[i]), num(se.y[i]), none, none);
                     }
                     for (std::size_t i = 0; i < p.spans.size(); ++i)
                       w.row(pi, kind, "span", "-1", std::to_string(i), num(p.spans[i].lo), num(p.spans[i].hi), none,
                             detail::valid_utf8(p.spans[i].name));
                     for (std::size_t i = 0; i < p.rules.size(); ++i) {
                       const RefLine& r = p.rules[i];
                       w.row(pi, kind, r.vertical ? "vline" : "hline", "-1", std::to_string(i),
                             r.vertical ? num(r.value) : none, r.vertical ? none : num(r.value), none,
                             detail::valid_utf8(r.name));
                     }
                   },
                   [&](const ScatterPlot& p) {
                     for (std::size_t g = 0; g < p.groups.size(); ++g) {
                       const auto& gr = p.groups[g];
                       const std::string name = detail::valid_utf8(gr.name), gs = std::to_string(g);
                       for (std::size_t i = 0; i < gr.x.size(); ++i)
                         w.row(pi, kind, name, gs, std::to_string(i), num(gr.x[i]), num(gr.y[i]), none, none);
                     }
                     for (std::size_t i = 0; i < p.highlights.size(); ++i) {
                       const auto& h = p.highlights[i];
                       w.row(pi, kind, "highlight", "-1", std::to_string(i), num(h.x), num(h.y), none,
                             detail::valid_utf8(h.label));
                     }
                   },
                   [&](const TokenStrip& t) {
                     const std::size_t n = !t.tokens.empty()     ? t.tokens.size()
                                           : !t.category.empty() ? t.category.size()
                                                                 : t.values.size();
                     std::vector<std::string> names;
                     for (const auto& c : t.categories) names.push_back(detail::valid_utf8(c.name));
                     for (std::size_t i = 0; i < n; ++i) {
                       const int cat = t.category.empty() ? -1 : t.category[i];
                       const std::string series = cat >= 0 ? names[static_cast<std::size_t>(cat)] : none;
                       const std::string value = !t.values.empty()     ? num(t.values[i])
                                                 : !t.category.empty() ? std::to_string(cat)
                                                                       : none;
                       w.row(pi, kind, series, "0", std::to_string(i),
                             std::to_string(t.first_position + static_cast<std::int64_t>(i)), none, value,
                             t.tokens.empty() ? none : detail::valid_utf8(t.tokens[i]));
                     }
                   },
                   [&](const BarChart& b) {
                     for (std::size_t s = 0; s < b.series.size(); ++s) {
                       const std::string name = detail::valid_utf8(b.series[s].name), ss = std::to_string(s);
                       for (std::size_t k = 0; k < b.categories.size(); ++k)
                         w.row(pi, kind, name, ss, std::to_string(k), std::to_string(k), num(b.series[s].values[k]),
                               none, detail::valid_utf8(b.categories[k]));
                     }
                   },
               },
               panel);
  }
  file.close();
  if (!file) throw ExportError(out, "write failed");
}

}  // namespace kvscope::viz
