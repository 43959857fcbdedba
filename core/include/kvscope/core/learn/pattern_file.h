#pragma once
// Writing a learned head pattern: the kvscope.head_pattern.v1 file the `heads` policy reads, with
// the training record under the extra key "learned" (loaders ignore it), and the loss curve as CSV.
#include <filesystem>

#include "kvscope/core/learn/learn_heads.h"

namespace kvscope::learn {

/// The loss-curve CSV beside a pattern file: PATTERN.json -> PATTERN.loss.csv.
std::filesystem::path loss_curve_path(const std::filesystem::path& pattern_json);

/// Writes `result.pattern` to `path` (save_head_pattern's format) plus "reference_length",
/// "budget_achieved" and "learned": {method, options, data, initial_loss, final_loss, gates,
/// dense, candidates, window_probs, learned_windows, loss_curve: [[step, loss, task, reg, phase], ...]},
/// and the curve as loss_curve_path(path) with header `step,phase,loss,task_loss,reg_loss`.
/// options: those given to learn_head_pattern; seq_len, sink, window and block left to their
/// defaults are recorded with the values the run used (result.options).
/// Throws InputError(path, ...) when either file cannot be written.
void save_learned_pattern(const std::filesystem::path& path, const LearnResult& result, const LearnOptions& options);

}  // namespace kvscope::learn
