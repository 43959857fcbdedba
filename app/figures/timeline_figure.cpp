#include "timeline_figure.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "figures.h"

namespace kvscope::figures {
namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr viz::Color kSelectedColor = viz::Color::hex(0x0072b2);    // Okabe-Ito blue
constexpr viz::Color kEvictedNowColor = viz::Color::hex(0xd55e00);  // Okabe-Ito vermillion

void mark(float& cell, TimelineCell v) {
  if (!(cell >= static_cast<float>(v))) cell = static_cast<float>(v);  // NaN or lower priority
}

viz::Figure no_timeline(const RunData& a, const std::string& why) {
  viz::Figure f;
  f.title = "Timeline: " + a.title();
  viz::Heatmap h;
  h.title = why;
  f.panels.push_back(std::move(h));
  f.caption = a.caption();
  return f;
}
}  // namespace

std::vector<viz::TokenCategory> timeline_categories() {
  return {{"kept", kKeptColor}, {"selected", kSelectedColor}, {"evicted", kEvictedNowColor}};
}

TimelineRaster timeline_raster(const Timeline& t, std::int64_t layer, std::int64_t head, std::int64_t max_rows,
                               std::int64_t max_cols, bool exact, std::int64_t pos_lo, std::int64_t pos_hi) {
  TimelineCursor cursor(t, layer, head);  // checks the head
  TimelineRaster r;
  // The positions shown: [P0, P1) (the zoomed window, or all of them).
  const std::int64_t P0 =
      std::clamp<std::int64_t>(pos_hi < 0 ? 0 : pos_lo, 0, std::max<std::int64_t>(t.n_positions - 1, 0));
  const std::int64_t P1 = pos_hi < 0 ? t.n_positions : std::clamp<std::int64_t>(pos_hi + 1, P0 + 1, t.n_positions);
  const std::int64_t S = t.n_steps + 1, N = std::max<std::int64_t>(P1 - P0, 1);
  r.rows = std::clamp<std::int64_t>(max_rows, 1, S);
  r.cols = std::clamp<std::int64_t>(max_cols, 1, N);
  r.cells.assign(static_cast<std::size_t>(r.rows * r.cols), kNaN);
  auto row = [&](std::int64_t s) { return s * r.rows / S; };
  auto col = [&](std::int64_t p) { return (p - P0) * r.cols / N; };
  auto shown = [&](std::int64_t p) { return p >= P0 && p < P1; };
  auto cell = [&](std::int64_t rr, std::int64_t cc) -> float& {
    return r.cells[static_cast<std::size_t>(rr * r.cols + cc)];
  };
  // Kept from entry to eviction, evicted at its step: per column, the union of its positions' row
  // intervals (merged, so a column costs its rows once, not once per position).
  const std::size_t base = static_cast<std::size_t>((layer * t.n_head_kv + head) * t.n_positions);
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (std::int64_t p0 = P0; p0 < P1;) {
    const std::int64_t c = col(p0);
    std::int64_t p1 = p0;
    spans.clear();
    for (; p1 < P1 && col(p1) == c; ++p1) {
      const std::int64_t in = t.entered_at[static_cast<std::size_t>(p1)], out = t.evicted_at[base + p1];
      const std::int64_t last = out < 0 ? t.n_steps : out - 1;
      if (in <= last) spans.emplace_back(row(in), row(last));
    }
    std::sort(spans.begin(), spans.end());
    std::int64_t filled = -1;  // rows up to here are marked
    for (const auto& [a, b] : spans)
      for (std::int64_t rr = std::max(a, filled + 1); rr <= b; ++rr, filled = rr - 1) mark(cell(rr, c), kCellKept);
    for (std::int64_t p = p0; p < p1; ++p)
      if (const std::int64_t out = t.evicted_at[base + p]; out >= 0) mark(cell(row(out), c), kCellEvicted);
    p0 = p1;
  }
  exact = exact && r.cols == N;  // binned columns: a selected page marks its span
  // Selections, walking the live set step by step.
  r.live.assign(static_cast<std::size_t>(S), 0.0);
  r.selected.assign(static_cast<std::size_t>(S), std::nan(""));
  for (std::int64_t s = 0; s <= t.n_steps; ++s) {
    cursor.advance_to(s);
    const auto& live = cursor.live();
    r.live[static_cast<std::size_t>(s)] = static_cast<double>(live.size());
    const auto ranges = t.selected_ranks(layer, head, s, static_cast<std::int64_t>(live.size()));
    if (!ranges) continue;
    double n = 0;
    const std::int64_t rr = row(s);
    for (const auto& [a, b] : *ranges) {
      n += static_cast<double>(b - a);
      if (exact) {
        for (std::int64_t k = a; k < b; ++k)
          if (const std::int64_t p = live[static_cast<std::size_t>(k)]; shown(p)) mark(cell(rr, col(p)), kCellSelected);
      } else {  // page by page: the columns from its first to its last position (one by one when sparse)
        for (std::int64_t k = a; k < b; k += t.page) {
          const std::int64_t e = std::min(b, k + t.page);
          const std::int64_t p0 = live[static_cast<std::size_t>(k)], p1 = live[static_cast<std::size_t>(e - 1)];
          if (p1 - p0 > 4 * (e - k)) {
            for (std::int64_t j = k; j < e; ++j)
              if (const std::int64_t p = live[static_cast<std::size_t>(j)]; shown(p))
                mark(cell(rr, col(p)), kCellSelected);
          } else if (p1 >= P0 && p0 < P1) {
            for (std::int64_t c = col(std::max(p0, P0)); c <= col(std::min(p1, P1 - 1)); ++c)
              mark(cell(rr, c), kCellSelected);
          }
        }
      }
    }
    r.selected[static_cast<std::size_t>(s)] = n;
  }
  return r;
}

