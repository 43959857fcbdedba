#pragma once
// Scoring a model's output against reference answers (issue 32): RULER's metrics, as defined in
// NVIDIA/RULER scripts/eval/synthetic/constants.py, with its prediction post-processing
// (scripts/eval/evaluate.py). Torch-free (kvscope_spec). docs/eval.md lists the metrics.
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

/// Python's str.lower() restricted to ASCII and Latin-1: A-Z and U+00C0..U+00DE (except U+00D7 ×)
/// become lower case; every other byte is kept, so characters beyond Latin-1 (Greek, Cyrillic,
/// U+0130 ...), which Python would also lower, compare as written. UTF-8 in, UTF-8 out.
std::string lower_latin1(std::string_view text);

/// RULER's postprocess_pred (scripts/eval/evaluate.py): strip() (Python's whitespace: ASCII
/// \t\n\v\f\r, U+001C..U+001F, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
/// U+202F, U+205F, U+3000), then every byte 0x00..0x1F becomes '\n', then strip() again.
/// (kvpress's calculate_metrics.py deletes those bytes instead; this follows RULER.)
std::string ruler_postprocess(std::string_view prediction);

/// RULER's string_match_all for one sample: the fraction of `references` r with
/// lower(r) a substring of lower(prediction), in [0, 1] (RULER reports the mean over samples x 100,
/// rounded to 2 decimals). No post-processing here (score() does it). Throws InputError when
/// `references` is empty (RULER would divide by zero).
double string_match_all(std::string_view prediction, const std::vector<std::string>& references);

/// RULER's string_match_part for one sample (its QA tasks): 1 if any reference is a
/// case-insensitive substring of the prediction, else 0. Throws InputError when `references` is
/// empty.
double string_match_part(std::string_view prediction, const std::vector<std::string>& references);

/// The metric names score() knows: "string_match_all", "string_match_part".
const std::vector<std::string>& eval_metric_names();

/// Whether `name` is one of eval_metric_names().
bool is_eval_metric(std::string_view name);

/// The metric RULER and kvpress use for a task: "string_match_part" when the task's name up to
/// its first '_' is "qa" (qa_1, qa_2), else "string_match_all".
std::string default_metric(std::string_view task);

/// The score in [0, 1] of one output: ruler_postprocess(prediction), then the metric `metric`
/// against `answers`, as RULER's evaluate.py scores a prediction. Throws InputError for an
/// unknown metric (naming it and the known ones) or empty `answers`.
double score(std::string_view metric, std::string_view prediction, const std::vector<std::string>& answers);

}  // namespace kvscope
