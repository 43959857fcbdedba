#pragma once
// Scoring a model's output against reference answers (issue 32): RULER's metrics, as defined in
// NVIDIA/RULER scripts/eval/synthetic/constants.py, with its prediction post-processing
// (scripts/eval/evaluate.py), and LongBench's (longbench_metrics.h), one table of names.
// Torch-free (kvscope_spec). docs/eval.md lists the metrics.
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

struct EvalSample;  // eval_sample.h

/// Python's str.lower() restricted to ASCII and Latin-1: A-Z and U+00C0..U+00DE (except U+00D7 ×)
/// become lower case; every other byte is kept, so characters beyond Latin-1 (Greek, Cyrillic,
/// U+0130 ...), which Python would also lower, compare as written. UTF-8 in, UTF-8 out.
std::string lower_latin1(std::string_view text);

/// RULER's postprocess_pred (scripts/eval/evaluate.py): strip() (Python's whitespace: ASCII
/// \t\n\v\f\r, U+001C..U+001F, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
/// U+202F, U+205F, U+3000), then every byte 0x00..0x1F becomes '\n', then strip() again.
/// (kvpress's calculate_metrics.py deletes those bytes instead; this follows RULER.)
std::string ruler_postprocess(std::string_view prediction);

/// Python's str.split() with no argument: the runs of `text` between Python whitespace (the
/// characters ruler_postprocess strips), none empty; views into `text`.
std::vector<std::string_view> python_split(std::string_view text);

/// RULER's string_match_all for one sample: the fraction of `references` r with
/// lower(r) a substring of lower(prediction), in [0, 1] (RULER reports the mean over samples x 100,
/// rounded to 2 decimals). No post-processing here (score() does it). Throws InputError when
/// `references` is empty (RULER would divide by zero).
double string_match_all(std::string_view prediction, const std::vector<std::string>& references);

/// RULER's string_match_part for one sample (its QA tasks): 1 if any reference is a
/// case-insensitive substring of the prediction, else 0. Throws InputError when `references` is
/// empty.
double string_match_part(std::string_view prediction, const std::vector<std::string>& references);

/// The metric names score() knows, in this order: RULER's "string_match_all", "string_match_part";
/// LongBench's (longbench_metrics.h, its dataset2metric names) "qa_f1_score", "rouge_score",
/// "classification_score", "retrieval_score", "retrieval_zh_score", "count_score",
/// "code_sim_score".
const std::vector<std::string>& eval_metric_names();

/// Whether `name` is one of eval_metric_names().
bool is_eval_metric(std::string_view name);

/// Why `metric` cannot score an output against `answers` and `all_classes`, or "" when it can:
/// "unknown metric 'x' (known: ...)", no answers, classification_score without all_classes, a
/// retrieval_score (retrieval_zh_score) answer without "Paragraph <n>" ("段落<n>").
std::string metric_input_problem(std::string_view metric, const std::vector<std::string>& answers,
                                 const std::vector<std::string>& all_classes);

/// The metric a task is scored by. LongBench's datasets (and their LongBench-E "<name>_e") get
/// LongBench's dataset2metric entry (narrativeqa, qasper, multifieldqa_en, hotpotqa, 2wikimqa,
/// musique, triviaqa: qa_f1_score; gov_report, qmsum, multi_news, samsum: rouge_score; trec, lsht:
/// classification_score; passage_retrieval_en: retrieval_score; passage_retrieval_zh:
/// retrieval_zh_score; passage_count: count_score; lcc, repobench-p: code_sim_score); otherwise, as
/// RULER and kvpress: "string_match_part" when the task's name up to its first '_' is "qa" (qa_1,
/// qa_2), else "string_match_all". (LongBench's multifieldqa_zh, dureader and vcsum need jieba's
/// metrics, which kvscope lacks: they get "string_match_all" unless a sample names its metric.)
std::string default_metric(std::string_view task);

/// Whether a task's outputs are scored on their first line only (longbench_first_line): true for
/// LongBench's trec, triviaqa, samsum and lsht (and "<name>_e"), as its eval.py does.
bool default_first_line(std::string_view task);

/// The score in [0, 1] of one output against `answers`: with `first_line`, only
/// longbench_first_line(prediction) is scored; then RULER's metrics score ruler_postprocess(...) as
/// RULER's evaluate.py does, and LongBench's score the prediction as it is, taking the best over the
/// answers as LongBench's eval.py does. Throws InputError with metric_input_problem's message.
double score(std::string_view metric, std::string_view prediction, const std::vector<std::string>& answers,
             const std::vector<std::string>& all_classes = {}, bool first_line = false);

/// score(sample.metric, prediction, sample.answers, sample.all_classes, sample.first_line).
double score(const EvalSample& sample, std::string_view prediction);

}  // namespace kvscope
