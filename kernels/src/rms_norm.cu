// RMSNorm (see norm.h): the decode step's first attention norm and the eager paths' (the others
// are folded into the projections: gemv.h, norm_sumsq). One block per row; each thread handles
// V-element vectors (V = 8: one 16-byte load for bf16/fp16, two for fp32; V = 1 fallback). Two
// passes over the row: sum of squares (block reduction), then normalise; the second read hits
// L1/L2 (a row is at most a few tens of KB).
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

/// Loads V elements of T as fp32 (V = 8 uses 16-byte accesses; p must then be 16-byte aligned).
/// Plain (coherent) loads: y may alias x.
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[V]) {
  if constexpr (V == 8) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
    uint4 raw[sizeof(T) == 4 ? 2 : 1];
    raw[0] = q[0];
    if constexpr (sizeof(T) == 4) raw[1] = q[1];
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = to_f<T>(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = to_f<T>(p[j]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[V]) {
  if constexpr (V == 8) {
    uint4 raw[sizeof(T) == 4 ? 2 : 1];
    T* e = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) e[j] = from_f<T>(f[j]);
    uint4* q = reinterpret_cast<uint4*>(p);
    q[0] = raw[0];
    if constexpr (sizeof(T) == 4) q[1] = raw[1];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_f<T>(f[j]);
  }
}

using detail::block_sum;

template <typename T, int V>
__global__ void rms_norm_kernel(const T* x, int64_t xs, const T* __restrict__ w, T* y, int64_t ys, int hidden,
                                float eps) {
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const T* xr = x + row * xs;
  T* yr = y + row * ys;
  const int nvec = hidden / V;
  float ss = 0.f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    float f[V];
    load_vec<T, V>(xr + i * V, f);
#pragma unroll
    for (int j = 0; j < V; ++j) ss = fmaf(f[j], f[j], ss);
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    float f[V], g[V];
    load_vec<T, V>(xr + i * V, f);
    load_vec<T, V>(w + i * V, g);
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = g[j] * round_to<T>(f[j] * inv);
    store_vec<T, V>(yr + i * V, f);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
cudaError_t launch(const void* x, int64_t xs, const void* w, void* y, int64_t ys, int64_t rows, int64_t hidden,
                   float eps, cudaStream_t stream) {
  const size_t es = sizeof(T);
  const bool vec =
      hidden % 8 == 0 && aligned16(x) && aligned16(w) && aligned16(y) && (xs * es) % 16 == 0 && (ys * es) % 16 == 0;
  const int64_t nvec = vec ? hidden / 8 : hidden;
  int threads = static_cast<int>(nvec < 1024 ? (nvec + 31) / 32 * 32 : 1024);
  if (threads < 32) threads = 32;
  const dim3 grid(static_cast<unsigned>(rows));
  const T* xp = static_cast<const T*>(x);
  const T* wp = static_cast<const T*>(w);
  T* yp = static_cast<T*>(y);
  const int h = static_cast<int>(hidden);
  return vec ? launch_pdl(rms_norm_kernel<T, 8>, grid, threads, 0, stream, xp, xs, wp, yp, ys, h, eps)
             : launch_pdl(rms_norm_kernel<T, 1>, grid, threads, 0, stream, xp, xs, wp, yp, ys, h, eps);
}

}  // namespace

cudaError_t rms_norm(DType dtype, const void* x, int64_t x_stride, const void* w, void* y, int64_t y_stride,
                     int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  if (rows < 0 || rows > 0x7fffffff || hidden <= 0 || hidden > (1 << 24) || !x || !w || !y)
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return launch<float>(x, x_stride, w, y, y_stride, rows, hidden, eps, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(x, x_stride, w, y, y_stride, rows, hidden, eps, stream);
    case DType::kFloat16:
      return launch<__half>(x, x_stride, w, y, y_stride, rows, hidden, eps, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
