#pragma once
// Task-accuracy evaluation samples (issue 32): a prompt in parts and its reference answers, read
// from a JSONL file in either of two formats (docs/eval.md). Torch-free (kvscope_spec).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

/// A byte range [begin, end) of a sample's `context`: where a needle (a fact the answer depends on)
/// was placed.
struct TextSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const TextSpan&) const = default;
};

/// One evaluation sample. The prompt is assembled from instruction, context, question and
/// answer_prefix as `chat` says (docs/eval.md); the model's output is scored against `answers` by
/// `metric` (eval_score.h).
/// A later turn of a multi-turn sample: another question about the same context, asked after the
/// model's answer to the one before (SCBench's shared-context multi-turn setting).
struct EvalTurn {
  std::string question;              ///< the user's next message (chat) or the text that follows (plain)
  std::string answer_prefix;         ///< the start of this turn's answer ("" if none)
  std::vector<std::string> answers;  ///< reference answers, at least one, none empty
  bool operator==(const EvalTurn&) const = default;
};

struct EvalSample {
  std::string id;             ///< unique in its file; default "<task>-<line>" ("sample-<line>" without a task)
  std::string task;           ///< task name, e.g. "niah_single_1" or "qa_2"; "" if the file names none
  int64_t length = 0;         ///< the prompt's token budget it was built for (prompt + max_new_tokens); 0: unknown
  bool chat = true;           ///< true: chat template over one user message; false: plain concatenation
  std::string instruction;    ///< text before the context ("" in kvpress's columns, where it is part of context)
  std::string context;        ///< the haystack: the part a question-agnostic method compresses
  std::string question;       ///< text after the context (may be empty)
  std::string answer_prefix;  ///< the start of the answer, placed after the generation prompt ("" if none)
  std::vector<std::string> answers;  ///< reference answers, at least one, none empty
  int64_t max_new_tokens = 0;        ///< greedy decoding stops after this many tokens (or at an EOS id); > 0
  std::string metric;                ///< a name from eval_metric_names(); default from the task (default_metric)
  /// The class names of a classification task (LongBench's `all_classes`), which
  /// classification_score looks for in the output; empty when the file gives none (or null).
  std::vector<std::string> all_classes;
  /// Score only the output's first line (longbench_first_line); default from the task
  /// (default_first_line: LongBench's trec, triviaqa, samsum, lsht).
  bool first_line = false;
  /// Where the needles sit in `context` (byte ranges, sorted): known for generated samples; empty
  /// when a file gives none (the evaluation then finds the answers' occurrences in the context).
  std::vector<TextSpan> needles;
  /// Later turns, in order (empty: one question). Each is scored with `metric` on its own output;
  /// the sample's score is the mean over all turns, the first included.
  std::vector<EvalTurn> turns;
};

/// Reads every sample of a JSONL file: one JSON object per line, blank lines skipped, fields not
/// listed in docs/eval.md ignored. Two formats, told apart per line by their answer field:
/// this project's ("answers": a list of strings; e.g. pycode-recall-17m/golden/ruler.jsonl) and
/// kvpress's dataset columns ("answer": a string or a list of strings; NVIDIA/kvpress
/// evaluation/benchmarks/ruler/create_huggingface_dataset.py). Throws InputError
/// "<file>: line <n>: <problem>" for a line that is not a JSON object, a missing field or one of the
/// wrong type, no or an empty answer, max_new_tokens <= 0, an unknown metric, answers or
/// all_classes its metric cannot score (metric_input_problem) or a repeated id;
/// "<file>: <problem>" when the file cannot be read or holds no sample.
std::vector<EvalSample> load_eval_samples(const std::filesystem::path& jsonl);

/// One line of kvscope's format for `sample` (every field written out, `all_classes` and `needles`
/// when there are some), without the newline: what parse_eval_samples reads back into the same sample.
std::string eval_sample_json(const EvalSample& sample);

/// As load_eval_samples, on the text of a file; `source` names it in errors.
std::vector<EvalSample> parse_eval_samples(std::string_view text, const std::filesystem::path& source);

}  // namespace kvscope
