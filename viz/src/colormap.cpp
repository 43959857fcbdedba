// Colormap tables interpolated from published control points (see colormap.h for sources).
#include "kvscope/viz/colormap.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>

namespace kvscope::viz {
namespace {

struct Stop {
  double t;
  std::uint32_t rgb;
};

// Linear interpolation in sRGB between stops (t ascending from 0 to 1), rounded to 8 bits.
std::array<Rgb, 256> interpolate(const std::vector<Stop>& s) {
  std::array<Rgb, 256> table{};
  std::size_t k = 0;
  for (int i = 0; i < 256; ++i) {
    const double t = i / 255.0;
    while (k + 2 < s.size() && t > s[k + 1].t) ++k;
    const double u = std::clamp((t - s[k].t) / (s[k + 1].t - s[k].t), 0.0, 1.0);
    auto ch = [&](int shift) {
      const double a = (s[k].rgb >> shift) & 0xff, b = (s[k + 1].rgb >> shift) & 0xff;
      return static_cast<std::uint8_t>(std::lround(a + (b - a) * u));
    };
    table[i] = {ch(16), ch(8), ch(0)};
  }
  return table;
}

// Evenly spaced stops.
std::array<Rgb, 256> even(std::initializer_list<std::uint32_t> colors) {
  std::vector<Stop> stops;
  const double n = static_cast<double>(colors.size() - 1);
  std::size_t i = 0;
  for (auto c : colors) stops.push_back({static_cast<double>(i++) / n, c});
  return interpolate(stops);
}

const std::vector<Colormap>& all_maps() {
  static const std::vector<Colormap> maps = [] {
    std::vector<Colormap> m;
    // viridisLite::viridis(10).
    m.emplace_back(
        "viridis",
        even({0x440154, 0x482878, 0x3e4a89, 0x31688e, 0x26828e, 0x1f9e89, 0x35b779, 0x6dcd59, 0xb4de2c, 0xfde725}),
        false);
    // viridisLite::magma(10).
    m.emplace_back(
        "magma",
        even({0x000004, 0x180f3e, 0x451077, 0x721f81, 0x9f2f7f, 0xcd4071, 0xf1605d, 0xfd9567, 0xfec98d, 0xfcfdbf}),
        false);
    // Moreland 2009, table 1: every fourth of the 33 stops.
    m.emplace_back("coolwarm",
                   interpolate({{0.0, 0x3b4cc0},
                                {0.125, 0x6282ea},
                                {0.25, 0x8db0fe},
                                {0.375, 0xb8d0f9},
                                {0.5, 0xdddddd},
                                {0.625, 0xf5c4ad},
                                {0.75, 0xf49a7b},
                                {0.875, 0xde604d},
                                {1.0, 0xb40426}}),
                   true);
    // Okabe-Ito orange (#e69f00) to blue (#0072b2) through a light grey: diverging, two hues that
    // stay apart for colour-blind readers (kvscope's figures: B > A orange, A > B blue).
    m.emplace_back("orangeblue",
                   interpolate({{0.0, 0xe69f00}, {0.25, 0xf0c870}, {0.5, 0xeeeeee}, {0.75, 0x7fb4d6}, {1.0, 0x0072b2}}),
                   true);
    // Light grey (#d9d9d9, evicted) to Okabe-Ito bluish green (#009e73, kept): the share of a
    // pixel's tokens a head kept, when a kept strip holds more tokens than pixels.
    m.emplace_back("keptshare", interpolate({{0.0, 0xd9d9d9}, {1.0, 0x009e73}}), false);
    return m;
  }();
  return maps;
}

}  // namespace

Rgb Colormap::at(double t) const {
  if (!(t >= 0)) return table_[0];  // NaN and negatives
  if (t >= 1) return table_[255];
  return table_[static_cast<std::size_t>(std::lround(t * 255.0))];
}

const Colormap& colormap(std::string_view name) {
  for (const auto& m : all_maps())
    if (m.name() == name) return m;
  std::string known;
  for (const auto& m : all_maps()) known += (known.empty() ? "" : ", ") + m.name();
  throw std::invalid_argument("unknown colormap '" + std::string(name) + "' (known: " + known + ")");
}

Rgb map(std::string_view name, double t) { return colormap(name).at(t); }

std::vector<std::string> colormap_names() {
  std::vector<std::string> out;
  for (const auto& m : all_maps()) out.push_back(m.name());
  return out;
}

Rgb categorical(std::size_t i) {
  static constexpr std::uint32_t okabe_ito[] = {0x0072b2, 0xd55e00, 0x009e73, 0xcc79a7, 0xe69f00, 0x56b4e9, 0x000000};
  const std::uint32_t c = okabe_ito[i % std::size(okabe_ito)];
  return {static_cast<std::uint8_t>(c >> 16), static_cast<std::uint8_t>(c >> 8), static_cast<std::uint8_t>(c)};
}

double luminance(Color c) { return (0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b) / 255.0; }

}  // namespace kvscope::viz
