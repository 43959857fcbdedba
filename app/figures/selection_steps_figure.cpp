#include "selection_steps_figure.h"
#include "figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvscope::figures {
namespace {
constexpr viz::Color kLiveColor = viz::Color::hex(0xdedede);    // light grey
constexpr viz::Color kOnlyColor = viz::Color::hex(0x56b4e9);    // Okabe-Ito sky blue
constexpr viz::Color kHitColor = viz::Color::hex(0x009e73);     // Okabe-Ito bluish green
constexpr viz::Color kMissedColor = viz::Color::hex(0xd55e00);  // Okabe-Ito vermillion
constexpr viz::Color kPageColor = viz::Color::hex(0x0072b2);    // Okabe-Ito blue (the Timeline's selected)
constexpr viz::Color kMarkerColor = viz::Color::hex(0x444444);  // the step marker
constexpr viz::Color kMeanColor = viz::Color::hex(0x888888);    // the run-long mean

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string head_text(const SelectionStep& st) {
  return "layer " + std::to_string(st.layer) + ", KV head " + std::to_string(st.head);
}

std::string strip_title(const Timeline& t, const SelectionStep& st) {
  const std::string n_live = std::to_string(st.live.size()) + " live entries";
  if (st.step < 1) return "step 0 (prefill): " + n_live + ", nothing selected";
  if (!st.selected)
    return "step " + std::to_string(st.step) + ": " + n_live + "; no selection recorded (a dense step or head)";
  std::string s = "step " + std::to_string(st.step) + ": " + std::to_string(st.n_selected) + " of " + n_live +
                  " selected " + (st.per_token ? "(per token)" : "(per page of " + std::to_string(t.page) + ")");
  if (st.exact) {
    s += "; exact top-k " + std::to_string(st.n_exact) + ": " + std::to_string(st.n_hit) + " hit, " +
         std::to_string(st.n_exact - st.n_hit) + " missed";
    if (!std::isnan(st.recall)) s += ", recall " + fmt("%.3f", st.recall);
  } else if (!st.per_token) {
    s += " · no exact top-k: pin the head (--pin " + std::to_string(st.layer) + ":" + std::to_string(st.head) +
         ", --capture full)";
  } else {
    s += "; no exact top-k recorded (--capture full)";
  }
  return s;
}

}  // namespace

std::vector<viz::TokenCategory> selection_step_categories(bool with_exact) {
  if (!with_exact) return {{"live, not selected", kLiveColor}, {"selected", kPageColor}};
  return {{"live, not selected", kLiveColor},
          {"selected only", kOnlyColor},
          {"hit: selected and exact top-k", kHitColor},
          {"missed: exact top-k only", kMissedColor}};
}

const char* selection_step_label(SelectionStepCell c) {
  switch (c) {
    case kStepLive:
      return "live, not selected";
    case kStepSelected:
      return "selected only";
    case kStepHit:
      return "hit (selected, in the exact top-k)";
    case kStepMissed:
      return "missed (in the exact top-k, not selected)";
  }
  return "";
}

SelectionStep selection_step(const Timeline& t, std::int64_t layer, std::int64_t head, std::int64_t step) {
  SelectionStep st;
  st.layer = layer;
  st.head = head;
  st.step = step;
  st.live = t.live_positions(layer, head, step);  // checks the index
  const std::int64_t n = static_cast<std::int64_t>(st.live.size());
  st.cell.assign(static_cast<std::size_t>(n), kStepLive);
  if (step < 1) return st;
  bool token = false;
  if (const auto ranges = t.selected_ranks(layer, head, step, n, &token)) {
    st.selected = true;
    st.per_token = token;
    for (const auto& [a, b] : *ranges)
      for (std::int64_t r = a; r < b; ++r) st.cell[static_cast<std::size_t>(r)] = kStepSelected, ++st.n_selected;
  }
  if (const auto exact = t.exact_positions(layer, head, step, &st.live)) {
    st.exact = true;
    auto it = st.live.begin();
    for (std::int64_t p : *exact) {  // both ascending: one merge pass
      it = std::lower_bound(it, st.live.end(), p);
      std::uint8_t& c = st.cell[static_cast<std::size_t>(it - st.live.begin())];
      c = c == kStepSelected ? kStepHit : kStepMissed;
      st.n_hit += c == kStepHit;
      ++st.n_exact;
    }
  }
  st.recall = t.recall_at(step, layer, head);
  return st;
}

