// kvscope_viz: colormaps, ticks, aggregation, layout, and PNG/SVG/PDF/CSV export of every panel kind.
#include <cairo.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "kvscope/viz/cairo_export.h"
#include "kvscope/viz/colormap.h"
#include "kvscope/viz/draw.h"
#include "kvscope/viz/figure.h"
#include "kvscope/viz/layout.h"

namespace kvscope::viz {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- helpers

using kvscope::test::remove_tree;
using kvscope::test::TempDir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// A decoded PNG (through Cairo), unpremultiplied RGB access.
class Png {
 public:
  explicit Png(const fs::path& p) : s_(cairo_image_surface_create_from_png(p.c_str())) {}
  ~Png() { cairo_surface_destroy(s_); }
  Png(const Png&) = delete;
  Png& operator=(const Png&) = delete;
  bool ok() const { return cairo_surface_status(s_) == CAIRO_STATUS_SUCCESS; }
  int width() const { return cairo_image_surface_get_width(s_); }
  int height() const { return cairo_image_surface_get_height(s_); }
  std::uint32_t argb(int x, int y) const {
    const unsigned char* d = cairo_image_surface_get_data(s_);
    const int stride = cairo_image_surface_get_stride(s_);
    if (cairo_image_surface_get_format(s_) == CAIRO_FORMAT_RGB24)
      return 0xff000000u | *reinterpret_cast<const std::uint32_t*>(d + y * stride + 4 * x);
    return *reinterpret_cast<const std::uint32_t*>(d + y * stride + 4 * x);
  }
  Rgb rgb(int x, int y) const {
    const std::uint32_t v = argb(x, y);
    const std::uint32_t a = v >> 24;
    auto un = [a](std::uint32_t c) {
      return static_cast<std::uint8_t>(a == 0 ? 0 : std::min(255u, (c * 255 + a / 2) / a));
    };
    return {un((v >> 16) & 0xff), un((v >> 8) & 0xff), un(v & 0xff)};
  }
  std::size_t distinct_colors() const {
    std::set<std::uint32_t> seen;
    for (int y = 0; y < height(); ++y)
      for (int x = 0; x < width(); ++x) seen.insert(argb(x, y));
    return seen.size();
  }

