#pragma once
// SwiGLU activation of the MLP (Shazeer 2020): out[r, i] = silu(gate[r, i]) * up[r, i], where
// gate_up[r] = [gate (I) | up (I)] as produced by the fused gate/up projection. fp32 math, one
// rounding to dtype. Raw device pointers, no torch headers.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

/// gate_up: dtype [rows, 2 * inter] with row stride gu_stride (elements); out: dtype [rows, inter]
/// with row stride out_stride. 16-byte vector path when inter % 8 == 0 and pointers / strides are
/// 16-byte aligned, scalar otherwise. Returns cudaErrorInvalidValue on bad sizes.
cudaError_t silu_mul(DType dtype, const void* gate_up, int64_t gu_stride, void* out, int64_t out_stride, int64_t rows,
                     int64_t inter, cudaStream_t stream);

}  // namespace kvscope::kernels
