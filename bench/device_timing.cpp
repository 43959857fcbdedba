// See device_timing.h.
#include "device_timing.h"

#include <chrono>

#include <ATen/ATen.h>

namespace kvscope::bench {

void sync(const at::Tensor& t) { (void)t.flatten()[0].item<float>(); }

double copy_bandwidth(c10::Device dev) {
  const int64_t n = int64_t{1} << 29;  // 1 GiB of bf16 per buffer
  at::Tensor a = at::rand({n}, at::TensorOptions().device(dev).dtype(at::kBFloat16)), b = at::empty_like(a);
  for (int i = 0; i < 3; ++i) b.copy_(a);
  sync(b);
  const int reps = dev.is_cuda() ? 20 : 3;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) b.copy_(a);
  sync(b);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * n * 2 * reps / s;  // n bf16 read and n written per copy
}

}  // namespace kvscope::bench
