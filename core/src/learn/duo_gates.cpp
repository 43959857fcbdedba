// DuoAttention-style gate training (Xiao et al. 2024, "DuoAttention", §3.1 optimization-based
// identification of retrieval heads): the mixed model's last hidden states are distilled toward
// the full-attention model's, with an L1 penalty pushing the gates toward streaming.
#include <tuple>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "adam.h"
#include "trainers.h"

namespace kvscope::learn {
namespace {

struct Objective {
  at::Tensor loss, task, reg;
};

Objective duo_objective(const TrainingForward& fwd, const at::Tensor& ids, const at::Tensor& gates, int64_t sink,
                        int64_t window, double lambda) {
  const int64_t T = ids.size(1), from = std::min<int64_t>(sink + window, T - 1);
  at::Tensor full;
  {
    c10::NoGradGuard no_grad;
    full = fwd.hidden_states(ids, {}).narrow(1, from, T - from).to(at::kFloat);
  }
  std::vector<AttentionMix> mixes;
  for (int64_t l = 0; l < gates.size(0); ++l) mixes.push_back(AttentionMix{sink, {window}, {}, gates[l]});
  at::Tensor mixed = fwd.hidden_states(ids, mixes).narrow(1, from, T - from).to(at::kFloat);
  Objective o;
  o.task = (full - mixed).pow(2).sum(-1).mean();
  o.reg = lambda * gates.abs().sum();
  o.loss = o.task + o.reg;
  return o;
}

/// (loss, task loss) on a batch, without gradients.
std::pair<double, double> eval_loss(const TrainingForward& fwd, const at::Tensor& ids, const at::Tensor& gates,
                                    int64_t sink, int64_t window, double lambda) {
  c10::NoGradGuard no_grad;
  const Objective o = duo_objective(fwd, ids, gates, sink, window, lambda);
  return {o.loss.item<double>(), o.task.item<double>()};
}

}  // namespace

PhaseResult train_duo_gates(TrainContext& ctx, int64_t steps, int64_t sink, int64_t window, double lr, double lambda) {
  const ModelConfig& c = ctx.forward.model().config;
  at::Tensor gates =
      at::ones({c.n_layer, c.n_head_kv}, at::TensorOptions().device(ctx.forward.model().device).dtype(at::kFloat));
  gates.set_requires_grad(true);
  Adam adam(gates, lr);
  const at::Tensor eval_ids = ctx.batches.evaluation();
  PhaseResult r;
  std::tie(r.initial_loss, r.initial_task_loss) = eval_loss(ctx.forward, eval_ids, gates, sink, window, lambda);
  for (int64_t s = 1; s <= steps; ++s) {
    Objective o = duo_objective(ctx.forward, ctx.batches.next(), gates, sink, window, lambda);
    o.loss.backward();
    adam.step();
    {
      c10::NoGradGuard no_grad;
      gates.clamp_(0, 1);
    }
    LossPoint p{ctx.step0 + s, "duo", o.loss.item<double>(), o.task.item<double>(), o.reg.item<double>()};
    ctx.curve.push_back(p);
    if (ctx.progress && (s % std::max<int64_t>(1, ctx.options.log_every) == 0 || s == steps)) ctx.progress(p);
  }
  ctx.step0 += steps;
  std::tie(r.final_loss, r.final_task_loss) = eval_loss(ctx.forward, eval_ids, gates, sink, window, lambda);
  at::Tensor g = gates.detach().to(at::kCPU).contiguous();
  for (int64_t l = 0; l < g.size(0); ++l) {
    const float* row = g[l].data_ptr<float>();
    r.values.emplace_back(row, row + g.size(1));
  }
  return r;
}

}  // namespace kvscope::learn
