#pragma once
// Minibatches of training sequences: seeded epochs of a random permutation, plus one fixed
// evaluation batch (internal to kvscope_core).
#include <cstdint>
#include <random>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kvscope::learn {

class Minibatches {
 public:
  /// sequences: int64 [n, T] on CPU; batch >= 1 (capped at n).
  Minibatches(at::Tensor sequences, int64_t batch, uint64_t seed, const at::Device& device);
  /// The next `batch` sequences of the current epoch ([batch, T] on the device); a new shuffled
  /// epoch starts when one runs out.
  at::Tensor next();
  /// The first `batch` sequences in file order ([batch, T] on the device): the same every call.
  at::Tensor evaluation() const;

 private:
  at::Tensor sequences_;
  int64_t batch_;
  std::mt19937_64 rng_;
  at::Device device_;
  std::vector<int64_t> order_;
  size_t next_ = 0;
};

}  // namespace kvscope::learn
