#pragma once
// Colours and colormaps of kvscope_viz. The continuous maps are 256-entry tables interpolated
// (linearly, in sRGB) from a few published control points, not copies of upstream tables:
//   viridis, magma  matplotlib's perceptually uniform maps (van der Walt & Smith, 2015), 10 stops
//                   as published by R viridisLite::viridis(10) / magma(10); endpoints exact
//                   (viridis #440154 .. #fde725, magma #000004 .. #fcfdbf).
//   coolwarm        Moreland's diverging map ("Diverging Color Maps for Scientific
//                   Visualization", ISVC 2009, table 1), 9 of its 33 stops; midpoint #dddddd.
//   orangeblue      diverging between two Okabe-Ito colours (orange #e69f00 .. blue #0072b2)
//   keptshare       light grey #d9d9d9 (evicted) .. Okabe-Ito bluish green #009e73 (kept)
//                   through #eeeeee, with a lighter tint of each at 1/4 and 3/4.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::viz {

/// An opaque 8-bit sRGB colour.
struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

/// An 8-bit sRGB colour with straight (not premultiplied) alpha; converts implicitly from Rgb.
struct Color {
  std::uint8_t r = 0, g = 0, b = 0, a = 255;
  constexpr Color() = default;
  constexpr Color(std::uint8_t r_, std::uint8_t g_, std::uint8_t b_, std::uint8_t a_ = 255)
      : r(r_), g(g_), b(b_), a(a_) {}
  constexpr Color(Rgb c) : r(c.r), g(c.g), b(c.b), a(255) {}  // NOLINT(google-explicit-constructor)
  /// 0xRRGGBB, opaque.
  static constexpr Color hex(std::uint32_t rgb) {
    return {static_cast<std::uint8_t>(rgb >> 16), static_cast<std::uint8_t>(rgb >> 8), static_cast<std::uint8_t>(rgb)};
  }
  /// The same colour with alpha a.
  constexpr Color with_alpha(std::uint8_t a_) const { return {r, g, b, a_}; }
  friend bool operator==(const Color&, const Color&) = default;
};

/// A 256-entry continuous colormap.
class Colormap {
 public:
  Colormap(std::string name, std::array<Rgb, 256> table, bool diverging)
      : name_(std::move(name)), table_(table), diverging_(diverging) {}
  const std::string& name() const { return name_; }
  /// Entry round(t * 255) with t clamped to [0, 1]; NaN maps to entry 0.
  Rgb at(double t) const;
  const std::array<Rgb, 256>& table() const { return table_; }
  /// True for maps centred on a neutral midpoint (coolwarm): automatic ranges become symmetric.
  bool diverging() const { return diverging_; }

 private:
  std::string name_;
  std::array<Rgb, 256> table_;
  bool diverging_;
};

/// The colormap called `name` ("viridis", "magma", "coolwarm", "orangeblue", "keptshare"; exact,
/// lower case).
/// Throws std::invalid_argument naming the unknown name and the known ones.
const Colormap& colormap(std::string_view name);

/// colormap(name).at(t). Throws std::invalid_argument on an unknown name.
Rgb map(std::string_view name, double t);

/// Names accepted by colormap(), in a stable order.
std::vector<std::string> colormap_names();

/// Default colour of series i (legends, lines, bars): the Okabe–Ito colour-blind-safe palette
/// (Okabe & Ito 2008) without its yellow, cycling after 7 colours.
Rgb categorical(std::size_t i);

/// Relative luminance in [0, 1] (sRGB, Rec. 709 weights); picks black or white text on a fill.
double luminance(Color c);

}  // namespace kvscope::viz
