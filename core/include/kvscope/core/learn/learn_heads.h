#pragma once
// Learning a head pattern offline (`kvscope-cli learn-heads`): DuoAttention-style per-head gates
// or HS-SFT per-layer streaming windows, by LibTorch autograd over a frozen model.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvscope/core/head_pattern.h"
#include "kvscope/core/learn/training_data.h"
#include "kvscope/core/model.h"

namespace kvscope::learn {

enum class LearnMethod {
  kHsSft,  ///< HS-SFT (docs/methods.md §5; the HS-SFT paper §2.2): alpha dense heads, per-layer window by STE
  kDuo,    ///< DuoAttention (Xiao et al. 2024) §3.1: per-KV-head gates, distillation + L1
};

/// Parses "hs-sft" | "duo". Throws InputError naming the valid ones.
LearnMethod parse_learn_method(const std::string& name);
std::string learn_method_name(LearnMethod method);

/// How the HS-SFT window logits get a gradient (docs/methods.md §5.9: the paper's "dL/doutput" is
/// undefined because the hard forward does not depend on z).
enum class SteMode {
  kSoftmax,   ///< forward: the argmax window; backward: as if softmax(z/tau) weighted every candidate
  kSelected,  ///< eq. 2 literally: only z_argmax gets a gradient, through out * exp(z_i* - sg(z_i*))
};

/// The streaming sizes the papers use (HS-SFT Table 6: 128 sink tokens, candidate windows in
/// blocks of 128; DuoAttention's streaming heads: a 256-token window), and the context they suit:
/// models with 8K tokens of context or more.
inline constexpr int64_t kPaperSink = 128;
inline constexpr int64_t kPaperWindow = 256;
inline constexpr int64_t kPaperBlock = 128;
inline constexpr int64_t kPaperContext = 8192;
inline constexpr int64_t kDefaultSeqLen = 1024;  ///< training sequence length, capped at the model's context

/// Default --sink / --window / --block.
struct StreamingSizes {
  int64_t sink = 0;
  int64_t window = 0;  ///< duo
  int64_t block = 0;   ///< hs-sft
};

/// The defaults for a reference length N (the budget's, pattern_budget.h) and a model context C:
/// the papers' 128 / 256 / 128 when C >= 8192 or N >= 8192; below that, those values scaled by
/// N / 8192, rounded, at least 1 (sink N/64, window N/32, block N/64: 8 / 16 / 8 at N = 512 on
/// stories260K, 16 / 32 / 16 at N = 1024 on pycode-16m), so that they take the same share of the
/// reference context as the papers' sizes take of 8K and budgets of 0.1 and up can be met.
StreamingSizes default_streaming_sizes(int64_t reference_length, int64_t model_context);

struct LearnOptions {
  LearnMethod method = LearnMethod::kHsSft;
  double budget = 0.25;          ///< target kept fraction of the full KV bytes at reference_length, (0, 1]
  int64_t steps = 100;           ///< optimizer steps (HS-SFT: of the window phase)
  int64_t batch = 4;             ///< sequences per step
  int64_t seq_len = 0;           ///< tokens per sequence; 0 = min(kDefaultSeqLen, the model's context)
  int64_t reference_length = 0;  ///< N of the budget (pattern_budget.h); 0 = seq_len
  int64_t max_tokens = 0;  ///< training tokens read from the files (0 = steps * batch * seq_len, at least 4 batches)
  double lr = 0;           ///< Adam learning rate; 0 = method default (duo 0.02; hs-sft 0.01)
  uint64_t seed = 0;
  int64_t sink = -1;           ///< sink tokens of every streaming head; < 0: default_streaming_sizes
  int64_t window = -1;         ///< duo: the streaming window; < 0: default_streaming_sizes
  int64_t block = -1;          ///< hs-sft: candidate windows {1..n_candidates} x block; < 0: default_streaming_sizes
  int64_t n_candidates = 8;    ///< hs-sft: m (Table 6: 8)
  double dense_fraction = -1;  ///< hs-sft alpha; < 0: max(0, budget - 0.05) (docs/methods.md §5.3)
  double lambda = -1;          ///< < 0: duo 0.05 (L1 on gates); hs-sft 1e-2 (balance KL, Table 6)
  double gamma = 2.0;          ///< hs-sft prior shape (eq. 4)
  double tau = 1.0;            ///< hs-sft softmax temperature (Algorithm 1 line 9; not given in the paper)
  SteMode ste = SteMode::kSoftmax;
  int64_t init_steps = -1;  ///< hs-sft: duo-gate steps ranking the dense heads; < 0: steps / 2
  int64_t log_every = 10;   ///< progress callback period in steps (the curve keeps every step)
};

/// `options` with the sizes left to their defaults filled in for `config`: seq_len 0 ->
/// min(kDefaultSeqLen, context); sink / window / block < 0 -> default_streaming_sizes(reference
/// length, context), the reference length being options.reference_length or else the seq_len.
/// Explicit values are kept as given (validate judges them). Idempotent.
LearnOptions resolve_defaults(const LearnOptions& options, const ModelConfig& config);

/// Throws InputError naming the option when `options` (defaults resolved first) cannot work for
/// `config`: budget outside (0, 1], steps/batch < 1, seq_len < 2 or beyond the model's context,
/// sequences too short for a streaming head to drop anything (duo: seq_len <= sink + window;
/// hs-sft: seq_len <= sink + block), or a budget that no pattern of the method can meet at the
/// reference length (duo: every head streaming with sink + window; hs-sft: the dense heads plus
/// sinks and windows of 1), naming the sizes and what to change.
void validate(const LearnOptions& options, const ModelConfig& config);

/// One point of the loss curve: the objective on that step's minibatch.
struct LossPoint {
  int64_t step = 0;   ///< 1-based, counted over both HS-SFT phases
  std::string phase;  ///< "duo" (gates) | "hs-sft" (windows)
  double loss = 0;    ///< task + reg
  double task_loss =
      0;  ///< duo: distillation (sum of squared hidden-state differences per token); hs-sft: LM cross-entropy, nats
  double reg_loss = 0;  ///< duo: lambda * sum |a|; hs-sft: lambda * sum_l KL(p_l || q)
};

struct LearnResult {
  LearnOptions options;  ///< the options as run: resolve_defaults(the caller's, the model)
  HeadPattern pattern;   ///< fitted to the budget (pattern_budget.h)
  int64_t reference_length = 0;
  double budget_achieved = 0;    ///< kept_fraction(pattern, reference_length)
  std::vector<LossPoint> curve;  ///< every step, in order
  /// The final phase's objective on one fixed evaluation batch (the first `batch` sequences),
  /// before its first step and after its last: same data, same formula, comparable.
  double initial_loss = 0, final_loss = 0;
  double initial_task_loss = 0, final_task_loss = 0;  ///< the task term alone (duo: distillation; hs-sft: LM)
  std::vector<std::vector<double>> gates;         ///< duo gates a [n_layer][n_head_kv] (hs-sft: from its init phase)
  std::vector<std::vector<bool>> dense;           ///< hs-sft dense heads before fitting (duo: empty)
  std::vector<int64_t> candidates;                ///< hs-sft candidate windows
  std::vector<std::vector<double>> window_probs;  ///< hs-sft softmax(z_l / tau) [n_layer][m]
  std::vector<int64_t> learned_windows;           ///< hs-sft B[argmax z_l] before rescaling
  int64_t n_files = 0, n_tokens = 0, n_sequences = 0;
};

using LearnProgress = std::function<void(const LossPoint&)>;

/// Learns a pattern on `data` (see training_data.h) for `model` (weights frozen). Calls `progress`
/// every options.log_every steps and on the last step of each phase. Throws InputError (validate,
/// and a budget that no pattern of the method can meet).
LearnResult learn_head_pattern(const Model& model, const TrainingData& data, const LearnOptions& options,
                               const LearnProgress& progress = {});

/// Same, reading the training text from the files matching `data_glob`.
LearnResult learn_head_pattern(const Model& model, const std::string& data_glob, const LearnOptions& options,
                               const LearnProgress& progress = {});

}  // namespace kvscope::learn
