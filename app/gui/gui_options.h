#pragma once
// Command line of the desktop app:
//   kvscope [--open DB]... [--run ID[,ID...]] [--view NAME] [--model PATH]
//           [--start-run REQUEST.json] [--screenshot FILE.png [--frames N] [--size WxH]
//           [--screenshot-at-step N]]
// --run: run ids of the first database: the first is A, the others are compare runs (default: the
// newest run). --view: a view name of view_table.cpp (sessions, run, heads, tokens, attention, keys,
// channels, budgets, fidelity, selection, compare). --screenshot renders N frames (default 5) headless at WxH (default
// 1600x1000) and writes the last one as PNG. --start-run starts a run at launch from a JSON file of
// the Run view's fields (read_run_request); with --screenshot the shot waits for that run: taken
// once its live snapshot reaches decode step N (--screenshot-at-step), else when it ends.
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
  std::int64_t pos_lo = 0, pos_hi = -1;  ///< --positions: the zoomed position window (hi < 0: none)
  int tokens_coloring = -1;              ///< --tokens-coloring: TokenColoring index (-1: default)
  int turn = 0;                          ///< --turn: the turn of a multi-turn run to show (1-based; 0: all)
  std::string start_run;                 ///< JSON file of a RunRequest to start at launch ("" = none)
  std::int64_t screenshot_at_step = -1;  ///< with start_run: shoot once the run reaches this step
  bool help = false;
};

/// Parses argv. Throws std::invalid_argument with a one-line message naming the bad option.
GuiOptions parse_gui_options(const std::vector<std::string>& args);
/// The --help text.
std::string gui_usage();

struct RunRequest;
/// Fills `req` from the JSON object in `path`: any of model_path (or random_init: a config.json), tokenizer_path,
/// prompt (text) or prompt_file, turns (later user turns: a list of texts), bos, pipeline_spec,
/// budget_unit, budget_value, device, dtype, max_new_tokens, allow_beyond_context, reference_full,
/// capture, capture_window, db_path, name; others keep their value. Throws std::invalid_argument
/// naming the file and the key for an unknown key, a value of the wrong type, or a file that is not
/// a JSON object.
void read_run_request(const std::string& path, RunRequest& req);

}  // namespace kvscope::gui
