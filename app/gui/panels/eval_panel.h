#pragma once
// The Eval view (eval_panel.cpp): task accuracy of the `kvscope-cli eval` runs of a database. A
// table of mean scores, conditions (pipeline @ budget, the full cache) x tasks; under it the
// accuracy-vs-budget figure (or the per-task bars, or the needle depth x length maps: the figure
// table's "accuracy", "eval-tasks" and "eval-depth"); the samples of the selected condition, wrong
// answers first, a click opening the sample's run as run A; and that run's share of needle tokens
// kept per layer x KV head, beside the same sample's full-cache attention to the needle (the
// question + answer steps', blob "needle_attention"). The points are read off the UI thread
// (figures::eval_points).
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "eval_figures.h"
#include "imgui_canvas.h"

namespace kvscope::gui {

struct AppState;
struct Ui;

/// The Eval view's state (AppState::eval).
struct EvalState {
  std::string db;        ///< the database shown: run A's, else the first open one, unless picked
  std::string picked;    ///< a database picked in the view's combo ("" = follow run A)
  std::string read_key;  ///< db + its run list when `points` were read (a new key reads again)
  std::future<std::vector<figures::EvalPoint>> reading;  ///< the read in progress
  std::string reading_key;                 ///< the read_key it is for (a result of another database is dropped)
  std::vector<figures::EvalPoint> points;  ///< with details (outputs, needle maps)
  figures::EvalSummary summary;
  std::string error;             ///< reading failed
  std::string condition;         ///< label of the selected condition ("" = the first)
  std::int64_t sample_run = -1;  ///< the sample whose needle map is shown (-1: run A if an eval run)
  float table_h = 0;             ///< the conditions table's rows as last drawn (px; 0: not yet)
  float samples_h = 0;           ///< the sample list's rows as last drawn, for `samples_of`
  std::string samples_of;        ///< the condition the sample list was drawn for
  int figure = 0;                ///< 0 accuracy vs budget, 1 per task, 2 needle depth x length
  FigureView fig;                ///< the figure under the table (what export writes)
  FigureView needle;             ///< the sample's needle_kept map (+ its full cache's needle_attention map)
  /// The full-cache run whose needle_attention map is drawn beside the sample's (-1: none).
  std::int64_t needle_full_run = -1;
  /// The note shown instead when the evaluation has no full-cache run ("" when none is shown).
  std::string needle_note;
};

namespace panels {
void eval(AppState& s, Ui& ui);
}  // namespace panels

}  // namespace kvscope::gui
