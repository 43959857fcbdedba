#pragma once
// Task-accuracy evaluation samples (issue 32): a prompt in parts and its reference answers, read
// from a JSONL file in either of two formats (docs/eval.md). Torch-free (kvscope_spec).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

/// One evaluation sample. The prompt is assembled from instruction, context, question and
/// answer_prefix as `chat` says (docs/eval.md); the model's output is scored against `answers` by
/// `metric` (eval_score.h).
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
};

/// Reads every sample of a JSONL file: one JSON object per line, blank lines skipped, fields not
/// listed in docs/eval.md ignored. Two formats, told apart per line by their answer field:
/// this project's ("answers": a list of strings; e.g. pycode-recall-17m/golden/ruler.jsonl) and
/// kvpress's dataset columns ("answer": a string or a list of strings; NVIDIA/kvpress
/// evaluation/benchmarks/ruler/create_huggingface_dataset.py). Throws InputError
/// "<file>: line <n>: <problem>" for a line that is not a JSON object, a missing field or one of the
/// wrong type, no or an empty answer, max_new_tokens <= 0, an unknown metric or a repeated id;
/// "<file>: <problem>" when the file cannot be read or holds no sample.
std::vector<EvalSample> load_eval_samples(const std::filesystem::path& jsonl);

/// As load_eval_samples, on the text of a file; `source` names it in errors.
std::vector<EvalSample> parse_eval_samples(std::string_view text, const std::filesystem::path& source);

}  // namespace kvscope
