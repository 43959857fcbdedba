// HS-SFT window learning (the HS-SFT paper §2.2 "STE-based learnable budget selection" and "budget-aware
// balance loss", Algorithm 1; docs/methods.md §5.2), with the model weights frozen.
#include <cmath>
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

/// KL(softmax(z/tau) || q) summed over layers (eq. 5 without lambda), q_i ∝ (m + 1 - i)^gamma (eq. 4).
at::Tensor balance_kl(const at::Tensor& z, double tau, double gamma) {
  const double eps = 1e-8;
  const int64_t m = z.size(1);
  at::Tensor rank = at::arange(m, 0, -1, z.options());  // m + 1 - i for i = 1..m
  at::Tensor q = rank.pow(gamma);
  q = q / q.sum();
  at::Tensor p = at::softmax(z / tau, -1);
  return (p * ((p + eps).log() - (q + eps).log())).sum();
}

Objective hs_objective(const TrainingForward& fwd, const at::Tensor& ids, const at::Tensor& z,
                       const std::vector<at::Tensor>& dense_weight, const std::vector<int64_t>& candidates,
                       int64_t sink, const LearnOptions& o, double lambda) {
  const int64_t L = z.size(0), m = z.size(1);
  at::Tensor hard = z.argmax(1);  // eq. 1 (first maximum)
  at::Tensor onehot = at::one_hot(hard, m).to(z.scalar_type());
  std::vector<AttentionMix> mixes;
  if (o.ste == SteMode::kSoftmax) {
    at::Tensor soft = at::softmax(z / o.tau, -1);
    at::Tensor w = onehot - soft.detach() + soft;  // value: one-hot; gradient: softmax's
    for (int64_t l = 0; l < L; ++l) mixes.push_back(AttentionMix{sink, candidates, w[l], dense_weight[l]});
  } else {
    const at::Tensor hard_cpu = hard.to(at::kCPU);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t i = hard_cpu[l].item<int64_t>();
      at::Tensor zi = z[l].narrow(0, i, 1);
      mixes.push_back(AttentionMix{sink, {candidates[i]}, at::exp(zi - zi.detach()), dense_weight[l]});  // eq. 2
    }
  }
  Objective r;
  r.task = fwd.lm_loss(ids, mixes);
  r.reg = lambda * balance_kl(z, o.tau, o.gamma);
  r.loss = r.task + r.reg;
  return r;
}

}  // namespace

PhaseResult train_hs_sft_windows(TrainContext& ctx, int64_t steps, const std::vector<std::vector<bool>>& dense,
                                 const std::vector<int64_t>& candidates, int64_t sink, double lr, double lambda) {
  const Model& model = ctx.forward.model();
  const auto fopts = at::TensorOptions().device(model.device).dtype(at::kFloat);
  const int64_t L = model.config.n_layer, m = static_cast<int64_t>(candidates.size());
  std::vector<at::Tensor> dense_weight;  // a_h: 1 for dense heads, 0 for streaming ones (constants)
  for (const auto& layer : dense) {
    std::vector<float> a(layer.begin(), layer.end());
    dense_weight.push_back(at::tensor(a, at::kFloat).to(model.device));
  }
  at::Tensor z = at::zeros({L, m}, fopts);
  z.set_requires_grad(true);
  Adam adam(z, lr);
  const at::Tensor eval_ids = ctx.batches.evaluation();
  auto eval = [&]() {
    c10::NoGradGuard no_grad;
    const Objective o = hs_objective(ctx.forward, eval_ids, z, dense_weight, candidates, sink, ctx.options, lambda);
    return std::pair<double, double>{o.loss.item<double>(), o.task.item<double>()};
  };
  PhaseResult r;
  std::tie(r.initial_loss, r.initial_task_loss) = eval();
  for (int64_t s = 1; s <= steps; ++s) {
    Objective o = hs_objective(ctx.forward, ctx.batches.next(), z, dense_weight, candidates, sink, ctx.options, lambda);
    o.loss.backward();
    adam.step();
    LossPoint p{ctx.step0 + s, "hs-sft", o.loss.item<double>(), o.task.item<double>(), o.reg.item<double>()};
    ctx.curve.push_back(p);
    if (ctx.progress && (s % std::max<int64_t>(1, ctx.options.log_every) == 0 || s == steps)) ctx.progress(p);
  }
  ctx.step0 += steps;
  std::tie(r.final_loss, r.final_task_loss) = eval();
  c10::NoGradGuard no_grad;
  at::Tensor probs = at::softmax(z / ctx.options.tau, -1).to(at::kCPU).contiguous();
  at::Tensor hard = z.argmax(1).to(at::kCPU);
  for (int64_t l = 0; l < L; ++l) {
    const float* row = probs[l].data_ptr<float>();
    r.values.emplace_back(row, row + m);
    r.argmax.push_back(hard[l].item<int64_t>());
  }
  return r;
}

}  // namespace kvscope::learn