StripBins strip_bins(std::int64_t n_live, std::int64_t max_cols) {
  StripBins b;
  b.n = std::max<std::int64_t>(n_live, 0);
  b.cols = b.n == 0 ? 0 : std::clamp<std::int64_t>(max_cols, 1, b.n);
  return b;
}

viz::Figure selection_steps_figure(const Timeline& t, const SelectionStep& st, const std::string& title,
                                   const std::string& caption, int width_px) {
  viz::Figure f;
  f.title = "Layer " + std::to_string(st.layer) + ", KV head " + std::to_string(st.head) + " at decode step " +
            std::to_string(st.step) + ": the selection against the exact top-k (" + title + ")";
  f.caption = caption;
  f.columns = 1;

  viz::Heatmap h;
  h.title = strip_title(t, st);
  const StripBins bins = strip_bins(static_cast<std::int64_t>(st.live.size()), std::clamp(width_px, 64, 4096));
  h.rows = 1;
  h.cols = std::max<std::int64_t>(bins.cols, 1);
  h.values.assign(static_cast<std::size_t>(h.cols), std::nanf(""));
  for (std::int64_t r = 0; r < bins.n; ++r) {
    float& v = h.values[static_cast<std::size_t>(bins.col(r))];
    const float c = static_cast<float>(st.cell[static_cast<std::size_t>(r)]);
    if (!(v >= c)) v = c;  // NaN or lower priority
  }
  h.categories = selection_step_categories(st.exact);
  if (!st.exact)  // pages (or tokens without an oracle): selected is category 1 either way
    for (float& v : h.values) v = std::isnan(v) ? v : std::min(v, 1.0f);
  const double n = static_cast<double>(std::max<std::int64_t>(bins.n, 1));
  h.x_step = n / static_cast<double>(h.cols);
  h.x_origin = h.x_step / 2 - 0.5;
  for (int i = 0; i < 7 && bins.n > 0; ++i) {  // ticks at ranks, labelled with their positions
    const std::int64_t r = std::min<std::int64_t>(bins.n - 1, i * (bins.n - 1) / 6);
    if (!h.x.ticks.empty() && h.x.ticks.back() == static_cast<double>(r)) continue;
    h.x.ticks.push_back(static_cast<double>(r));
    h.x.tick_labels.push_back(std::to_string(st.live[static_cast<std::size_t>(r)]));
  }
  // No axis label: the category key takes the line under the strip; the ticks name positions.
  h.x.grid = h.y.grid = false;
  h.y.ticks = {0.0};
  h.y.tick_labels = {""};
  f.panels.push_back(std::move(h));

  std::vector<double> x, y;
  double sum = 0;
  std::int64_t count = 0;
  for (std::int64_t s = 1; s <= t.n_steps; ++s) {
    const float r = t.recall_at(s, st.layer, st.head);
    x.push_back(static_cast<double>(s));
    y.push_back(r);
    if (!std::isnan(r)) sum += r, ++count;
  }
  if (count == 0) {
    f.panels.push_back(note_panel(head_text(st) +
                                  ": no recall of the exact top-k recorded (--capture full, a selection "
                                  "policy)"));
  } else {
    const double mean = sum / static_cast<double>(count);
    viz::LinePlot p;
    p.title = "recall of the exact top-k per decode step, " + head_text(st) + " (mean " + fmt("%.3f", mean) + " over " +
              std::to_string(count) + " steps)";
    p.series.push_back({"this head", x, y, kHitColor});
    p.series.push_back({"mean " + fmt("%.3f", mean),
                        {1.0, static_cast<double>(std::max<std::int64_t>(t.n_steps, 1))},
                        {mean, mean},
                        kMeanColor,
                        viz::LineStyle::Dashed});
    if (st.step >= 1) {
      p.series.push_back({"step " + std::to_string(st.step),
                          {double(st.step), double(st.step)},
                          {0.0, 1.0},
                          kMarkerColor,
                          viz::LineStyle::Dotted});
      if (!std::isnan(st.recall)) {
        viz::Series dot{"", {double(st.step)}, {double(st.recall)}, kMissedColor, viz::LineStyle::None};
        dot.marker = viz::Marker::Circle;
        dot.marker_size = 4.5;
        p.series.push_back(std::move(dot));
      }
    }
    p.x.label = "decode step";
    p.y.label = "recall";
    p.y.range = viz::Range{0, 1.02};
    p.legend = viz::LegendPos::BottomRight;
    f.panels.push_back(std::move(p));
  }
  f.row_weights = {1.0, 1.6};
  return f;
}

}  // namespace kvscope::figures
