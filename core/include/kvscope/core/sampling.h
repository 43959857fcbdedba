#pragma once
// Next-token selection: greedy, or temperature + nucleus (top-p) sampling with a seed.
#include <cstdint>
#include <random>

#include <ATen/core/Tensor.h>

namespace kvscope {

struct SamplingParams {
  bool greedy = true;
  double temperature = 1.0;  ///< > 0; ignored when greedy
  double top_p = 1.0;        ///< (0, 1]: keep the smallest set of tokens whose mass >= top_p (Holtzman et al. 2020)
  uint64_t seed = 0;
};

/// Stateful sampler (owns its RNG so a seed reproduces a run).
class Sampler {
 public:
  /// Throws InputError for temperature <= 0 or top_p outside (0, 1].
  explicit Sampler(const SamplingParams& params);
  /// logits: fp32 [vocab] on any device. Returns the chosen id.
  int32_t next(const at::Tensor& logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kvscope