namespace {

using Needles = std::vector<std::pair<std::int64_t, std::int64_t>>;

// Hatches the needle positions' columns of map `h` (raster `r` of window `w`) and
// says in its title what the head did with them: evicted at which steps, selected at how many.
void mark_needles(viz::Heatmap& h, const TimelineRaster& r, const Timeline& t, std::int64_t layer, std::int64_t head,
                  const PositionWindow& w, const Needles& needles) {
  const std::int64_t N = std::max<std::int64_t>(w.size(), 1), S = t.n_steps + 1;
  const std::size_t base = static_cast<std::size_t>((layer * t.n_head_kv + head) * t.n_positions);
  std::vector<std::uint8_t> col(static_cast<std::size_t>(r.cols), 0);
  std::string ranges;
  std::int64_t n = 0, evicted = 0, first_out = -1, last_out = -1;
  for (const auto& [lo, hi] : needles) {
    ranges += (ranges.empty() ? "" : ", ") + std::to_string(lo) + "-" + std::to_string(hi - 1);
    for (std::int64_t p = std::max<std::int64_t>(lo, 0); p < std::min(hi, t.n_positions); ++p) {
      ++n;
      if (const std::int64_t out = t.evicted_at[base + static_cast<std::size_t>(p)]; out >= 0) {
        ++evicted;
        first_out = first_out < 0 ? out : std::min(first_out, out);
        last_out = std::max(last_out, out);
      }
      if (p >= w.lo && p <= w.hi) col[static_cast<std::size_t>((p - w.lo) * r.cols / N)] = 1;
    }
  }
  if (n == 0) return;
  h.mask.assign(static_cast<std::size_t>(r.rows * r.cols), 0);
  for (std::int64_t rr = 0; rr < r.rows; ++rr)
    for (std::int64_t c = 0; c < r.cols; ++c)
      h.mask[static_cast<std::size_t>(rr * r.cols + c)] = col[static_cast<std::size_t>(c)];
  h.mask_style = viz::MaskStyle::Hatch;
  h.mask_color.reset();  // dark-under-light lines: they show on kept, evicted and empty cells alike
  h.mask_label = "needle";
  auto step = [](std::int64_t s) { return s == 0 ? std::string("0 (prefill)") : std::to_string(s); };
  std::string what = evicted == 0 ? "kept to the end"
                                  : "evicted " + std::to_string(evicted) + " of " + std::to_string(n) + " at step " +
                                        step(first_out) + (last_out > first_out ? "-" + std::to_string(last_out) : "");
  if (r.rows == S) {  // one row per step: steps at which a needle column was selected (read)
    std::int64_t selected = 0;
    for (std::int64_t rr = 1; rr < r.rows; ++rr) {
      bool any = false;
      for (std::int64_t c = 0; c < r.cols && !any; ++c)
        any = col[static_cast<std::size_t>(c)] &&
              r.cells[static_cast<std::size_t>(rr * r.cols + c)] == static_cast<float>(kCellSelected);
      selected += any;
    }
    if (selected > 0) what += ", selected at " + std::to_string(selected) + " of " + std::to_string(S - 1) + " steps";
  }
  h.title = "needle (hatched, tokens " + ranges + "): " + what + "; " + h.title;
}

viz::Figure head_figure(const std::string& title, const std::string& caption, const Timeline& t, const Selection& sel,
                        int width_px, const Needles& needles) {
  const std::int64_t layer = std::clamp<std::int64_t>(sel.layer, 0, t.n_layer - 1);
  const std::int64_t head = std::clamp<std::int64_t>(sel.head, 0, t.n_head_kv - 1);
  // The zoomed window of the position axes (linked with the other views), over every position the
  // record has (prompt and generated).
  const PositionWindow w = position_window(sel, t.n_positions);
  const TimelineRaster r =
      timeline_raster(t, layer, head, 1024, std::clamp(width_px, 64, 2048), true, w.lo, w.zoomed ? w.hi : -1);
  viz::Figure f;
  f.title = "Timeline of layer " + std::to_string(layer) + ", KV head " + std::to_string(head) + ": " + title;
  viz::Heatmap h;
  h.title = "kept, selected and evicted at each step (" +
            (w.zoomed ? "positions " + std::to_string(w.lo) + "-" + std::to_string(w.hi) + " of " : std::string()) +
            std::to_string(t.n_positions) + " positions x " + std::to_string(t.n_steps + 1) +
            " steps, step 0 = prefill)";
  h.rows = r.rows;
  h.cols = r.cols;
  h.values = r.cells;
  h.categories = timeline_categories();
  h.x_step = static_cast<double>(std::max<std::int64_t>(w.size(), 1)) / static_cast<double>(r.cols);
  h.x_origin = static_cast<double>(w.lo) + h.x_step / 2 - 0.5;
  h.y_step = static_cast<double>(t.n_steps + 1) / static_cast<double>(r.rows);
  h.y_origin = h.y_step / 2 - 0.5;
  h.x.label = "token position";
  h.y.label = "decode step";
  if (!needles.empty()) mark_needles(h, r, t, layer, head, w, needles);
  f.panels.push_back(std::move(h));

  viz::LinePlot counts;
  counts.title = "entries per step";
  std::vector<double> steps(r.live.size());
  for (std::size_t s = 0; s < steps.size(); ++s) steps[s] = static_cast<double>(s);
  counts.series.push_back({"live in the cache", steps, r.live, kKeptColor});
  bool any_selected = false;
  for (double v : r.selected) any_selected = any_selected || !std::isnan(v);
  if (any_selected) counts.series.push_back({"selected (read)", steps, r.selected, kSelectedColor});
  counts.x.label = "decode step";
  counts.y.label = "entries";
  f.panels.push_back(std::move(counts));
  bool any_recall = false;
  for (std::int64_t s = 1; s <= t.n_steps; ++s) any_recall = any_recall || !std::isnan(t.recall_at(s, layer, head));
  if (any_recall) {
    viz::LinePlot recall;
    recall.title = "recall of the exact top-k";
    std::vector<double> x, y;
    for (std::int64_t s = 1; s <= t.n_steps; ++s) {
      x.push_back(static_cast<double>(s));
      y.push_back(t.recall_at(s, layer, head));
    }
    recall.series.push_back({"this head", x, y, kSelectedColor});
    recall.x.label = "decode step";
    recall.y.label = "recall";
    recall.y.range = viz::Range{0, 1};
    f.panels.push_back(std::move(recall));
  }
  f.columns = 1;
  f.row_weights.assign(f.panels.size(), 1.0);
  f.row_weights[0] = 3.0;
  f.caption = caption;
  return f;
}

viz::Figure grid_figure(const std::string& title, const std::string& caption, const Timeline& t, int width_px) {
  const std::int64_t L = t.n_layer, H = t.n_head_kv;
  const std::int64_t cb = std::clamp<std::int64_t>(width_px / std::max<std::int64_t>(H, 1) - 1, 4, 128);
  const std::int64_t rb = std::clamp<std::int64_t>(720 / std::max<std::int64_t>(L, 1) - 1, 3, 64);
  viz::Heatmap h;
  h.title = "every layer x KV head: position across, decode step down (" + std::to_string(t.n_positions) +
            " positions x " + std::to_string(t.n_steps + 1) + " steps)";
  h.categories = timeline_categories();
  std::int64_t rbin = 0, cbin = 0;
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t k = 0; k < H; ++k) {
      const TimelineRaster r = timeline_raster(t, l, k, rb, cb, false);
      if (h.values.empty()) {
        rbin = r.rows;
        cbin = r.cols;
        h.rows = L * (rbin + 1) - 1;
        h.cols = H * (cbin + 1) - 1;
        h.values.assign(static_cast<std::size_t>(h.rows * h.cols), kNaN);
      }
      for (std::int64_t i = 0; i < r.rows; ++i)
        for (std::int64_t j = 0; j < r.cols; ++j)
          h.values[static_cast<std::size_t>((l * (rbin + 1) + i) * h.cols + k * (cbin + 1) + j)] =
              r.cells[static_cast<std::size_t>(i * r.cols + j)];
    }
  for (std::int64_t k = 0; k < H; ++k) {
    h.x.ticks.push_back(static_cast<double>(k * (cbin + 1)) + static_cast<double>(cbin - 1) / 2);
    h.x.tick_labels.push_back(std::to_string(k));
  }
  for (std::int64_t l = 0; l < L; ++l) {
    h.y.ticks.push_back(static_cast<double>(l * (rbin + 1)) + static_cast<double>(rbin - 1) / 2);
    h.y.tick_labels.push_back(std::to_string(l));
  }
  h.x.label = "KV head";
  h.y.label = "layer";
  h.x.grid = h.y.grid = false;
  viz::Figure f;
  f.title = "Timeline of every head: " + title;
  f.panels.push_back(std::move(h));
  f.caption = caption;
  return f;
}