 private:
  cairo_surface_t* s_;
};

int color_distance(Rgb a, Rgb b) { return std::max({std::abs(a.r - b.r), std::abs(a.g - b.g), std::abs(a.b - b.b)}); }

std::string hex(Rgb c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

// ---------------------------------------------------------------- figures

Heatmap gradient_heatmap(std::int64_t rows, std::int64_t cols) {
  Heatmap h;
  h.title = "Attention (layer 3)";
  h.rows = rows;
  h.cols = cols;
  h.values.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) h.values[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(c);
  h.x.label = "key position";
  h.y.label = "query";
  h.colorbar_label = "column index";
  return h;
}

Heatmap channel_heatmap() {
  Heatmap h;
  h.title = "Channel saliency |q|.|k| (layer 5)";
  h.rows = 8;
  h.cols = 64;
  h.values.resize(8 * 64);
  h.mask.resize(8 * 64);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c) {
      h.values[r * 64 + c] = static_cast<float>(std::abs(std::sin(0.3 * c + r)) * (1 + r));
      h.mask[r * 64 + c] = (c * 7 + r * 3) % 5 == 0;
    }
  for (int r = 0; r < 8; ++r) h.row_labels.push_back("KV head " + std::to_string(r));
  h.x.label = "channel";
  h.colormap = "magma";
  h.colorbar_label = "saliency";
  h.mask_label = "pruned (SPARK)";
  return h;
}

LinePlot line_plot() {
  LinePlot p;
  p.title = "Fidelity vs budget";
  p.x.label = "budget (tokens stored per KV head)";
  p.x.log = true;
  p.y.label = "top-1 agreement";
  const char* names[] = {"SnapKV", "Ada-SnapKV", "KeyDiff"};
  for (int s = 0; s < 3; ++s) {
    Series se;
    se.name = names[s];
    for (int k = 0; k < 8; ++k) {
      const double b = 64.0 * std::pow(2.0, k);
      se.x.push_back(b);
      se.y.push_back(1.0 - 0.5 / (1 + 0.01 * b * (s + 1)));
    }
    se.marker = static_cast<Marker>(1 + s);
    se.line = s == 2 ? LineStyle::Dashed : LineStyle::Solid;
    p.series.push_back(se);
  }
  return p;
}

ScatterPlot scatter_plot() {
  ScatterPlot p;
  p.title = "Key geometry";
  p.x.label = "cosine to anchor";
  p.y.label = "key norm";
  ScatterGroup kept{"kept", {}, {}, Color::hex(0x009e73)}, evicted{"evicted", {}, {}, Color::hex(0x999999)};
  for (int i = 0; i < 300; ++i) {
    const double cs = std::cos(i * 0.37), nrm = 5 + 3 * std::sin(i * 1.3);
    (cs < 0.2 ? kept : evicted).x.push_back(cs);
    (cs < 0.2 ? kept : evicted).y.push_back(nrm);
  }
  p.groups = {evicted, kept};
  p.highlights.push_back({"anchor (mean key)", 1.0, 5.0});
  return p;
}

TokenStrip token_strip(std::size_t n) {
  TokenStrip t;
  t.title = "Kept tokens (layer 0, head 2)";
  t.categories = {{"evicted", Color::hex(0xc8c8c8)}, {"kept", Color::hex(0x3fae6a)}};
  const char* words[] = {"def", " fib", "(", "n", "):", "\n", "   ", " return", " n", " if", " n", " <", " 2"};
  for (std::size_t i = 0; i < n; ++i) {
    t.tokens.push_back(words[i % 13]);
    t.category.push_back((i % 3 == 0 || i < 4) ? 1 : 0);
  }
  return t;
}

BarChart bar_chart() {
  BarChart b;
  b.title = "Bytes per decode step";
  b.categories = {"full", "SnapKV", "Ada-KV", "RocketKV", "SPARK"};
  b.series = {{"stored (MiB)", {128, 16, 16, 18, 9}, {}}, {"read (MiB)", {128, 16, 16, 4, 9}, {}}};
  b.y.label = "MiB";
  b.x.label = "pipeline";
  return b;
}

Figure figure_of(Panel p, std::string title = "kvscope figure") {
  Figure f;
  f.title = std::move(title);
  f.caption = "pipeline: snapkv:window=64,kernel=5 + adakv:alpha=0.2 | model: pycode-16m | budget 512";
  f.panels.push_back(std::move(p));
  return f;
}

// Expected CSV data rows of a one-panel figure.
std::size_t expected_rows(const Panel& p) {
  if (const auto* h = std::get_if<Heatmap>(&p)) {
    std::size_t n = h->values.size();
    for (auto m : h->mask) n += m != 0;
    return n;
  }
  if (const auto* l = std::get_if<LinePlot>(&p)) {
    std::size_t n = 0;
    for (const auto& s : l->series) n += s.x.size();
    return n;
  }
  if (const auto* s = std::get_if<ScatterPlot>(&p)) {
    std::size_t n = s->highlights.size();
    for (const auto& g : s->groups) n += g.x.size();
    return n;
  }
  if (const auto* t = std::get_if<TokenStrip>(&p))
    return !t->tokens.empty() ? t->tokens.size() : !t->category.empty() ? t->category.size() : t->values.size();
  const auto& b = std::get<BarChart>(p);
  return b.series.size() * b.categories.size();
}

// ---------------------------------------------------------------- colormaps

TEST(Colormap, ViridisEndpointsMatchPublishedValues) {
  const Rgb lo = map("viridis", 0.0), hi = map("viridis", 1.0);
  EXPECT_LE(color_distance(lo, Rgb{0x44, 0x01, 0x54}), 2) << hex(lo);
  EXPECT_LE(color_distance(hi, Rgb{0xfd, 0xe7, 0x25}), 2) << hex(hi);
  // Published midpoint #21918c (matplotlib viridis(0.5)).
  EXPECT_LE(color_distance(map("viridis", 0.5), Rgb{0x21, 0x91, 0x8c}), 6) << hex(map("viridis", 0.5));
}

TEST(Colormap, MagmaAndCoolwarmControlPoints) {
  EXPECT_LE(color_distance(map("magma", 0.0), Rgb{0x00, 0x00, 0x04}), 2);
  EXPECT_LE(color_distance(map("magma", 1.0), Rgb{0xfc, 0xfd, 0xbf}), 2);
  EXPECT_LE(color_distance(map("coolwarm", 0.0), Rgb{59, 76, 192}), 2);
  EXPECT_LE(color_distance(map("coolwarm", 0.5), Rgb{221, 221, 221}), 2);
  EXPECT_LE(color_distance(map("coolwarm", 1.0), Rgb{180, 4, 38}), 2);
  EXPECT_TRUE(colormap("coolwarm").diverging());
  EXPECT_EQ(map("orangeblue", 0.0), (Rgb{0xe6, 0x9f, 0x00}));  // B > A: Okabe-Ito orange
  EXPECT_EQ(map("orangeblue", 1.0), (Rgb{0x00, 0x72, 0xb2}));  // A > B: Okabe-Ito blue
  EXPECT_LE(color_distance(map("orangeblue", 0.5), Rgb{0xee, 0xee, 0xee}), 2);
  EXPECT_TRUE(colormap("orangeblue").diverging());
  EXPECT_FALSE(colormap("viridis").diverging());
}

TEST(Colormap, SequentialMapsGetBrighterAndClamp) {
  for (const char* name : {"viridis", "magma"}) {
    const auto& t = colormap(name).table();
    for (int i = 16; i < 256; i += 16) EXPECT_GT(luminance(t[i]), luminance(t[i - 16])) << name << " at " << i;
  }
  EXPECT_EQ(map("viridis", -3.0), map("viridis", 0.0));
  EXPECT_EQ(map("viridis", 7.0), map("viridis", 1.0));
  EXPECT_EQ(map("viridis", std::nan("")), map("viridis", 0.0));
  EXPECT_EQ(colormap_names(), (std::vector<std::string>{"viridis", "magma", "coolwarm", "orangeblue", "keptshare"}));
  EXPECT_EQ(map("keptshare", 0.0), (Rgb{0xd9, 0xd9, 0xd9}));
  EXPECT_EQ(map("keptshare", 1.0), (Rgb{0x00, 0x9e, 0x73}));
}

TEST(Colormap, UnknownNameThrowsInvalidArgument) {
  EXPECT_THROW(map("jet", 0.5), std::invalid_argument);
  EXPECT_THROW(colormap("Viridis"), std::invalid_argument);
  try {
    map("parula", 0.1);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parula"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("viridis"), std::string::npos);
  }
}

// ---------------------------------------------------------------- ticks

TEST(Ticks, NiceTicks) {
  const auto a = nice_ticks(0, 1, 5);
  ASSERT_EQ(a.size(), 6u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i], 0.2 * static_cast<double>(i));
  EXPECT_EQ(nice_ticks(0, 32767, 6), (std::vector<double>{0, 5000, 10000, 15000, 20000, 25000, 30000}));
  EXPECT_EQ(nice_ticks(-3.2, 7.9, 5), (std::vector<double>{-2, 0, 2, 4, 6}));
  EXPECT_EQ(nice_ticks(7.9, -3.2, 5), (std::vector<double>{-2, 0, 2, 4, 6}));  // swapped ends
  EXPECT_EQ(nice_ticks(-0.5, 2.5, 10, 1.0), (std::vector<double>{0, 1, 2}));   // index axis: step >= 1
  const auto d = nice_ticks(5, 5, 4);  // degenerate range widened around the value
  ASSERT_FALSE(d.empty());
  EXPECT_LE(d.front(), 5);
  EXPECT_GE(d.back(), 5);
  EXPECT_TRUE(nice_ticks(0, std::nan(""), 5).empty());
  const auto small = nice_ticks(-0.3, 0.3, 6);  // exact zero, no -0 or 1e-17
  EXPECT_NE(std::find(small.begin(), small.end(), 0.0), small.end());
  EXPECT_DOUBLE_EQ(nice_step(1e-3, 5), 2e-4);
  EXPECT_DOUBLE_EQ(nice_step(700, 7), 100);
}

