#pragma once
// The check before a run that its budget leaves room for what the pipeline always keeps (a
// SnapKV-family observation window, StreamingLLM's sink tokens, H2O's recent window, TOVA's last
// token): below that the scores never decide anything and "window always kept" is false. One
// function for kvscope-cli (make_request refuses, exit 2) and the GUI's Run view (warning, Run
// disabled). Torch-free: the GUI panels include it.
#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/core/budget.h"
#include "kvscope/core/pipeline_spec.h"

namespace kvscope::run {

/// What a pipeline keeps per KV head after prefill whatever the budget.
struct AlwaysKept {
  int64_t entries = 0;  ///< per KV head, at most the prompt's length; 0: nothing
  std::string policy;   ///< the stage that keeps them: "snapkv"
  std::string param;    ///< its parameter as written: "window=32" ("" for TOVA's last token)
  std::string what;     ///< "observation window", "attention-sink tokens", ...
};

/// The largest always-kept set among `stages` (resolved: every parameter written out, as
/// Pipeline::stages() or a resolved SPEC give them) for an n_prompt-token prompt:
///   snapkv, pyramidkv: min(window, n_prompt) (the observation window);
///   streamingllm: min(sink, n_prompt); h2o: min(recent, n_prompt); tova: min(1, n_prompt).
/// Other stages keep nothing regardless of the budget (KeyDiff's recent share and Ada-KV's
/// safeguard are shares of the budget; head patterns and decode-time stages do not evict to it).
AlwaysKept always_kept(const std::vector<StageSpec>& stages, int64_t n_prompt);

/// The outcome of check_kept_entries.
struct KeptCheck {
  int64_t n_prompt = 0;
  int64_t kept_per_head = -1;  ///< entries per KV head eviction keeps after prefill; -1: not known
  AlwaysKept always;
  /// One line when kept_per_head < always.entries, naming the budget, both counts and the
  /// parameter; empty otherwise.
  std::string problem;
};

/// Checks that `kept_per_head` (the entries per KV head eviction keeps after prefill of an
/// n_prompt-token prompt under `budget`: Pipeline::begin_run, or budget.kept_per_head(n_prompt)
/// when no decode-time stage derives it; -1 when not known) is at least what `stages` always keep.
KeptCheck check_kept_entries(const std::vector<StageSpec>& stages, const BudgetSpec& budget, int64_t n_prompt,
                             int64_t kept_per_head);

}  // namespace kvscope::run