// The figure of a timeline: the selected head's map (the run's needles hatched) or the grid.
viz::Figure figure_of(const Timeline& t, const std::string& title, const std::string& caption, const TimelineOptions& o,
                      const Selection& sel, int width_px, const Needles& needles) {
  if (t.n_layer < 1 || t.n_head_kv < 1) {
    viz::Figure f;
    f.title = "Timeline: " + title;
    viz::Heatmap h;
    h.title = "empty timeline";
    f.panels.push_back(std::move(h));
    return f;
  }
  return o.grid || sel.layer < 0 ? grid_figure(title, caption, t, width_px)
                                 : head_figure(title, caption, t, sel, width_px, needles);
}

}  // namespace

viz::Figure timeline_figure(const RunData& a, const TimelineOptions& o, const Selection& sel, int width_px) {
  if (!a.has_timeline)
    return no_timeline(a, "no timeline: record runs with --capture summary or full (the Run view's default)");
  const Timeline* t = a.timeline();
  if (!t) return no_timeline(a, "timeline not decoded (or unreadable)");
  return figure_of(*t, a.title(), a.caption(), o, sel, width_px, a.needles);
}

viz::Figure timeline_figure(const Timeline& t, const std::string& title, const std::string& caption,
                            const TimelineOptions& o, const Selection& sel, int width_px) {
  return figure_of(t, title, caption, o, sel, width_px, {});
}

