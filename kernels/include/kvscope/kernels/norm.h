#pragma once
// RMSNorm (Zhang & Sennrich 2019) as HF computes it, one block per row:
//   y = w * (x_fp32 * rsqrt(mean(x_fp32^2) + eps)).to(dtype)
// i.e. normalise in fp32, round to dtype, then multiply by the weight with one more rounding (the
// product of two dtype tensors in LibTorch). Raw device pointers, no torch headers.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

/// x, y: dtype [rows, hidden] with row strides x_stride / y_stride (elements); w: dtype [hidden].
/// y may alias x (same strides). 16-byte vector path when hidden % 8 == 0 and every pointer and
/// stride is 16-byte aligned, scalar path otherwise. Returns cudaErrorInvalidValue on bad sizes.
cudaError_t rms_norm(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride,
                     int64_t rows, int64_t hidden, float eps, cudaStream_t stream);

}  // namespace kvscope::kernels
