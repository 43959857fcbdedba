#pragma once
// The Selection view's step figure: what one KV head's decode-time selection (HSA, Quest, SparQ,
// Exact-TopK) read at one decode step against the exact top-k it is measured against (Timeline::
// exact, capture full; RocketKV's Exact-TopK oracle, §A.3 / Fig. 2, docs/methods.md §7.10), as a
// strip over the head's live entries in position order, and the head's recall of that top-k over
// the decode steps. Entries of a strip wider than its pixels are reduced per pixel to the
// highest-priority state among them (missed > hit > selected > live), as the Timeline map does.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kvscope/core/timeline.h"
#include "kvscope/viz/figure.h"

namespace kvscope::figures {

/// State of one live entry at one step (strip cell values, in priority order).
enum SelectionStepCell : std::uint8_t {
  kStepLive = 0,      ///< live, not selected (and not in the exact top-k)
  kStepSelected = 1,  ///< selected, not in the exact top-k (or no exact top-k recorded)
  kStepHit = 2,       ///< selected and in the exact top-k
  kStepMissed = 3,    ///< in the exact top-k, not selected
};
/// The strip's categories, in index order (all four, or live / selected when no exact top-k).
std::vector<viz::TokenCategory> selection_step_categories(bool with_exact);
/// "live, not selected", "selected only", "hit", "missed".
const char* selection_step_label(SelectionStepCell c);

/// One (layer, KV head, decode step) of a timeline, classified entry by entry. O(n_positions) to
/// build (live_positions() plus the bitmaps).
struct SelectionStep {
  std::int64_t layer = 0, head = 0, step = 0;
  std::vector<std::int64_t> live;  ///< live positions at the step, ascending: index = rank
  std::vector<std::uint8_t> cell;  ///< per rank: SelectionStepCell
  bool selected = false;           ///< the step has a selection record
  bool per_token = false;          ///< ... at token granularity (else pages of Timeline::page ranks)
  bool exact = false;              ///< the exact top-k is recorded
  std::int64_t n_selected = 0, n_exact = 0, n_hit = 0;
  float recall = std::numeric_limits<float>::quiet_NaN();  ///< Timeline::recall_at (NaN: none)
};
/// Classifies every live entry of (layer, head) at `step` (0 .. n_steps; step 0, the prefill,
/// selects nothing). Throws std::out_of_range outside the record.
SelectionStep selection_step(const Timeline& t, std::int64_t layer, std::int64_t head, std::int64_t step);

/// Strip columns for `n_live` entries in at most `max_cols` (>= 1): entry rank r is in column
/// r * cols / n_live; column c holds ranks [first_rank(c), first_rank(c + 1)).
struct StripBins {
  std::int64_t n = 0, cols = 0;
  std::int64_t col(std::int64_t rank) const { return cols ? rank * cols / n : 0; }
  std::int64_t first_rank(std::int64_t c) const { return cols ? (c * n + cols - 1) / cols : 0; }
};
StripBins strip_bins(std::int64_t n_live, std::int64_t max_cols);

/// The figure: panel 0 the strip of `st` (one row; `width_px` caps its columns), panel 1 the recall
/// of (st.layer, st.head) per decode step with its mean over the steps and the step marked (a note
/// when the run recorded none). `title`: a short name of the run ("run #3"); `caption`: the run's.
viz::Figure selection_steps_figure(const Timeline& t, const SelectionStep& st, const std::string& title,
                                   const std::string& caption, int width_px);

}  // namespace kvscope::figures
