// The head-pattern figure (app/figures/head_pattern_figure.cpp): what the map, the window bars and
// the loss curve show for a pattern file, and that bad files are named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "head_pattern_figure.h"
#include "kvscope/core/errors.h"

namespace kvscope {
namespace {
namespace fs = std::filesystem;

HeadPattern two_by_two() {
  HeadPattern p;
  p.method = "hs-sft";
  p.budget = 0.5;
  p.layers = {{HeadPlan{}, HeadPlan{true, 4, 28}}, {HeadPlan{true, 4, 60}, HeadPlan{true, 4, 60}}};
  return p;
}

TEST(HeadPatternFigure, MapsKeptEntriesAndOutlinesDenseHeads) {
  const viz::Figure f = figures::head_pattern_figure(two_by_two(), {128, -1, {}});
  viz::validate(f);
  ASSERT_EQ(f.panels.size(), 2u);
  const auto& map = std::get<viz::Heatmap>(f.panels[0]);
  EXPECT_EQ(map.values, (std::vector<float>{128, 32, 64, 64}));
  EXPECT_EQ(map.mask, (std::vector<std::uint8_t>{1, 0, 0, 0}));
  const auto& bars = std::get<viz::BarChart>(f.panels[1]);
  EXPECT_EQ(bars.series[0].values, (std::vector<double>{28, 60}));
  EXPECT_EQ(bars.series[1].values, (std::vector<double>{4, 4}));
  // (128 + 32 + 64 + 64) / 512
  EXPECT_NE(f.title.find("kept 0.562"), std::string::npos) << f.title;
}

TEST(HeadPatternFigure, LayerWithoutStreamingHeadsHasNoBar) {
  HeadPattern p = two_by_two();
  p.layers[0][1] = HeadPlan{};
  const auto f = figures::head_pattern_figure(p, {128, -1, {}});
  EXPECT_TRUE(std::isnan(std::get<viz::BarChart>(f.panels[1]).series[0].values[0]));
}

TEST(HeadPatternFigure, ReadsTheLearnedLossCurveFromTheFile) {
  const fs::path f = fs::temp_directory_path() / ("kvscope_hp_fig_" + std::to_string(::getpid()) + ".json");
  save_head_pattern(f, two_by_two());
  nlohmann::json j = nlohmann::json::parse(std::ifstream(f));
  j["reference_length"] = 256;
  j["learned"] = {
      {"loss_curve", {{1, 0.9, 0.1, 0.8, "duo"}, {2, 3.0, 2.9, 0.1, "hs-sft"}, {3, 2.5, 2.4, 0.1, "hs-sft"}}}};
  std::ofstream(f) << j.dump();
  const viz::Figure fig = figures::head_pattern_figure(f);
  viz::validate(fig);
  ASSERT_EQ(fig.panels.size(), 3u);
  EXPECT_EQ(std::get<viz::Heatmap>(fig.panels[0]).values[0], 256.0f);
  const auto& curve = std::get<viz::LinePlot>(fig.panels[2]);
  ASSERT_EQ(curve.series.size(), 2u) << "one line per phase";
  EXPECT_EQ(curve.series[0].name, "duo");
  EXPECT_EQ(curve.series[1].y, (std::vector<double>{3.0, 2.5}));
  j["learned"]["loss_curve"] = {{"one", 2}};
  std::ofstream(f) << j.dump();
  try {
    figures::head_pattern_figure(f);
    FAIL() << "a malformed loss curve must be named";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loss_curve"), std::string::npos) << e.what();
  }
  std::remove(f.c_str());
}

}  // namespace
}  // namespace kvscope
