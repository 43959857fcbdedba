// Gemma 2/3's sandwich norm closing a sublayer, with the next RMSNorm left pending (see norm.h:
// rms_norm_residual). One block of 1,024 threads per row; thread t holds elements t, t + 1,024, ..
// in registers (K of them, K = ceil(hidden / 1,024) <= 8), so the row is read once: every load of
// y and the residual is in flight before the first is used, and the two weights are loaded before
// the wait on the previous kernel (pdl.cuh). The op is latency-bound (a few thousand elements):
// what counts is one memory trip and two block reductions, not bandwidth.
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

constexpr int kThreads = 1024;

using detail::block_sum;

template <typename T>
__device__ __forceinline__ float weight(const void* w, bool fp32, int64_t i) {
  return fp32 ? static_cast<const float*>(w)[i] : to_f<T>(static_cast<const T*>(w)[i]);
}

template <typename T, int K>
__global__ void __launch_bounds__(kThreads) rms_norm_residual_kernel(const RmsNormResidualArgs a) {
  pdl_trigger();
  const int64_t row = blockIdx.x, H = a.hidden;
  float w_post[K], w_next[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {  // weights: written by no kernel, so before the wait
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    w_post[k] = i < H ? weight<T>(a.w_post, a.w_post_fp32, i) : 0.f;
    w_next[k] = i < H && a.w_next ? weight<T>(a.w_next, a.w_next_fp32, i) : 0.f;
  }
  pdl_wait();
  const T* y = static_cast<const T*>(a.y) + row * H;
  const T* res = static_cast<const T*>(a.residual) + row * H;
  float yv[K], rv[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    yv[k] = i < H ? to_f<T>(y[i]) : 0.f;
    rv[k] = i < H ? to_f<T>(res[i]) : 0.f;
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) ss = fmaf(yv[k], yv[k], ss);
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(H) + a.eps);
  T* out = static_cast<T*>(a.out) + row * H;
  float ss_out = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    const float xn = yv[k] * inv;
    // HF: fp32 weight (Gemma's 1 + w) scales before the cast; a dtype weight multiplies the cast.
    const float normed = a.w_post_fp32 ? round_to<T>(xn * w_post[k]) : round_to<T>(w_post[k] * round_to<T>(xn));
    const float o = i < H ? round_to<T>(rv[k] + normed) : 0.f;
    if (i < H) out[i] = from_f<T>(o);
    ss_out = fmaf(o, o, ss_out);
    rv[k] = o;
  }
  if (!a.w_next) return;
  const float total = block_sum(ss_out);
  if (threadIdx.x == 0) a.next_sumsq[row] = total;
  T* gx = static_cast<T*>(a.next_gx) + row * H;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < H) gx[i] = from_f<T>(w_next[k] * rv[k]);
  }
}

template <typename T>
cudaError_t launch(const RmsNormResidualArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.rows));
  const int64_t k = (a.hidden + kThreads - 1) / kThreads;
  if (k <= 1) return launch_pdl(rms_norm_residual_kernel<T, 1>, grid, kThreads, 0, stream, a);
  if (k <= 2) return launch_pdl(rms_norm_residual_kernel<T, 2>, grid, kThreads, 0, stream, a);
  if (k <= 4) return launch_pdl(rms_norm_residual_kernel<T, 4>, grid, kThreads, 0, stream, a);
  return launch_pdl(rms_norm_residual_kernel<T, 8>, grid, kThreads, 0, stream, a);
}

}  // namespace

cudaError_t rms_norm_residual(const RmsNormResidualArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.rows > 0x7fffffff || a.hidden <= 0 || a.hidden > kRmsNormResidualMaxHidden || !a.y || !a.w_post ||
      !a.residual || !a.out || !(a.eps >= 0.f) || (a.w_next && (!a.next_gx || !a.next_sumsq)))
    return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  switch (a.dtype) {
    case DType::kFloat32:
      return launch<float>(a, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(a, stream);
    case DType::kFloat16:
      return launch<__half>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