TEST(Ticks, FormatTick) {
  EXPECT_EQ(format_tick(0.2, 0.2), "0.2");
  EXPECT_EQ(format_tick(0.30000000000000004, 0.1), "0.3");
  EXPECT_EQ(format_tick(1, 0.25), "1.00");
  EXPECT_EQ(format_tick(15000, 5000), "15k");
  EXPECT_EQ(format_tick(2500, 500), "2500");
  EXPECT_EQ(format_tick(12500, 2500), "12.5k");
  EXPECT_EQ(format_tick(2500000, 500000), "2.5M");
  EXPECT_EQ(format_tick(300000, 100000), "0.3M");
  EXPECT_EQ(format_tick(2.5e-5, 5e-6), "2.5e-05");
  EXPECT_EQ(format_tick(-1e-17, 0.1), "0");
  EXPECT_EQ(format_tick(-0.0, 1), "0");
  EXPECT_EQ(format_tick(-4, 2), "-4");
}

TEST(Ticks, AxisMapLinearAndLog) {
  const AxisMap lin{0, 10, 100, 200, false};
  EXPECT_DOUBLE_EQ(lin.to_px(5), 150);
  EXPECT_DOUBLE_EQ(lin.to_data(175), 7.5);
  const AxisMap up{0, 1, 300, 100, false};  // y axis grows upwards
  EXPECT_DOUBLE_EQ(up.to_px(1), 100);
  const AxisMap lg{1, 1000, 0, 300, true};
  EXPECT_NEAR(lg.to_px(10), 100, 1e-9);
  EXPECT_NEAR(lg.to_data(200), 100, 1e-9);
  EXPECT_TRUE(std::isnan(lg.to_px(0)));
  EXPECT_TRUE(std::isnan(lg.to_px(-1)));
}

// ---------------------------------------------------------------- aggregation

TEST(Aggregation, MaxAndMeanOfBlocks) {
  // 4 x 8, value = r * 8 + c; 2 x 4 output: each cell covers a 2 x 2 block.
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<float>(i);
  const auto mx = downsample(v, 4, 8, 2, 4, Aggregate::Max);
  const auto mean = downsample(v, 4, 8, 2, 4, Aggregate::Mean);
  ASSERT_EQ(mx.size(), 8u);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const float a = v[(2 * i) * 8 + 2 * j], b = v[(2 * i) * 8 + 2 * j + 1], c = v[(2 * i + 1) * 8 + 2 * j],
                  d = v[(2 * i + 1) * 8 + 2 * j + 1];
      EXPECT_EQ(mx[i * 4 + j], std::max({a, b, c, d}));
      EXPECT_FLOAT_EQ(mean[i * 4 + j], (a + b + c + d) / 4);
    }
}

