#include "kvscope/core/sampling.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"

namespace kvscope {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  if (!params.greedy && !(params.temperature > 0)) throw InputError("--temperature must be > 0");
  if (!params.greedy && !(params.top_p > 0 && params.top_p <= 1)) throw InputError("--top-p must be in (0, 1]");
}

int32_t Sampler::next(const at::Tensor& logits) {
  if (params_.greedy) return static_cast<int32_t>(logits.argmax().item<int64_t>());
  at::Tensor probs = at::softmax(logits.to(at::kCPU, at::kDouble) / params_.temperature, -1).contiguous();
  const double* p = probs.data_ptr<double>();
  const int64_t V = probs.numel();
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size() && (keep == 0 || mass < params_.top_p)) mass += p[order[keep++]];
  std::uniform_real_distribution<double> u(0.0, mass);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= p[order[i]];
    if (r <= 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace kvscope
