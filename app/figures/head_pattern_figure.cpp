#include "head_pattern_figure.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"

namespace kvscope::figures {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int64_t entries_kept(const HeadPlan& h, int64_t n) { return h.streaming ? std::min(n, h.sink + h.window) : n; }

}  // namespace

viz::Figure head_pattern_figure(const HeadPattern& p, const HeadPatternFigureData& d) {
  const int64_t L = static_cast<int64_t>(p.layers.size());
  int64_t H = 0, widest = 1;
  for (const auto& layer : p.layers) {
    H = std::max<int64_t>(H, static_cast<int64_t>(layer.size()));
    for (const auto& h : layer)
      if (h.streaming) widest = std::max(widest, h.sink + h.window);
  }
  const int64_t n = d.reference_length > 0 ? d.reference_length : widest;
  viz::Heatmap map;
  map.title = L == 0 || H == 0 ? "no heads" : "entries kept on a " + std::to_string(n) + "-token context";
  map.rows = L;
  map.cols = H;
  int64_t kept = 0, total = 0;
  for (int64_t l = 0; l < L; ++l) {
    map.row_labels.push_back("L" + std::to_string(l));
    for (int64_t h = 0; h < H; ++h) {
      const bool present = h < static_cast<int64_t>(p.layers[l].size());
      const HeadPlan plan = present ? p.layers[l][h] : HeadPlan{};
      map.values.push_back(present ? static_cast<float>(entries_kept(plan, n))
                                   : std::numeric_limits<float>::quiet_NaN());
      map.mask.push_back(present && !plan.streaming ? 1 : 0);
      if (present) kept += entries_kept(plan, n), total += n;
    }
  }
  for (int64_t h = 0; h < H; ++h) map.col_labels.push_back("H" + std::to_string(h));
  map.x.label = "KV head";
  map.y.label = "layer";
  map.colorbar_label = "kept entries (dense = " + std::to_string(n) + ")";
  map.value_range = viz::Range{0, static_cast<double>(n)};
  map.mask_style = viz::MaskStyle::Outline;
  map.mask_label = "outlined: dense (retrieval) heads";

  viz::BarChart windows;
  windows.title = L == 0 ? "no heads" : "streaming window per layer (sinks excluded)";
  viz::BarSeries w{"window", {}, std::nullopt};
  viz::BarSeries s{"sink", {}, std::nullopt};
  for (int64_t l = 0; l < L; ++l) {
    windows.categories.push_back("L" + std::to_string(l));
    double sum = 0, sinks = 0, count = 0;
    for (const auto& h : p.layers[l])
      if (h.streaming) sum += static_cast<double>(h.window), sinks += static_cast<double>(h.sink), ++count;
    w.values.push_back(count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN());
    s.values.push_back(count > 0 ? sinks / count : std::numeric_limits<double>::quiet_NaN());
  }
  windows.series = {w, s};
  windows.x.label = "layer";
  windows.y.label = "tokens";

  viz::Figure f;
  const double achieved = d.budget_achieved >= 0 ? d.budget_achieved
                          : total > 0            ? static_cast<double>(kept) / static_cast<double>(total)
                                                 : 0.0;
  f.title = "Head pattern (" + p.method + "): budget " + fmt("%g", p.budget) + ", kept " + fmt("%.3f", achieved) +
            " of the full cache at " + std::to_string(n) + " tokens";
  f.panels.push_back(map);
  f.panels.push_back(windows);
  if (!d.loss.empty()) {
    viz::LinePlot curve;
    curve.title = "training loss";
    for (const auto& pt : d.loss) {
      if (curve.series.empty() || curve.series.back().name != pt.phase) {
        viz::Series line;
        line.name = pt.phase;
        curve.series.push_back(line);
      }
      curve.series.back().x.push_back(pt.step);
      curve.series.back().y.push_back(pt.loss);
    }
    curve.x.label = "step";
    curve.y.label = "loss (duo: distillation + L1; hs-sft: LM + balance KL)";
    f.panels.push_back(curve);
  }
  f.columns = static_cast<int>(f.panels.size());
  f.width = 420 * f.columns;
  f.height = 460;
  f.caption = std::to_string(L) + " layers x " + std::to_string(H) +
              " KV heads; a streaming head keeps its sink tokens "
              "plus the most recent window (StreamingLLM §3.2, DuoAttention §3.2, HS-SFT §2.2)";
  return f;
}

viz::Figure head_pattern_figure(const std::filesystem::path& path) {
  const HeadPattern p = load_head_pattern(path);
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, std::string("not valid JSON: ") + e.what());
  }
  HeadPatternFigureData d;
  d.reference_length = j.value("reference_length", int64_t{0});
  d.budget_achieved = j.value("budget_achieved", -1.0);
  if (j.contains("learned") && j["learned"].is_object() && j["learned"].contains("loss_curve")) {
    for (const auto& row : j["learned"]["loss_curve"]) {
      if (!row.is_array() || row.size() < 2 || !row[0].is_number() || !row[1].is_number())
        throw InputError(path, "learned.loss_curve rows must be [step, loss, ...]");
      d.loss.push_back({row[0].get<double>(), row[1].get<double>(),
                        row.size() >= 5 && row[4].is_string() ? row[4].get<std::string>() : "loss"});
    }
  }
  return head_pattern_figure(p, d);
}

}  // namespace kvscope::figures