TEST(Aggregation, UnevenBinsNaNAndErrors) {
  // 1 x 5 into 1 x 2: bins [0, 2) and [2, 5).
  const std::vector<float> v{1, 9, 3, std::nanf(""), 2};
  EXPECT_EQ(downsample(v, 1, 5, 1, 2, Aggregate::Max), (std::vector<float>{9, 3}));
  const auto mean = downsample(v, 1, 5, 1, 2, Aggregate::Mean);
  EXPECT_FLOAT_EQ(mean[0], 5);
  EXPECT_FLOAT_EQ(mean[1], 2.5);  // NaN ignored
  const std::vector<float> all_nan{std::nanf(""), std::nanf("")};
  EXPECT_TRUE(std::isnan(downsample(all_nan, 1, 2, 1, 1, Aggregate::Max)[0]));
  EXPECT_THROW(downsample(v, 1, 4, 1, 2, Aggregate::Max), std::invalid_argument);  // size mismatch
  EXPECT_THROW(downsample(v, 1, 5, 1, 6, Aggregate::Max), std::invalid_argument);  // upsampling
}

TEST(Aggregation, LargeHeatmapImageKeepsBlockMaxima) {
  // 32 x 32768 zeros with single spikes: the reduced image (at most 700 x 400) must show every
  // spike at full colour under Max and a faint one under Mean.
  Heatmap h;
  h.rows = 32;
  h.cols = 32768;
  h.values.assign(32 * 32768, 0.0f);
  h.values[5 * 32768 + 12345] = 1.0f;
  h.values[30 * 32768 + 32767] = 1.0f;
  const Image img = heatmap_image(h, {0, 1}, 700, 400, Color{});
  ASSERT_EQ(img.width, 700);
  ASSERT_EQ(img.height, 32);
  const Rgb top = colormap("viridis").table()[255], bottom = colormap("viridis").table()[0];
  const auto px = [&](int x, int y) {
    const Color c = img.pixels[static_cast<std::size_t>(y * img.width + x)];
    return Rgb{c.r, c.g, c.b};
  };
  const int x1 = static_cast<int>(12345LL * 700 / 32768);  // bin of column 12345
  EXPECT_EQ(px(x1, 5), top);
  EXPECT_EQ(px(699, 30), top);
  int bright = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) bright += px(x, y) == top;
  EXPECT_EQ(bright, 2);
  EXPECT_EQ(px(0, 0), bottom);
  h.aggregate = Aggregate::Mean;
  const Image mean = heatmap_image(h, {0, 1}, 700, 400, Color{});
  const Color m = mean.pixels[static_cast<std::size_t>(5 * mean.width + x1)];
  EXPECT_LE(color_distance(Rgb{m.r, m.g, m.b}, colormap("viridis").at(1.0 / 47)), 2);
  // Origin at the bottom flips rows.
  h.aggregate = Aggregate::Max;
  h.origin_top = false;
  const Image flipped = heatmap_image(h, {0, 1}, 700, 400, Color{});
  const Color f = flipped.pixels[static_cast<std::size_t>((31 - 5) * flipped.width + x1)];
  EXPECT_EQ((Rgb{f.r, f.g, f.b}), top);
}

// ---------------------------------------------------------------- export of every panel kind

struct Case {
  std::string name;
  Panel panel;
  std::size_t min_colors;
};

std::vector<Case> all_cases() {
  return {
      {"heatmap", gradient_heatmap(16, 48), 80},
      {"heatmap_masked", channel_heatmap(), 80},
      {"line", line_plot(), 20},
      {"scatter", scatter_plot(), 20},
      {"tokens_text", token_strip(40), 20},
      {"tokens_bars", token_strip(5000), 8},
      {"bar", bar_chart(), 20},
  };
}

class ExportEachKind : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ExportEachKind, PngSvgPdfCsv) {
  const Case c = all_cases()[GetParam()];
  TempDir dir;
  Figure f = figure_of(c.panel, "Figure: " + c.name);
  f.width = 640;
  f.height = 420;

  const fs::path png = dir.path() / (c.name + ".png");
  export_figure(f, png);
  const std::string bytes = read_bytes(png);
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const Png img(png);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img.width(), 640);
  EXPECT_EQ(img.height(), 420);
  EXPECT_GT(img.distinct_colors(), c.min_colors) << c.name;

  const fs::path svg = dir.path() / (c.name + ".svg");
  export_figure(f, svg);
  const std::string s = read_bytes(svg);
  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
  EXPECT_NE(s.find("<svg"), std::string::npos);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  EXPECT_NE(s.find("<title>Figure: " + c.name + "</title>"), std::string::npos);
  EXPECT_NE(s.find("<desc>pipeline: snapkv"), std::string::npos);

  const fs::path pdf = dir.path() / (c.name + ".PDF");  // extension matched case-insensitively
  export_figure(f, pdf);
  const std::string p = read_bytes(pdf);
  EXPECT_EQ(p.rfind("%PDF-", 0), 0u);
  EXPECT_NE(p.find("%%EOF"), std::string::npos);

  const fs::path csv = dir.path() / (c.name + ".csv");
  export_figure(f, csv);  // .csv dispatches to export_csv
  const auto lines = read_lines(csv);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "panel,kind,series,row,col,x,y,value,label");
  // Token text may hold quoted newlines: count records, not lines, for token strips.
  std::size_t records = 0;
  {
    const std::string all = read_bytes(csv);
    bool quoted = false;
    for (char ch : all) {
      if (ch == '"') quoted = !quoted;
      if (ch == '\n' && !quoted) ++records;
    }
  }
  EXPECT_EQ(records - 1, expected_rows(c.panel)) << c.name;
  EXPECT_EQ(lines[1].substr(0, 2 + kind_name(c.panel).size()), "0," + std::string(kind_name(c.panel)));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, ExportEachKind, ::testing::Range<std::size_t>(0, 7),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return all_cases()[info.param].name;
                         });

