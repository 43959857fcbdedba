#pragma once
// One function per view; each draws into the current ImGui window (the tab's child region) from
// AppState and the services in Ui. Implementations: one file per panel in this folder.
#include "../app_state.h"

namespace kvscope::gui::panels {

void sessions(AppState& s, Ui& ui);
void run(AppState& s, Ui& ui);
void heads(AppState& s, Ui& ui);
void tokens(AppState& s, Ui& ui);
void attention(AppState& s, Ui& ui);
void keys(AppState& s, Ui& ui);
void channels(AppState& s, Ui& ui);
void budgets(AppState& s, Ui& ui);
void fidelity(AppState& s, Ui& ui);
void timeline(AppState& s, Ui& ui);
void selection(AppState& s, Ui& ui);
void compare(AppState& s, Ui& ui);
/// The Selection view's step section (selection_steps.cpp): for the selected head of run A with a
/// timeline, a step control (shared with the Timeline view) and what the head selected at that step
/// against the exact top-k, in `height` px. Draws nothing (returns false) for a run without a
/// timeline.
bool selection_steps(AppState& s, Ui& ui, float height);
/// The export dialog (a popup; opened by s.exporting.open).
void export_dialog(AppState& s, Ui& ui);

// ---- multi-turn runs (turns.cpp) -----------------------------------------------------------------

/// The turns of run `a` (positions and steps, from its timeline once decoded), cached in
/// s.timeline (a new run resets the chosen turn to all turns). Empty for a single-turn run.
const std::vector<figures::TurnSpan>& turn_spans_of(AppState& s, const RunData& a);
/// Chooses turn `turn` of run `a` (-1: all turns): the linked position window becomes the turn's
/// block and outputs (all turns: every position), and the shared step (Timeline / Selection) the
/// step its block entered at (the first turn: its first decode step).
void select_turn(AppState& s, const RunData& a, int turn);
/// The turn selector of a multi-turn run ("all turns", "turn 1", ...) and a table of every turn's
/// positions, steps, input and output text (rows select too). Draws nothing for a single-turn run.
void turn_selector(AppState& s, const RunData& a);
/// Marks the turns on the step axes of `fig` (the Timeline figure's map and per-step plots): a line
/// where each later turn's prefill step begins, and the chosen turn's steps shaded.
void mark_turn_steps(const AppState& s, const FigureView& fig);

// ---- helpers shared by the panels (common.cpp) ---------------------------------------------------

/// "Open a run in the Sessions view" placeholder; true when there is no run A.
bool no_run(const AppState& s);
/// Compare side selector (A / B / A - B) shown when a B run exists; true when changed.
bool side_selector(const AppState& s, Side& side);
/// Outlines heatmap cell (row, col) of panel `panel` of `fig` (selection marker).
void outline_cell(const FigureView& fig, int panel, std::int64_t row, std::int64_t col, ImU32 color);
/// Identity of a run for figure cache keys.
std::string run_key(const RunData* r);
/// Handles hover/click on a layers x KV heads heatmap (panel `panel`, or any heatmap panel when -1):
/// tooltip from `tooltip`, click selects.
void heads_map_interaction(AppState& s, const FigureView& fig, int panel,
                           const std::function<std::string(std::int64_t layer, std::int64_t head)>& tooltip);
/// Asks s.loader for `parts` of `layer` of each run in `runs` (null entries skipped; the first part
/// of the first run is decoded first). True when all are ready (decoded or not stored); otherwise
/// draws a "decoding ..." placeholder of `size` in place of the figure and returns false.
bool await_parts(AppState& s, std::initializer_list<const std::shared_ptr<const RunData>*> runs,
                 std::initializer_list<Part> parts, std::int64_t layer, ImVec2 size);
/// The run a per-run view shows for `side`: B for Side::kB when there is a B, else A.
const std::shared_ptr<const RunData>& shown_run(const AppState& s, Side side);
/// Size left in the current window for a figure, leaving `below` px.
ImVec2 figure_size(float below = 0);

// ---- position axes: zoom, pan, brush (position_zoom.cpp) -----------------------------------------

/// Zoom and pan of the prompt-position window every position axis shows (sel.pos_lo / pos_hi,
/// shared by the views), over any panel of `fig` whose x axis is prompt positions: the wheel zooms
/// around the mouse, a drag pans, a shift-drag brushes a range to show, a double-click shows the
/// whole prompt. Call right after fig.draw(). Returns true when the window changed.
bool position_zoom(Selection& sel, std::int64_t n_tok, const FigureView& fig, PositionDrag& drag);
/// A range slider of the shown positions and a "whole prompt" button, on the current line.
void position_range_control(Selection& sel, std::int64_t n_tok);
/// The tooltip lines of prompt position `pos` of (layer, head) under the run's decisive score:
/// "snapkv score 0.0123   rank 17 of 514" and "kept: ranks 1-99 kept (32 always kept); cutoff score
/// 0.0091", or "always kept (observation window, positions 482-513)"; nothing without a score. O(n_tok)
/// per call (figures::rank_position), no cache.
void score_tooltip_lines(const RunData& r, std::int64_t layer, std::int64_t head, std::int64_t pos);

}  // namespace kvscope::gui::panels
