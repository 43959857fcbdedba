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

/// Gemma 2/3's sandwich norm closing a sublayer (post_attention_layernorm, post_feedforward_layernorm),
/// in HF's order, with the next norm left pending for the projection that consumes it (gemv.h:
/// norm_sumsq), per row r:
///   out = residual + rmsnorm(y; w_post)        (each in dtype: normalised, scaled, added, rounded)
///   next_gx = w_next ⊙ out (one rounding), next_sumsq[r] = Σ_j out_j² (fp32 [rows], one part a row)
/// Weights are dtype or fp32 (w_*_fp32: Gemma's 1 + w, applied before the cast). Without w_next
/// only out is written. out may alias residual. hidden <= kRmsNormResidualMaxHidden (a row is held in
/// one block's registers).
inline constexpr int64_t kRmsNormResidualMaxHidden = 8192;

struct RmsNormResidualArgs {
  DType dtype = DType::kBFloat16;
  int64_t rows = 1, hidden = 0;
  const void* y = nullptr;       ///< dtype [rows, hidden]: the sublayer's output (o or down projection)
  const void* w_post = nullptr;  ///< [hidden]
  bool w_post_fp32 = false;
  const void* residual = nullptr;  ///< dtype [rows, hidden]
  void* out = nullptr;             ///< dtype [rows, hidden]
  const void* w_next = nullptr;    ///< [hidden], or null
  bool w_next_fp32 = false;
  void* next_gx = nullptr;      ///< dtype [rows, hidden]
  float* next_sumsq = nullptr;  ///< fp32 [rows]
  float eps = 1e-6f;
};

/// One launch. Returns cudaErrorInvalidValue on bad arguments, else the launch error.
cudaError_t rms_norm_residual(const RmsNormResidualArgs& args, cudaStream_t stream);

}  // namespace kvscope::kernels