TEST(Export, HeatmapRegionShowsTheColormap) {
  TempDir dir;
  Figure f = figure_of(gradient_heatmap(4, 16));
  const fs::path png = dir.path() / "h.png";
  export_figure(f, png);
  const Png img(png);
  ASSERT_TRUE(img.ok());
  const FigureLayout L = export_layout(f);
  ASSERT_EQ(L.panels.size(), 1u);
  const Rect& P = L.panels[0].plot;
  const Range vr = L.panels[0].value_range;
  EXPECT_EQ(vr, (Range{0, 15}));
  for (int c = 0; c < 16; ++c) {
    const double x = P.x + (c + 0.5) * P.w / 16, y = P.y + P.h / 2;
    const Rgb got = img.rgb(static_cast<int>(x), static_cast<int>(y));
    const Rgb want = map("viridis", c / 15.0);
    EXPECT_LE(color_distance(got, want), 3) << "column " << c << ": " << hex(got) << " vs " << hex(want);
  }
  // The colour bar runs from the top colour (top) to the bottom colour (bottom).
  const Rect& bar = L.panels[0].colorbar;
  ASSERT_FALSE(bar.empty());
  const int bx = static_cast<int>(bar.x + bar.w / 2);
  EXPECT_LE(color_distance(img.rgb(bx, static_cast<int>(bar.y + 2)), map("viridis", 1.0)), 8);
  EXPECT_LE(color_distance(img.rgb(bx, static_cast<int>(bar.bottom() - 2)), map("viridis", 0.0)), 8);
}

TEST(Export, LargeHeatmapShowsSpikeThroughMaxAggregation) {
  TempDir dir;
  Heatmap h;
  h.title = "32 x 32768";
  h.rows = 32;
  h.cols = 32768;
  h.values.assign(32 * 32768, 0.0f);
  for (int r = 0; r < 32; ++r) h.values[static_cast<std::size_t>(r) * 32768 + 20000] = 1.0f;  // one key column
  Figure f = figure_of(h);
  const fs::path png = dir.path() / "big.png";
  export_figure(f, png);
  const Png img(png);
  ASSERT_TRUE(img.ok());
  const FigureLayout L = export_layout(f);
  const Rect& P = L.panels[0].plot;
  const double x = L.panels[0].x.map.to_px(20000);
  const int y = static_cast<int>(P.y + P.h / 2);
  int best = 255;
  for (int dx = -2; dx <= 2; ++dx)
    best = std::min(best, color_distance(img.rgb(static_cast<int>(x) + dx, y), map("viridis", 1.0)));
  EXPECT_LE(best, 3);
  EXPECT_LE(color_distance(img.rgb(static_cast<int>(P.x + 5), y), map("viridis", 0.0)), 3);
}

TEST(Export, TokenStripColoursAndModes) {
  TempDir dir;
  // Few tokens: text boxes; many: bar strip; very many: several tokens per pixel.
  Figure few = figure_of(token_strip(40));
  EXPECT_FALSE(export_layout(few).panels[0].tokens.bars);
  EXPECT_EQ(export_layout(few).panels[0].tokens.boxes.size(), 40u);
  Figure many = figure_of(token_strip(5000));
  const auto tl = export_layout(many).panels[0].tokens;
  EXPECT_TRUE(tl.bars);
  EXPECT_GE(tl.per_cell * tl.cells_per_row * tl.rows, 5000);
  TokenStrip huge;
  huge.title = "1M tokens";
  huge.categories = {{"evicted", {}}, {"kept", {}}};
  huge.category.assign(1'000'000, 0);
  for (std::size_t i = 0; i < huge.category.size(); i += 97) huge.category[i] = 1;
  const auto hl = export_layout(figure_of(huge)).panels[0].tokens;
  EXPECT_TRUE(hl.bars);
  EXPECT_GT(hl.per_cell, 1);
  EXPECT_GE(hl.per_cell * hl.cells_per_row * hl.rows, 1'000'000);

  const fs::path png = dir.path() / "tokens.png";
  export_figure(few, png);
  const Png img(png);
  ASSERT_TRUE(img.ok());
  std::size_t green = 0, grey = 0;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) {
      green += img.rgb(x, y) == Rgb{0x3f, 0xae, 0x6a};
      grey += img.rgb(x, y) == Rgb{0xc8, 0xc8, 0xc8};
    }
  EXPECT_GT(green, 200u);
  EXPECT_GT(grey, 200u);
}

