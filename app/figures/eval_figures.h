#pragma once
// Task accuracy of `kvscope-cli eval` runs (docs/eval.md), read back from a session database: one
// point per complete evaluation run (sweep key "eval1|..."), the mean score per condition
// (pipeline @ budget, the full cache) and task, and the figures the papers draw of them: accuracy
// against budget, per-task bars and the needle-in-a-haystack depth x length map. The figure table
// offers them as "accuracy", "eval-tasks" and "eval-depth" (database scope); the GUI's Eval view
// draws the same builders.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/sessions/session_store.h"
#include "kvscope/viz/figure.h"

namespace kvscope::figures {

/// One evaluation run: a sample under a pipeline and budget, and its score.
struct EvalPoint {
  std::int64_t run = -1;
  std::string pipeline;     ///< RunRow::pipeline_spec: the canonical SPEC; "" = the full cache
  bool has_budget = false;  ///< false for the full cache and for pipelines that take no budget
  sessions::BudgetInfo budget;
  std::string model;  ///< RunRow::model_path
  std::string mode;   ///< "question-agnostic" | "question-aware" (eval_sample's "mode")
  std::string sample, task;
  std::int64_t length = 0;    ///< the sample's "length" (0: unknown)
  std::int64_t n_prompt = 0;  ///< prompt tokens (summary "n_prompt")
  double score = 0;           ///< summary "eval_score", in [0, 1]
  /// First needle token / question_start * 100: how deep in the context the needle sits; NaN when
  /// the sample has no needle (or no question_start).
  double depth = NAN;
  double needle_kept = NAN;  ///< mean over layers x KV heads of "needle_kept"; NaN without it
  /// The sweep key less its mode, pipeline and budget fields ("eval1|model|data|dtype|sample"): the
  /// runs of one sample of one evaluation (full_cache_point).
  std::string sample_key;
  // Filled by eval_points(store, true) only (the GUI's sample list):
  std::string output;                  ///< the model's answer (RunOutputs::text)
  std::vector<std::string> answers;    ///< the references
  std::int64_t kept_layers = 0;        ///< "needle_kept" shape [kept_layers, kept_heads]
  std::int64_t kept_heads = 0;         ///<
  std::vector<float> needle_kept_map;  ///< row-major [kept_layers * kept_heads]; empty without
  /// The full cache's "needle_attention" (eval_run.h needle_attention_share: per layer x KV head the
  /// mean over the question + answer steps of the attention mass on the needle tokens), shape
  /// [attention_layers, attention_heads]; read for full-cache runs only, empty without.
  std::int64_t attention_layers = 0;
  std::int64_t attention_heads = 0;
  std::vector<float> needle_attention_map;
};

/// Every complete evaluation run of `store` (sweep key "eval1|...", summary "eval_score"), oldest
/// first. With `details`, also each run's output text, references and per-head needle_kept map.
/// Runs whose "eval_sample" blob is missing or not JSON keep their task, length and depth unknown.
std::vector<EvalPoint> eval_points(const sessions::SessionStore& store, bool details = false);

/// One condition of an evaluation: a pipeline under one budget, or the full cache, of one model and
/// question mode, with its mean score over all its samples and per task.
struct EvalCondition {
  std::string pipeline;  ///< "" = the full cache
  bool has_budget = false;
  sessions::BudgetInfo budget;
  std::string model, mode;
  std::string label;                 ///< "full cache" or "<short pipeline> @ ratio 0.5" (+ model / mode when mixed)
  std::string pipeline_label;        ///< the series name: "full cache" or the short pipeline (+ model / mode)
  int color = -1;                    ///< viz::categorical index of its pipeline; -1 for the full cache
  double mean = NAN;                 ///< over every sample
  std::vector<double> task_mean;     ///< per EvalSummary::tasks entry; NaN where it has no sample
  std::vector<std::int64_t> task_n;  ///< samples per task
  std::vector<std::size_t> points;   ///< indices into the points given
};

/// The conditions x tasks table of mean scores.
struct EvalSummary {
  std::vector<std::string> tasks;  ///< sorted ("" when the samples name none)
  /// The full cache first (one per model / mode), then pipelines in order of first appearance,
  /// each by unit and ascending budget.
  std::vector<EvalCondition> conditions;
};
EvalSummary eval_summary(const std::vector<EvalPoint>& points);

/// A short name of pipeline SPEC `spec` among the pipelines of `points`: its policy names ("snapkv",
/// the default budget stage "uniform" dropped) plus the parameters that tell it apart from other
/// pipelines of the same policies ("snapkv window=32"); "full cache" for "".
std::string eval_pipeline_label(const std::vector<EvalPoint>& points, const std::string& spec);

/// The papers' main plot: mean score against budget, one line with markers per pipeline, the full
/// cache a horizontal reference line (a pipeline without a budget: a dotted one). One panel per
/// budget unit (x labelled with its meaning: compression ratio = "fraction of context evicted").
/// Throws std::invalid_argument "no evaluation runs in DB (record them with kvscope-cli eval --db)"
/// for no points (`db` = the database named in it).
viz::Figure accuracy_figure(const std::vector<EvalPoint>& points, const std::string& db = "the database");
/// Per-task grouped bars: categories the tasks, one series per condition (full cache first).
viz::Figure eval_tasks_figure(const std::vector<EvalPoint>& points, const std::string& db = "the database");
/// Per condition a heatmap of the mean score over needle depth (10% bins, 0% on top) x the
/// sample's length, as the needle-in-a-haystack papers draw it; samples without a needle are left
/// out (a panel note says when no sample has one).
viz::Figure eval_depth_figure(const std::vector<EvalPoint>& points, const std::string& db = "the database");

/// The full-cache run of `p`'s sample in the same evaluation (same sample_key: model, data, dtype
/// and sample; one of `p`'s question mode first, though the full cache is the same in either), or
/// null when the evaluation has none. `p` itself when it is the full cache.
const EvalPoint* full_cache_point(const std::vector<EvalPoint>& points, const EvalPoint& p);

/// One evaluation run's "needle_kept" (eval_points with details) as a layers x KV heads map of the
/// share of needle tokens each head kept (panel "needle kept (this run)"); a note panel when the run
/// has none. With `full` (full_cache_point), beside it on the same colour scale [0, 1] the full
/// cache's "needle_attention" map of the same sample (panel "full cache: attention to needle
/// (question + answer)"), or a note when that run recorded none. `condition`: the pipeline @ budget
/// named in the caption.
viz::Figure needle_kept_figure(const EvalPoint& p, const std::string& condition, const EvalPoint* full = nullptr);

/// The note the Eval view shows beside a needle map when the evaluation has no full-cache run.
std::string no_full_cache_note();

/// Depth bin (0..9) of a depth in percent; -1 for NaN.
int eval_depth_bin(double depth);

/// The error thrown for a database without evaluation runs.
std::string no_eval_runs_message(const std::string& db);

}  // namespace kvscope::figures