TimelineRaster timeline_diff_raster(const Timeline& a, const Timeline& b, std::int64_t layer, std::int64_t head,
                                    std::int64_t max_rows, std::int64_t max_cols) {
  for (const Timeline* t : {&a, &b})
    if (layer < 0 || layer >= t->n_layer || head < 0 || head >= t->n_head_kv)
      throw std::out_of_range("timeline: no head " + std::to_string(layer) + ":" + std::to_string(head));
  TimelineRaster r;
  const std::int64_t steps = std::min(a.n_steps, b.n_steps), S = steps + 1;
  const std::int64_t N = std::max<std::int64_t>(std::min(a.n_positions, b.n_positions), 1);
  r.rows = std::clamp<std::int64_t>(max_rows, 1, S);
  r.cols = std::clamp<std::int64_t>(max_cols, 1, N);
  r.cells.assign(static_cast<std::size_t>(r.rows * r.cols), kNaN);
  auto row = [&](std::int64_t s) { return s * r.rows / S; };
  auto col = [&](std::int64_t p) { return p * r.cols / N; };
  // Live interval [in, last] of p in a record, clipped to the shared steps; empty when in > last.
  auto interval = [&](const Timeline& t, std::int64_t p) {
    const std::int64_t in = t.entered_at[static_cast<std::size_t>(p)];
    const std::int64_t out = t.evicted_at[static_cast<std::size_t>((layer * t.n_head_kv + head) * t.n_positions + p)];
    return std::pair<std::int64_t, std::int64_t>{in, std::min(steps, out < 0 ? steps : out - 1)};
  };
  auto mark_span = [&](std::int64_t c, std::int64_t s0, std::int64_t s1, TimelineDiffCell v) {
    for (std::int64_t rr = row(s0); s0 <= s1 && rr <= row(s1); ++rr) {
      float& cell = r.cells[static_cast<std::size_t>(rr * r.cols + c)];
      if (!(cell >= static_cast<float>(v))) cell = static_cast<float>(v);
    }
  };
  for (std::int64_t p = 0; p < std::min(a.n_positions, b.n_positions); ++p) {
    const auto [ia, la] = interval(a, p);
    const auto [ib, lb] = interval(b, p);
    const std::int64_t c = col(p), lo = std::max(ia, ib), hi = std::min(la, lb);
    mark_span(c, lo, hi, kDiffBoth);
    // A's interval outside B's: before lo and after hi (and the whole of it when they do not meet).
    if (lo > hi) {
      mark_span(c, ia, la, kDiffOnlyA);
      mark_span(c, ib, lb, kDiffOnlyB);
      continue;
    }
    mark_span(c, ia, lo - 1, ia < ib ? kDiffOnlyA : kDiffBoth);
    mark_span(c, ib, lo - 1, ib < ia ? kDiffOnlyB : kDiffBoth);
    mark_span(c, hi + 1, la, kDiffOnlyA);
    mark_span(c, hi + 1, lb, kDiffOnlyB);
  }
  return r;
}

