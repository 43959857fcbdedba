#pragma once
// Block-wide sum shared by the row kernels (rms_norm.cu, rms_norm_residual.cu); internal to kvscope_kernels.

namespace kvscope::kernels::detail {

/// Sum over the block; every thread gets the result. blockDim.x is a multiple of 32, <= 1024. Two
/// barriers; consecutive calls are safe (a thread reads the total before any can rewrite it).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float s_part[32];
  __shared__ float s_total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) s_part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < static_cast<int>(blockDim.x >> 5) ? s_part[lane] : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (lane == 0) s_total = t;
  }
  __syncthreads();
  return s_total;
}

}  // namespace kvscope::kernels::detail
