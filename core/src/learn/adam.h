#pragma once
// Adam (Kingma & Ba 2015, Algorithm 1) over one parameter tensor: the head gates or window logits
// of pattern learning (internal to kvscope_core; no weight decay, as HS-SFT Table 6 for the logits).
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kvscope::learn {

class Adam {
 public:
  /// `param`: a leaf tensor that requires grad (fp32, any shape).
  Adam(at::Tensor param, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8);
  /// One update from param.grad() (skipped when undefined), then clears the gradient.
  void step();

 private:
  at::Tensor param_, m_, v_;
  double lr_, beta1_, beta2_, eps_;
  int64_t t_ = 0;
};

}  // namespace kvscope::learn
