// See device_props.cuh.
#include "device_props.cuh"

#include <cuda_runtime_api.h>

#include <atomic>

namespace kvscope::kernels::detail {

namespace {

/// attr of the current device, queried once per device and cached; fallback when the query fails.
template <cudaDeviceAttr kAttr>
int cached_attribute(int fallback) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return fallback;
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, kAttr, dev) != cudaSuccess || n <= 0) n = fallback;
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace

int sm_count() { return cached_attribute<cudaDevAttrMultiProcessorCount>(132); }

int l2_bytes() { return cached_attribute<cudaDevAttrL2CacheSize>(50 * 1024 * 1024); }

}  // namespace kvscope::kernels::detail
