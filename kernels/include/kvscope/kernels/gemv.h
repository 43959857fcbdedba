#pragma once
// Matrix-vector product for the decode step's projections (batch 1): y = W x (+ b), the weight
// streamed once from memory at close to the copy bandwidth. Raw device pointers, no torch headers.
//
//   W: dtype [n, k] row-major (a linear layer's weight), x: dtype [k], b: dtype [n] or null,
//   y: dtype [n] or fp32 [n] (y_fp32: the LM head's logits). fp32 accumulation, one rounding of
//   acc + b to the output type (as cuBLAS GEMV / at::linear).
// Requires k % 8 == 0, 16-byte aligned W, x (and rows: k * itemsize % 16 == 0), k <= 32768.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct GemvArgs {
  DType dtype = DType::kBFloat16;
  int64_t n = 0, k = 0;
  const void* w = nullptr;
  const void* x = nullptr;
  const void* b = nullptr;  ///< optional bias [n]
  void* y = nullptr;
  bool y_fp32 = false;      ///< write fp32 instead of dtype
};

/// True when the shapes and alignment meet the kernel's requirements.
bool gemv_supported(const GemvArgs& a);

/// One launch on `stream`. Returns cudaErrorInvalidValue when !gemv_supported(a).
cudaError_t gemv(const GemvArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels
