#include "adam.h"

#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace kvscope::learn {

Adam::Adam(at::Tensor param, double lr, double beta1, double beta2, double eps)
    : param_(std::move(param)), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {
  c10::NoGradGuard no_grad;
  m_ = at::zeros_like(param_);
  v_ = at::zeros_like(param_);
}

void Adam::step() {
  c10::NoGradGuard no_grad;
  at::Tensor g = param_.grad();
  if (!g.defined()) return;
  ++t_;
  m_.mul_(beta1_).add_(g, 1 - beta1_);
  v_.mul_(beta2_).addcmul_(g, g, 1 - beta2_);
  const double bc1 = 1 - std::pow(beta1_, static_cast<double>(t_)), bc2 = 1 - std::pow(beta2_, static_cast<double>(t_));
  param_.sub_(lr_ * (m_ / bc1) / ((v_ / bc2).sqrt() + eps_));
  g.zero_();
}

}  // namespace kvscope::learn