TEST(Export, ValuesStripHasColorbar) {
  TokenStrip t;
  t.title = "attention received";
  t.values.resize(3000);
  for (std::size_t i = 0; i < t.values.size(); ++i) t.values[i] = static_cast<float>(std::exp(-0.001 * i));
  t.colorbar_label = "mass";
  const auto L = export_layout(figure_of(t)).panels[0];
  EXPECT_TRUE(L.tokens.bars);
  EXPECT_FALSE(L.colorbar.empty());
  TempDir dir;
  export_figure(figure_of(t), dir.path() / "v.png");
  EXPECT_GT(Png(dir.path() / "v.png").distinct_colors(), 50u);
}

TEST(Export, MultiPanelGridWithWeights) {
  Figure f;
  f.title = "Session 12: snapkv vs adakv";
  f.caption = "pipeline: snapkv:window=64 + adakv:alpha=0.2";
  f.columns = 2;
  f.col_weights = {2, 1};
  f.panels = {channel_heatmap(), bar_chart(), line_plot(), scatter_plot()};
  const auto L = export_layout(f);
  ASSERT_EQ(L.panels.size(), 4u);
  EXPECT_GT(L.panels[0].cell.w, 1.5 * L.panels[1].cell.w);
  for (const auto& p : L.panels) {
    EXPECT_GE(p.plot.x, 0);
    EXPECT_LE(p.plot.right(), f.width);
    EXPECT_LE(p.plot.bottom(), L.caption.y);
    EXPECT_GT(p.plot.w, 50);
    EXPECT_GT(p.plot.h, 50);
  }
  // Log x axis: decade ticks labelled 100, 1000 -> "1k".
  bool has_1k = false;
  for (const auto& t : L.panels[2].x.ticks) has_1k |= t.label == "1k";
  EXPECT_TRUE(has_1k);
  TempDir dir;
  export_figure(f, dir.path() / "grid.png", 2.0);
  const Png img(dir.path() / "grid.png");
  EXPECT_EQ(img.width(), 1800);
  EXPECT_EQ(img.height(), 1200);
}

TEST(Export, DeterministicBytes) {
  TempDir dir;
  Figure f;
  f.title = "determinism";
  f.caption = "caption";
  f.panels = {channel_heatmap(), line_plot()};
  for (const char* ext : {".png", ".svg", ".pdf", ".csv"}) {
    export_figure(f, dir.path() / (std::string("a") + ext));
    export_figure(f, dir.path() / (std::string("b") + ext));
    EXPECT_EQ(read_bytes(dir.path() / (std::string("a") + ext)), read_bytes(dir.path() / (std::string("b") + ext)))
        << ext;
  }
}

TEST(Export, EscapesAndOddText) {
  TempDir dir;
  TokenStrip t = token_strip(10);
  t.tokens[2] = "\xff\xfe bad utf8";
  t.tokens[3] = "a,\"quoted\"";
  Figure f = figure_of(t, "A <b> & \"c\"");
  export_figure(f, dir.path() / "odd.svg");
  const std::string s = read_bytes(dir.path() / "odd.svg");
  EXPECT_NE(s.find("<title>A &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  export_figure(f, dir.path() / "odd.png");
  EXPECT_GT(Png(dir.path() / "odd.png").distinct_colors(), 20u);
  export_csv(f, dir.path() / "odd.csv");
  const std::string csv = read_bytes(dir.path() / "odd.csv");
  EXPECT_NE(csv.find("\"a,\"\"quoted\"\"\""), std::string::npos);
  EXPECT_NE(csv.find("\xef\xbf\xbd\xef\xbf\xbd bad utf8"), std::string::npos);
}

TEST(Export, CsvValuesRoundTrip) {
  TempDir dir;
  Heatmap h;
  h.rows = 2;
  h.cols = 3;
  h.values = {0.1f, 2, std::nanf(""), -4, 5e-8f, 6};
  h.row_labels = {"L0 H0", "L0 H1"};
  h.x_origin = 100;
  h.x_step = 10;
  export_csv(figure_of(h), dir.path() / "h.csv");
  const auto lines = read_lines(dir.path() / "h.csv");
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[1], "0,heatmap,value,0,0,100,0,0.1,L0 H0|");
  EXPECT_EQ(lines[3], "0,heatmap,value,0,2,120,0,nan,L0 H0|");
  EXPECT_EQ(lines[5], "0,heatmap,value,1,1,110,1,5e-08,L0 H1|");
}

TEST(Export, CategoricalHeatmapColoursKeysAndCsv) {
  // A timeline-like map: 4 steps x 3000 positions, NaN = not in the cache, 0 kept, 1 selected,
  // 2 evicted at that step. Reduced to 300 px, a pixel shows its highest category.
  Heatmap h;
  h.rows = 4;
  h.cols = 3000;
  h.values.assign(4 * 3000, 0.0f);
  for (int c = 0; c < 100; ++c) h.values[static_cast<size_t>(c)] = std::nanf("");
  h.values[static_cast<size_t>(1 * 3000 + 1234)] = 1;
  h.values[static_cast<size_t>(2 * 3000 + 2000)] = 2;
  h.categories = {
      {"kept", Color::hex(0x00ff00)}, {"selected", Color::hex(0x0000ff)}, {"evicted", Color::hex(0xff0000)}};
  h.aggregate = Aggregate::Mean;  // ignored: categories reduce by their highest index
  const Image img = heatmap_image(h, {0, 3}, 300, 4, Color::hex(0xffffff));
  const auto px = [&](int x, int y) { return img.pixels[static_cast<size_t>(y * img.width + x)]; };
  EXPECT_EQ(px(0, 0), Color::hex(0xffffff)) << "NaN: the missing colour";
  EXPECT_EQ(px(1234 * 300 / 3000, 1), Color::hex(0x0000ff)) << "one selected cell wins its pixel";
  EXPECT_EQ(px(2000 * 300 / 3000, 2), Color::hex(0xff0000));
  EXPECT_EQ(px(200, 3), Color::hex(0x00ff00));
  // Keys under the plot instead of a colour bar; CSV labels are the category names.
  TempDir dir;
  const Figure f = figure_of(h);
  Heatmap small = h;
  small.rows = 1;
  small.cols = 3;
  small.values = {0, 2, std::nanf("")};
  export_csv(figure_of(small), dir.path() / "c.csv");
  const auto lines = read_lines(dir.path() / "c.csv");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2], "0,heatmap,value,0,1,1,0,2,evicted");
  EXPECT_EQ(lines[3], "0,heatmap,value,0,2,2,0,nan,");
  export_figure(f, dir.path() / "c.png");
  EXPECT_GT(fs::file_size(dir.path() / "c.png"), 100u);
  Heatmap bad = small;
  bad.values[0] = 3;
  EXPECT_THROW(validate(figure_of(bad)), std::invalid_argument) << "3 is not a category of 3";
  bad.values[0] = 0.5f;
  EXPECT_THROW(validate(figure_of(bad)), std::invalid_argument);
}

