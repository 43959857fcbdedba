#pragma once
// `kvscope-cli export`: a figure of a recorded run by name, built by the same builders the GUI views
// draw (figures.h) through the figure table (figure_table.h), after decoding the parts of the run
// it needs (inline, on the calling thread).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvscope/sessions/session_store.h"
#include "kvscope/viz/figure.h"
#include "run_data.h"

namespace kvscope::figures {

/// Figure names of `kvscope-cli export --figure`: the figure table's entries the CLI offers, in
/// table order (figure_table.cpp; heads, tokens, mass, ..., head-pattern).
const std::vector<std::string>& figure_names();

/// What a figure is drawn for.
struct FigureRequest {
  std::string name;                      ///< one of figure_names()
  std::int64_t layer = -1, head = -1;    ///< per-layer / per-head figures (-1: 0); timeline: -1 = every head
  std::string metric = "tokens95_frac";  ///< "heads": a heads_metric_names() entry; "grid": a run metric
  std::function<std::string(std::int32_t)> token_text;  ///< display text of a token id (may be empty: "#id")
  int width = 0;  ///< px, for figures reduced to their width (0: the default width)
};

/// Builds figure `req.name` of run `run` (for "grid": of every complete run in `store`) through its
/// figure table entry: decodes the parts of the layer the entry needs and uses, then calls its
/// builder. Throws std::invalid_argument naming what is missing (an unknown figure, listing the
/// known names; a figure that needs --capture full; an unknown metric; head-pattern of a run
/// without a heads stage), std::out_of_range for a layer or head outside the run,
/// sessions::SessionError, InputError for an unreadable pattern file.
viz::Figure build_figure(const sessions::SessionStore& store, std::int64_t run, const FigureRequest& req);

/// Ada-KV Fig. 1 style: per KV head of `layer`, cumulative attention mass against the fraction of
/// the cache kept (top entries by attention). Needs Part::kAttention of the layer decoded.
viz::Figure mass_figure(const RunData& run, std::int64_t layer);
/// RocketKV Fig. 2b style: ECDF over query heads of the distinct positions Exact-TopK picked over
/// all decode steps ("topk_unique").
viz::Figure topk_cdf_figure(const RunData& run);
/// A sweep's prompt length x budget grid of run metric `metric` (mean over pipelines), over every
/// complete run of `store`. Throws std::invalid_argument when no run has the metric.
viz::Figure grid_figure(const sessions::SessionStore& store, const std::string& metric);

}  // namespace kvscope::figures
