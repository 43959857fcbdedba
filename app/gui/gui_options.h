#pragma once
// Command line of the desktop app:
//   kvscope [--open DB]... [--run ID[,ID...]] [--view NAME] [--model PATH]
//           [--screenshot FILE.png [--frames N] [--size WxH]]
// --run: run ids of the first database: the first is A, the others are compare runs (default: the
// newest run). --view: a view name of view_table.cpp (sessions, run, heads, tokens, attention, keys,
// channels, budgets, fidelity, selection, compare). --screenshot renders N frames (default 5) headless at WxH (default
// 1600x1000) and writes the last one as PNG.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "view_types.h"

namespace kvscope::gui {

struct GuiOptions {
  std::vector<std::string> open;
  std::vector<std::int64_t> runs;
  std::optional<View> view;
  std::string model;       ///< default model of the Run window
  std::string screenshot;  ///< PNG path ("" = interactive)
  int frames = 5;
  int width = 1600, height = 1000;
  /// Selection to start with (-1: keep the default / view state).
  std::int64_t layer = -1, head = -1, token = -1;
  bool help = false;
};

/// Parses argv. Throws std::invalid_argument with a one-line message naming the bad option.
GuiOptions parse_gui_options(const std::vector<std::string>& args);
/// The --help text.
std::string gui_usage();

}  // namespace kvscope::gui
