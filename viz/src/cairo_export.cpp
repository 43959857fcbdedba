// PNG/SVG/PDF export through Cairo surfaces rendered in memory, then written whole.
#include "kvscope/viz/cairo_export.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cairo_canvas.h"
#include "kvscope/viz/draw.h"
#include "text.h"

namespace kvscope::viz {
namespace {

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, SurfaceDeleter>;
using ContextPtr = std::unique_ptr<cairo_t, ContextDeleter>;

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void check(cairo_status_t status, const std::filesystem::path& out, const char* what) {
  if (status != CAIRO_STATUS_SUCCESS) throw ExportError(out, std::string(what) + ": " + cairo_status_to_string(status));
}

// Draws the figure on `surface` (scaled by `scale`), reporting Cairo errors against `out`.
void render(const Figure& f, cairo_surface_t* surface, double scale, double pixel_ratio,
            const std::filesystem::path& out) {
  check(cairo_surface_status(surface), out, "cannot create the surface");
  ContextPtr cr(cairo_create(surface));
  if (scale != 1.0) cairo_scale(cr.get(), scale, scale);
  detail::CairoCanvas canvas(cr.get(), f.theme.font_family, pixel_ratio);
  draw_figure(f, canvas);
  check(cairo_status(cr.get()), out, "drawing failed");
}

void write_file(const std::filesystem::path& out, const std::string& bytes) {
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  if (!file) throw ExportError(out, std::string("cannot open for writing: ") + std::strerror(errno));
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) throw ExportError(out, "write failed");
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += ch;
    }
  }
  return o;
}

// Cairo numbers <g id="surfaceN"> and <image id="imageN"> from process-wide counters; renumber
// them in order of first appearance so the same figure gives the same bytes.
std::string renumber_svg_ids(const std::string& svg) {
  std::string out;
  out.reserve(svg.size());
  std::vector<std::pair<std::string, std::string>> seen;  // "image669" -> "image3"
  std::size_t counts[2] = {0, 0};
  const std::string_view prefixes[2] = {"surface", "image"};
  std::size_t i = 0;
  while (i < svg.size()) {
    const char ch = svg[i];
    bool replaced = false;
    if (ch == '"' || ch == '#') {
      for (int k = 0; k < 2 && !replaced; ++k) {
        const std::string_view pre = prefixes[k];
        if (svg.compare(i + 1, pre.size(), pre) != 0) continue;
        std::size_t j = i + 1 + pre.size();
        const std::size_t digits = j;
        while (j < svg.size() && std::isdigit(static_cast<unsigned char>(svg[j]))) ++j;
        if (j == digits || j >= svg.size() || (svg[j] != '"' && svg[j] != ')')) continue;
        const std::string old = svg.substr(i + 1, j - i - 1);
        auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == old; });
        if (it == seen.end()) {
          seen.emplace_back(old, std::string(pre) + std::to_string(++counts[k]));
          it = seen.end() - 1;
        }
        out += ch;
        out += it->second;
        i = j;
        replaced = true;
      }
    }
    if (!replaced) out += svg[i++];
  }
  return out;
}

// Adds <title>/<desc> right after the root element's start tag.
std::string with_svg_metadata(std::string svg, const Figure& f) {
  const auto open = svg.find("<svg");
  const auto end = open == std::string::npos ? std::string::npos : svg.find('>', open);
  if (end == std::string::npos) return svg;
  std::string meta;
  if (!f.title.empty()) meta += "\n<title>" + xml_escape(detail::clean_line(f.title)) + "</title>";
  if (!f.caption.empty()) meta += "\n<desc>" + xml_escape(detail::clean_line(f.caption)) + "</desc>";
  svg.insert(end + 1, meta);
  return svg;
}

std::string lower_extension(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

void export_figure(const Figure& figure, const std::filesystem::path& out, double png_scale) {
  const std::string ext = lower_extension(out);
  if (ext != ".png" && ext != ".svg" && ext != ".pdf" && ext != ".csv")
    throw ExportError(out, "unknown figure format '" + ext + "' (use .png, .svg, .pdf or .csv)");
  validate(figure);
  if (ext == ".csv") return export_csv(figure, out);
  const double w = figure.width, h = figure.height;
  std::string bytes;
  if (ext == ".png") {
    if (!(png_scale > 0) || !std::isfinite(png_scale) || w * png_scale > 32768 || h * png_scale > 32768)
      throw std::invalid_argument("png_scale " + std::to_string(png_scale) + " gives no valid image size");
    const int pw = std::max(1, static_cast<int>(std::lround(w * png_scale)));
    const int ph = std::max(1, static_cast<int>(std::lround(h * png_scale)));
    SurfacePtr s(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, pw, ph));
    render(figure, s.get(), png_scale, png_scale, out);
    cairo_surface_flush(s.get());
    check(cairo_surface_write_to_png_stream(s.get(), append, &bytes), out, "PNG encoding failed");
  } else if (ext == ".svg") {
    {
      SurfacePtr s(cairo_svg_surface_create_for_stream(append, &bytes, w, h));
      cairo_svg_surface_restrict_to_version(s.get(), CAIRO_SVG_VERSION_1_1);
      render(figure, s.get(), 1.0, 2.0, out);
      cairo_surface_finish(s.get());
      check(cairo_surface_status(s.get()), out, "SVG output failed");
    }
    bytes = with_svg_metadata(renumber_svg_ids(bytes), figure);
  } else {
    SurfacePtr s(cairo_pdf_surface_create_for_stream(append, &bytes, w, h));
    check(cairo_surface_status(s.get()), out, "cannot create the PDF surface");
#if CAIRO_VERSION >= CAIRO_VERSION_ENCODE(1, 16, 0)
    const std::string title = detail::clean_line(figure.title);
    if (!title.empty()) cairo_pdf_surface_set_metadata(s.get(), CAIRO_PDF_METADATA_TITLE, title.c_str());
    cairo_pdf_surface_set_metadata(s.get(), CAIRO_PDF_METADATA_CREATOR, "kvscope");
    // A fixed date: the same figure gives the same bytes.
    cairo_pdf_surface_set_metadata(s.get(), CAIRO_PDF_METADATA_CREATE_DATE, "2000-01-01T00:00:00Z");
    cairo_pdf_surface_set_metadata(s.get(), CAIRO_PDF_METADATA_MOD_DATE, "2000-01-01T00:00:00Z");
#endif
    render(figure, s.get(), 1.0, 2.0, out);
    cairo_surface_finish(s.get());
    check(cairo_surface_status(s.get()), out, "PDF output failed");
  }
  write_file(out, bytes);
}

FigureLayout export_layout(const Figure& figure) {
  validate(figure);
  SurfacePtr s(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1));
  ContextPtr cr(cairo_create(s.get()));
  detail::CairoCanvas canvas(cr.get(), figure.theme.font_family, 1.0);
  return layout_figure(figure, canvas);
}

}  // namespace kvscope::viz
