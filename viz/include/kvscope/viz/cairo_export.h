#pragma once
// File export of figures through Cairo (PNG, SVG, PDF) and as CSV.
//
// Formats (chosen by the lower-cased extension of `out`):
//   .png  ARGB32 image of width*scale x height*scale pixels on the theme background.
//   .svg  SVG 1.1 (Cairo): text as glyph outlines, so it looks the same everywhere; the figure
//         title and caption are added as the document's <title> and <desc> (searchable).
//   .pdf  PDF 1.5 (Cairo) with embedded font subsets; Title metadata = figure title, Creator =
//         "kvscope", fixed CreationDate/ModDate so identical figures give identical files.
//   .csv  export_csv().
// Output is deterministic for a given figure and Cairo version. Files are written whole: the image
// is rendered in memory first, so a failed export leaves no partial file behind unless the write
// itself fails.
#include <filesystem>
#include <stdexcept>
#include <string>

#include "kvscope/viz/figure.h"
#include "kvscope/viz/layout.h"

namespace kvscope::viz {

/// An export failed: unknown extension, unwritable path or a Cairo error. what() =
/// "<path>: <problem>".
class ExportError : public std::runtime_error {
 public:
  ExportError(const std::filesystem::path& file, const std::string& problem)
      : std::runtime_error(file.string() + ": " + problem) {}
};

/// Writes `figure` to `out` as PNG, SVG, PDF or CSV by extension (see above). png_scale multiplies
/// the PNG's pixel size (2 = print resolution); SVG/PDF ignore it. Throws std::invalid_argument
/// for an invalid figure (validate()), ExportError for file problems.
void export_figure(const Figure& figure, const std::filesystem::path& out, double png_scale = 1.0);

/// Writes the data behind every panel as one long-format CSV (RFC 4180, '\n' line ends, numbers
/// in shortest round-trip form, NaN as "nan", fields that do not apply left empty):
///   panel,kind,series,row,col,x,y,value,label
/// panel = index in Figure::panels, kind = kind_name(); per kind (see each struct in figure.h):
///   heatmap  series "value": row, col, x/y = column/row coordinate, value, label =
///            "<row label>|<col label>" when labels exist; series "mask": nonzero mask cells.
///   line     series = name, row = series index, col = point index, x, y.
///   scatter  series = group name, row = group index, col = point index, x, y; highlights:
///            series "highlight", row = -1, col = highlight index, x, y, label.
///   tokens   row = 0, col = token index, x = first_position + index, value = the token's value
///            (when values are given) else its category index, series = category name, label =
///            token text.
///   bar      series = name, row = series index, col = category index, x = category index, y,
///            label = category.
/// Throws std::invalid_argument for an invalid figure, ExportError if `out` cannot be written.
void export_csv(const Figure& figure, const std::filesystem::path& out);

/// The layout export_figure() uses (px units, before png_scale): maps pixels of an exported
/// image back to panels, cells and data.
FigureLayout export_layout(const Figure& figure);

}  // namespace kvscope::viz
