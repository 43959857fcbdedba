// Gemma 2/3's sandwich norm closing a sublayer, with the next RMSNorm left pending (see norm.h:
// rms_norm_residual). One block per row, three sweeps over the row (Σ y², then out and Σ out², then
// g_next ⊙ out): a row is a few thousand elements, so the re-reads hit L1 and the launch latency
// dominates.
#include "block_sum.cuh"
#include "dtype.cuh"
#include "kvscope/kernels/norm.h"
#include "pdl.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::round_to;
using dtype::to_f;

constexpr int kThreads = 256;

using detail::block_sum;

template <typename T>
__device__ __forceinline__ float weight(const void* w, bool fp32, int64_t i) {
  return fp32 ? static_cast<const float*>(w)[i] : to_f<T>(static_cast<const T*>(w)[i]);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) rms_norm_residual_kernel(const RmsNormResidualArgs a) {
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.x, H = a.hidden;
  const T* y = static_cast<const T*>(a.y) + row * H;
  const T* res = static_cast<const T*>(a.residual) + row * H;
  T* out = static_cast<T*>(a.out) + row * H;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < H; i += kThreads) {
    const float v = to_f<T>(y[i]);
    ss = fmaf(v, v, ss);
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(H) + a.eps);
  float ss_out = 0.f;
  for (int64_t i = threadIdx.x; i < H; i += kThreads) {
    const float xn = to_f<T>(y[i]) * inv, w = weight<T>(a.w_post, a.w_post_fp32, i);
    // HF: fp32 weight (Gemma's 1 + w) scales before the cast; a dtype weight multiplies the cast.
    const float normed = a.w_post_fp32 ? round_to<T>(xn * w) : round_to<T>(w * round_to<T>(xn));
    const float o = round_to<T>(to_f<T>(res[i]) + normed);
    out[i] = from_f<T>(o);
    ss_out = fmaf(o, o, ss_out);
  }
  if (!a.w_next) return;
  const float total = block_sum(ss_out);
  if (threadIdx.x == 0) a.next_sumsq[row] = total;
  T* gx = static_cast<T*>(a.next_gx) + row * H;
  for (int64_t i = threadIdx.x; i < H; i += kThreads)
    gx[i] = from_f<T>(weight<T>(a.w_next, a.w_next_fp32, i) * to_f<T>(out[i]));
}

}  // namespace

cudaError_t rms_norm_residual(const RmsNormResidualArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.rows > 0x7fffffff || a.hidden <= 0 || !a.y || !a.w_post || !a.residual || !a.out ||
      !(a.eps >= 0.f) || (a.w_next && (!a.next_gx || !a.next_sumsq)))
    return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(a.rows));
  switch (a.dtype) {
    case DType::kFloat32:
      return launch_pdl(rms_norm_residual_kernel<float>, grid, kThreads, 0, stream, a);
    case DType::kBFloat16:
      return launch_pdl(rms_norm_residual_kernel<__nv_bfloat16>, grid, kThreads, 0, stream, a);
    case DType::kFloat16:
      return launch_pdl(rms_norm_residual_kernel<__half>, grid, kThreads, 0, stream, a);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