viz::Figure timeline_diff_figure(const RunData& a, const RunData& b, const Selection& sel, int width_px) {
  viz::Figure f;
  f.title = "Timeline A \xe2\x88\x92 B: " + ab_title(a, b, 40);
  f.caption = "A: " + a.caption() + "  B: " + b.caption();
  viz::Heatmap h;
  const Timeline *ta = a.timeline(), *tb = b.timeline();
  if (!ta || !tb || a.record.info.prompt.tokens != b.record.info.prompt.tokens) {
    h.title = !ta || !tb ? "both runs need a timeline (record them with capture summary or full)"
                         : kept_diff_unavailable(a, b);
    f.panels.push_back(std::move(h));
    return f;
  }
  const std::int64_t layer = std::clamp<std::int64_t>(sel.layer, 0, ta->n_layer - 1);
  const std::int64_t head = std::clamp<std::int64_t>(sel.head, 0, ta->n_head_kv - 1);
  if (layer >= tb->n_layer || head >= tb->n_head_kv) {
    h.title = "B has no head " + std::to_string(layer) + ":" + std::to_string(head);
    f.panels.push_back(std::move(h));
    return f;
  }
  const TimelineRaster r = timeline_diff_raster(*ta, *tb, layer, head, 1024, std::clamp(width_px, 64, 2048));
  const std::int64_t N = std::max<std::int64_t>(std::min(ta->n_positions, tb->n_positions), 1);
  const std::int64_t S = std::min(ta->n_steps, tb->n_steps) + 1;
  h.title = "layer " + std::to_string(layer) + ", KV head " + std::to_string(head) +
            ": in the cache of both / only B / only A";
  h.rows = r.rows;
  h.cols = r.cols;
  h.values = r.cells;
  h.categories = {{"both", kBothColor}, {"only B", kOnlyBColor}, {"only A", kOnlyAColor}};
  h.x_step = static_cast<double>(N) / static_cast<double>(r.cols);
  h.x_origin = h.x_step / 2 - 0.5;
  h.y_step = static_cast<double>(S) / static_cast<double>(r.rows);
  h.y_origin = h.y_step / 2 - 0.5;
  h.x.label = "token position";
  h.y.label = "decode step";
  f.panels.push_back(std::move(h));
  return f;
}

}  // namespace kvscope::figures
