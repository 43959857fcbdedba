#include "minibatches.h"

#include <algorithm>
#include <numeric>

#include <ATen/ATen.h>

namespace kvscope::learn {

Minibatches::Minibatches(at::Tensor sequences, int64_t batch, uint64_t seed, const at::Device& device)
    : sequences_(std::move(sequences)),
      batch_(std::clamp<int64_t>(batch, 1, sequences_.size(0))),
      rng_(seed),
      device_(device) {}

at::Tensor Minibatches::next() {
  std::vector<int64_t> pick;
  while (static_cast<int64_t>(pick.size()) < batch_) {
    if (next_ >= order_.size()) {
      order_.resize(static_cast<size_t>(sequences_.size(0)));
      std::iota(order_.begin(), order_.end(), 0);
      std::shuffle(order_.begin(), order_.end(), rng_);
      next_ = 0;
    }
    pick.push_back(order_[next_++]);
  }
  at::Tensor idx = at::tensor(pick, at::kLong);
  return sequences_.index_select(0, idx).to(device_);
}

at::Tensor Minibatches::evaluation() const { return sequences_.narrow(0, 0, batch_).to(device_); }

}  // namespace kvscope::learn
