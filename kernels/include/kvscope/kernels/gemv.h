#pragma once
// Matrix-vector products for the decode step's projections: Y = X Wᵀ (+ b) for m = 1..8 rows of X
// (batch 1, or a decode batch's rows), the weight streamed once from memory at close to the copy
// bandwidth. Raw device pointers, no torch headers.
//
//   W: dtype [n, k] row-major (a linear layer's weight), X: dtype [m, k] contiguous, b: dtype [n]
//   (b_stride 0) or [m, n] with row stride b_stride (the residual stream), or null; Y: dtype [m, n]
//   or fp32 [m, n] (y_fp32: the LM head's logits), optionally in column segments (y_split). fp32
//   accumulation, one rounding of acc + b to the output type.
//   m = 1: one warp per row of W on the CUDA cores (gemv.cu). m = 2..8 (bf16 / fp16 only): tensor
//   cores, W's rows as the 16-row operand of mma m16n8k16 and X's rows as its 8 columns
//   (gemv_rows.cu).
// Requires k % 8 == 0, 16-byte aligned W, X (and rows: k * itemsize % 16 == 0), k <= 32768.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct GemvArgs {
  DType dtype = DType::kBFloat16;
  int64_t m = 1;            ///< rows of x and y, 1..8 (2..8: bf16 / fp16)
  int64_t n = 0, k = 0;
  const void* w = nullptr;
  const void* x = nullptr;
  const void* b = nullptr;  ///< optional bias: [n] (b_stride 0) or [m, n]
  int64_t b_stride = 0;     ///< elements between the bias rows of consecutive rows of x (0: shared)
  void* y = nullptr;
  bool y_fp32 = false;      ///< write fp32 instead of dtype
  /// Column boundaries 0 <= s0 <= s1 <= n of three output segments [0, s0), [s0, s1), [s1, n),
  /// each stored as its own row-major [m, width] block, the blocks one after the other (element
  /// (r, j) of segment [a, e) at y + m * a + r * (e - a) + j - a). A decode batch's fused QKV
  /// projection comes out as q [m * n_head, D], k and v [m * n_head_kv, D] from one launch. {0, 0}:
  /// one segment, the plain [m, n]; with m = 1 every split is the plain layout.
  int64_t y_split[2] = {0, 0};
  /// W holds [gate; up] (n = 2I rows): y = silu(x·W[:I]ᵀ + b[:I]) ⊙ (x·W[I:]ᵀ + b[I:]), dtype
  /// [m, I], each product rounded to dtype before the activation as in the two-kernel path (then
  /// one rounding of the product). The Llama MLP's gate/up projection and SiLU-mul in one launch.
  /// Needs an even n, no y_split, no y_fp32.
  bool swiglu = false;
};

/// True when the shapes and alignment meet the kernel's requirements.
bool gemv_supported(const GemvArgs& a);

/// One launch on `stream`. Returns cudaErrorInvalidValue when !gemv_supported(a).
cudaError_t gemv(const GemvArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels
