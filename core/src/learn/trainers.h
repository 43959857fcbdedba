#pragma once
// The two pattern trainers behind learn_head_pattern (internal to kvscope_core).
#include <cstdint>
#include <vector>

#include "kvscope/core/learn/learn_heads.h"
#include "kvscope/core/learn/training_forward.h"
#include "minibatches.h"

namespace kvscope::learn {

/// What a trainer leaves: its parameters' final values and the objective on the evaluation batch.
struct PhaseResult {
  std::vector<std::vector<double>> values;  ///< duo: gates [L][Hkv]; hs-sft: softmax(z/tau) [L][m]
  std::vector<int64_t> argmax;              ///< hs-sft: argmax_i z_l per layer
  double initial_loss = 0, final_loss = 0;
  double initial_task_loss = 0, final_task_loss = 0;  ///< their task terms (without the regulariser)
};

/// Shared run state: the forward, batches, where the curve goes, step numbering and progress.
struct TrainContext {
  const TrainingForward& forward;
  Minibatches& batches;
  const LearnOptions& options;
  std::vector<LossPoint>& curve;
  const LearnProgress& progress;
  int64_t step0 = 0;  ///< steps already on the curve
};

/// DuoAttention §3.1: gates a [L, Hkv] start at 1; each step minimises
///   sum_tokens ||H_full - H_mixed||^2 / n_tokens  +  lambda * sum |a|
/// over the tokens t >= sink + window (before them streaming equals full attention), with Adam and
/// a clamped to [0, 1] after every step.
PhaseResult train_duo_gates(TrainContext& ctx, int64_t steps, int64_t sink, int64_t window, double lr, double lambda);

/// HS-SFT §2.2 / Algorithm 1 with frozen weights: per-layer logits z_l over `candidates` start at 0;
/// the forward uses k_l = candidates[argmax z_l] (eq. 1) for the streaming heads (dense[l][h] false)
/// and the loss is L_LM + lambda * sum_l KL(softmax(z_l / tau) || q) with q_i ∝ (m + 1 - i)^gamma
/// (eqs. 3-6, epsilon 1e-8); gradients reach z through options.ste.
PhaseResult train_hs_sft_windows(TrainContext& ctx, int64_t steps, const std::vector<std::vector<bool>>& dense,
                                 const std::vector<int64_t>& candidates, int64_t sink, double lr, double lambda);

}  // namespace kvscope::learn