TEST(Export, ErrorsNameTheFile) {
  TempDir dir;
  const Figure f = figure_of(bar_chart());
  try {
    export_figure(f, dir.path() / "fig.bmp");
    FAIL() << "no throw";
  } catch (const ExportError& e) {
    EXPECT_NE(std::string(e.what()).find("fig.bmp"), std::string::npos);
  }
  EXPECT_THROW(export_figure(f, dir.path() / "noext"), ExportError);
  for (const char* name : {"x.png", "x.svg", "x.pdf", "x.csv"}) {
    const fs::path bad = dir.path() / "missing-dir" / name;
    try {
      export_figure(f, bad);
      FAIL() << "no throw for " << name;
    } catch (const ExportError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(export_csv(f, dir.path()), ExportError);  // a directory
}

TEST(Validate, RejectsInconsistentData) {
  Heatmap h = gradient_heatmap(2, 3);
  h.values.pop_back();
  try {
    validate(figure_of(h));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("panel 0 (heatmap 'Attention (layer 3)')"), std::string::npos) << e.what();
  }
  TempDir dir;
  EXPECT_THROW(export_figure(figure_of(h), dir.path() / "x.png"), std::invalid_argument);
  Heatmap bad_map = gradient_heatmap(2, 3);
  bad_map.colormap = "rainbow";
  EXPECT_THROW(validate(figure_of(bad_map)), std::invalid_argument);
  LinePlot l = line_plot();
  l.series[1].y.pop_back();
  EXPECT_THROW(validate(figure_of(l)), std::invalid_argument);
  TokenStrip t = token_strip(5);
  t.category[2] = 7;
  EXPECT_THROW(validate(figure_of(t)), std::invalid_argument);
  BarChart b = bar_chart();
  b.series[0].values.push_back(1);
  EXPECT_THROW(validate(figure_of(b)), std::invalid_argument);
  Figure f = figure_of(bar_chart());
  f.row_weights = {1, 2};
  EXPECT_THROW(validate(f), std::invalid_argument);
  EXPECT_NO_THROW(validate(figure_of(scatter_plot())));
}

TEST(Export, EmptyAndDegeneratePanels) {
  TempDir dir;
  Figure f;
  f.title = "empty things";
  LinePlot empty_line;
  empty_line.title = "no series";
  ScatterPlot one_point;
  one_point.groups.push_back({"p", {3}, {3}, {}});
  Heatmap zero;
  zero.title = "0 x 0";
  Heatmap constant = gradient_heatmap(3, 3);
  std::fill(constant.values.begin(), constant.values.end(), 2.0f);
  BarChart no_bars;
  TokenStrip no_tokens;
  f.panels = {empty_line, one_point, zero, constant, no_bars, no_tokens};
  for (const char* ext : {".png", ".svg", ".pdf", ".csv"})
    EXPECT_NO_THROW(export_figure(f, dir.path() / (std::string("e") + ext)));
  Figure nothing;
  EXPECT_NO_THROW(export_figure(nothing, dir.path() / "nothing.png"));
}

}  // namespace
}  // namespace kvscope::viz

