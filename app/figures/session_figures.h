#pragma once
// Figures of a recorded session, built from the session database into the viz figure model:
// shared by `kvscope-cli export` and the GUI, so what the GUI shows is what export writes.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvscope/sessions/session_store.h"
#include "kvscope/viz/figure.h"

namespace kvscope::figures {

/// Figure names of `kvscope-cli export --figure`.
const std::vector<std::string>& figure_names();

/// What a figure is drawn for.
struct FigureRequest {
  std::string name;                                  ///< one of figure_names()
  int64_t layer = 0, head = 0;                       ///< for per-head figures (tokens, keys)
  std::string metric = "tokens95_frac";              ///< for "heads" (a head_summary column) and "grid"
  std::function<std::string(int32_t)> token_text;    ///< display text of a token id (may be empty)
};

/// Builds figure `req.name` of run `run` (for "grid": of every complete run in `store`).
/// Throws std::invalid_argument naming what is missing (e.g. a figure that needs --capture full).
viz::Figure build_figure(const sessions::SessionStore& store, int64_t run, const FigureRequest& req);

}  // namespace kvscope::figures
