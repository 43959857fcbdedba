// See device_props.cuh.
#include "device_props.cuh"

#include <cuda_runtime_api.h>

#include <atomic>

namespace kvscope::kernels::detail {

int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 132;
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace kvscope::kernels::detail