namespace kvscope::viz {
namespace {

// Stacked panels over token positions: a heatmap with a colour bar, a line plot with wide y
// labels and a one-row token strip share their plot edges under Figure::share_x, and a position
// maps to the same pixel column in each.
TEST(Layout, ShareXAlignsStackedPositionAxes) {
  const std::int64_t T = 3000;
  Heatmap h = gradient_heatmap(4, T);
  LinePlot lp;
  Series s;
  for (std::int64_t i = 0; i < T; ++i) s.x.push_back(double(i)), s.y.push_back(123456.0 * double(i % 7));
  lp.series = {s};
  lp.x.range = Range{-0.5, double(T) - 0.5};
  TokenStrip t;
  t.category.assign(T, 0);
  t.categories = {{"kept", Color::hex(0x1b9e77)}};
  t.single_row = true;
  Figure f;
  f.columns = 1;
  f.panels = {h, lp, t};
  const auto unshared = export_layout(f);
  EXPECT_GT(std::abs(unshared.panels[0].plot.right() - unshared.panels[1].plot.right()), 5)
      << "without share_x the colour bar narrows the heatmap only";
  f.share_x = true;
  const auto L = export_layout(f);
  for (int i = 1; i < 3; ++i) {
    EXPECT_NEAR(L.panels[i].plot.x, L.panels[0].plot.x, 0.5) << "panel " << i;
    EXPECT_NEAR(L.panels[i].plot.right(), L.panels[0].plot.right(), 0.5) << "panel " << i;
  }
  for (double pos : {0.0, 1500.0, 2999.0}) {
    EXPECT_NEAR(L.panels[0].x.map.to_px(pos), L.panels[1].x.map.to_px(pos), 1.0) << pos;
    EXPECT_NEAR(L.panels[0].x.map.to_px(pos), L.panels[2].x.map.to_px(pos), 1.5) << pos;
  }
  EXPECT_TRUE(L.panels[2].tokens.bars);
  EXPECT_EQ(L.panels[2].tokens.rows, 1);
  EXPECT_FALSE(L.panels[2].x.ticks.empty()) << "a one-row strip has a position axis";
}

TEST(Export, SpansAndReferenceLinesAreDrawnInTheLegendAndCsv) {
  LinePlot lp;
  Series s;
  s.name = "score";
  for (int i = 0; i < 100; ++i) s.x.push_back(i), s.y.push_back(i % 10);
  lp.series = {s};
  lp.spans = {{80, 99, Color::hex(0x0000ff), "observation window"}};
  lp.rules = {{false, 25.0, Color::hex(0xff0000), LineStyle::Solid, 3.0, "cutoff"}};
  lp.legend = LegendPos::Outside;
  Figure f = figure_of(lp);
  const auto L = export_layout(f);
  const auto& P = L.panels[0];
  // The horizontal line's value widens the y range past the data (max 9).
  EXPECT_GE(P.y.map.lo <= P.y.map.hi ? P.y.map.hi : P.y.map.lo, 25.0);
  ASSERT_EQ(P.legend.entries.size(), 3u);
  EXPECT_GE(P.legend.box.x, P.plot.right()) << "outside legend right of the data";
  TempDir dir;
  export_figure(f, dir.path() / "s.png");
  const Png img(dir.path() / "s.png");
  const int yl = static_cast<int>(std::lround(P.y.map.to_px(25.0)));
  const Rgb on_line = img.rgb(static_cast<int>(P.x.map.to_px(40)), yl);
  EXPECT_GT(on_line.r, 200);
  EXPECT_LT(on_line.g, 80);
  // Inside the span (away from data and grid) the background is tinted blue.
  const Rgb in_span = img.rgb(static_cast<int>(P.x.map.to_px(90.3)), static_cast<int>(P.y.map.to_px(17.3)));
  EXPECT_GT(in_span.b, in_span.r + 20) << hex(in_span);
  export_csv(f, dir.path() / "s.csv");
  const auto lines = read_lines(dir.path() / "s.csv");
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) {
                           return l.find("span") != std::string::npos &&
                                  l.find("observation window") != std::string::npos;
                         }),
            lines.end());
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.find("hline") != std::string::npos; }),
            lines.end());
  lp.spans[0].hi = 10;  // lo > hi
  EXPECT_THROW(validate(figure_of(lp)), std::invalid_argument);
}

}  // namespace
}  // namespace kvscope::viz

namespace kvscope::viz {
namespace {

TEST(Layout, NearConstantValuesDoNotGetFullContrast) {
  const std::vector<float> counts = {287, 288, 288, 287};
  const Range r = color_range(counts, std::nullopt, colormap("viridis"));
  EXPECT_NEAR(r.lo, 287.5 - 14.4, 1e-9);
  EXPECT_NEAR(r.hi, 287.5 + 14.4, 1e-9);
  // 287 and 288 land within 4% of the scale of each other, not at its two ends.
  EXPECT_LT((288 - 287) / (r.hi - r.lo), 0.04);
  // A real spread keeps the tight range.
  const std::vector<float> spread = {0.95f, 0.97f};
  EXPECT_EQ(color_range(spread, std::nullopt, colormap("viridis")), (Range{0.95f, 0.97f}));
}

}  // namespace
}  // namespace kvscope::viz
