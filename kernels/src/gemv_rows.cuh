#pragma once
// The tensor-core GEMV for 2..8 rows of x (internal to kvscope_kernels; gemv() dispatches to it).
#include <cuda_runtime_api.h>

#include "kvscope/kernels/gemv.h"

namespace kvscope::kernels::detail {

/// Rows of W per block of the 2..8-row GEMV (the mma's M): one norm part per tile (gemv_norm_parts).
constexpr int64_t kTileRows = 16;

/// The folded RMSNorm's scale rsqrt(Σ r² / k + eps) (GemvArgs::norm_sumsq) from the lanes' shares
/// of Σ r²: a warp sum, so every lane of the warp must call it; every lane gets the scale. Shared by
/// both GEMVs so that the formula exists once.
__device__ __forceinline__ float norm_scale(float share, int64_t k, float eps) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) share += __shfl_xor_sync(0xffffffffu, share, off);
  return rsqrtf(share / static_cast<float>(k) + eps);
}

/// Weight bytes (from the start of W) whose rows a GEMV block launched early (pdl.cuh) prefetches
/// into L2 before its wait: half the 50-60 MB L2 of an H100/H200, so that what is prefetched
/// survives until it is read.
constexpr int64_t kL2PrefetchBytes = 24ll << 20;

/// Y[m, n] = X[m, k] W[n, k]ᵀ (+ b) for 2 <= m <= 8, bf16 / fp16, on `stream` (see gemv.h). The
/// caller (gemv) has checked gemv_supported(a).
cudaError_t gemv_rows(const GemvArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels::detail
