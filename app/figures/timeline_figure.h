#pragma once
// The Timeline figure (GUI view "Timeline", kvscope-cli export --figure timeline): the run's cache
// decisions over time (kvscope/core/timeline.h) as token position x decode step maps, coloured kept
// / selected at this step / evicted at this step, reduced to at most a few thousand cells a side
// (a pixel shows the highest-priority state it holds: evicted > selected > kept), whatever the
// run's length: 32K positions x 2,000 steps is a 2048 x 1024 map.
#include <cstdint>
#include <string>
#include <vector>

#include "figure_options.h"
#include "kvscope/core/timeline.h"
#include "kvscope/viz/figure.h"
#include "run_data.h"

namespace kvscope::figures {

/// Cell values of a timeline map (viz categorical heatmap indices); NaN = not in the cache.
enum TimelineCell : int { kCellKept = 0, kCellSelected = 1, kCellEvicted = 2 };
/// Their categories, in index order.
std::vector<viz::TokenCategory> timeline_categories();

/// One head's map: rows = steps 0 .. n_steps in `rows` equal bins, cols = positions 0 .. n_positions
/// - 1 in `cols` equal bins (step s is row s * rows / (n_steps + 1), position p column
/// p * cols / n_positions).
struct TimelineRaster {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> cells;  ///< [rows, cols] TimelineCell or NaN
  /// Live and selected entries per step (n_steps + 1 values; selected NaN where nothing was recorded).
  std::vector<double> live, selected;
};
/// The map of (layer, head) with at most max_rows x max_cols cells. `exact` expands every selected
/// position (a page's positions one by one); otherwise a selected page marks the columns from its
/// first to its last live position (what the layer x head grid uses). Throws std::out_of_range
/// outside the record.
/// [pos_lo, pos_hi] (inclusive; pos_hi < 0: every position) limits the columns to those positions
/// (the zoomed window of Selection): column c then covers positions from pos_lo on.
TimelineRaster timeline_raster(const Timeline& t, std::int64_t layer, std::int64_t head, std::int64_t max_rows,
                               std::int64_t max_cols, bool exact = true, std::int64_t pos_lo = 0,
                               std::int64_t pos_hi = -1);

/// Options of the Timeline view.
struct TimelineOptions {
  bool grid = false;     ///< every layer x KV head as a small map, instead of the selected head
  Side side = Side::kA;  ///< with a compare run: A, B, or where their caches differ (A - B)
};

/// Cells of an A - B map: in both caches, only in B's, only in A's (NaN: in neither).
enum TimelineDiffCell : int { kDiffBoth = 0, kDiffOnlyB = 1, kDiffOnlyA = 2 };
/// A - B of one head: whether each position is in A's and B's cache at each step, over the steps
/// and positions both runs have, reduced like timeline_raster (a pixel shows only-A over only-B
/// over both). Throws std::out_of_range for a head outside either record.
TimelineRaster timeline_diff_raster(const Timeline& a, const Timeline& b, std::int64_t layer, std::int64_t head,
                                    std::int64_t max_rows, std::int64_t max_cols);
/// The A - B map of the selected head (runs on one prompt), or a figure whose title says why not.
viz::Figure timeline_diff_figure(const RunData& a, const RunData& b, const Selection& sel, int width_px);

/// The selected head's map with its live / selected entries and recall per step, or (o.grid or
/// sel.layer < 0) the layer x KV head grid of small maps. Needs Part::kTimeline decoded; panel
/// titles say when the run has none. width_px: the map's column budget.
viz::Figure timeline_figure(const RunData& a, const TimelineOptions& o, const Selection& sel, int width_px);
/// The same from a Timeline alone (a run in progress), with the given title and caption.
viz::Figure timeline_figure(const Timeline& t, const std::string& title, const std::string& caption,
                            const TimelineOptions& o, const Selection& sel, int width_px);

}  // namespace kvscope::figures
