#pragma once
// The views of the main window: one table (view_table.cpp), one entry per view, in tab order.
// The tab bar, the View menu, `--view NAME`, the saved view state and the export dialog all read
// it. Adding a view: one entry here plus its draw function (panels/, declared in panels.h) and,
// for a view with options or a figure, its state in AppState (app_state.h).
#include <span>
#include <string>
#include <string_view>

#include "view_types.h"

namespace kvscope::gui {

struct AppState;
struct Ui;
class FigureView;

struct ViewEntry {
  std::string_view name;             ///< `--view NAME`, the saved view state, export file names
  const char* title;                 ///< tab title and View menu item
  void (*draw)(AppState&, Ui&);      ///< draws the view into the current window (the tab's child)
  FigureView* (*figure)(AppState&);  ///< the figure the view draws (the export dialog writes it), or null
  constexpr View view() const { return View(name); }
};

/// Every view, in tab order.
std::span<const ViewEntry> view_table();
/// The table's entry of `v`, or nullptr.
const ViewEntry* view_entry(View v);
/// The view names in tab order, joined by `sep` ("sessions, run, heads, ...").
std::string view_names(std::string_view sep = ", ");

/// Draws view `v`, filling the current window (screenshot / test helpers use draw_app).
void draw_view(AppState& s, Ui& ui, View v);
/// The figure view of `v` (nullptr for views without a figure).
FigureView* figure_of(AppState& s, View v);

}  // namespace kvscope::gui
