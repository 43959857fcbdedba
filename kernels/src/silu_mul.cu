// SwiGLU activation out = silu(gate) * up (see mlp.h). Grid (column blocks, <= 65535 row lanes); each thread
// handles V = 8 consecutive columns of every gridDim.y-th row with 16-byte accesses (two for fp32), V = 1 fallback.
#include "dtype.cuh"
#include "kvscope/kernels/mlp.h"
#include "pdl.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::round_to;
using dtype::to_f;

constexpr int kThreads = 256;

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) silu_mul_kernel(const T* __restrict__ gu, int64_t gs, T* __restrict__ out,
                                                            int64_t os, int64_t rows, int64_t inter) {
  pdl_trigger();
  pdl_wait();
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V;
  if (c >= inter) return;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* g = gu + row * gs + c;
    const T* u = g + inter;
    T* o = out + row * os + c;
    constexpr int W = V * static_cast<int>(sizeof(T)) / 16;  // 16-byte words per vector (V == 8)
    if constexpr (V == 8) {
      uint4 gr[W], ur[W], orw[W];
#pragma unroll
      for (int i = 0; i < W; ++i) {
        gr[i] = __ldg(reinterpret_cast<const uint4*>(g) + i);
        ur[i] = __ldg(reinterpret_cast<const uint4*>(u) + i);
      }
      const T* ge = reinterpret_cast<const T*>(gr);
      const T* ue = reinterpret_cast<const T*>(ur);
      T* oe = reinterpret_cast<T*>(orw);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        oe[j] = from_f<T>(dtype::swiglu(to_f<T>(ge[j]), to_f<T>(ue[j])));
      }
#pragma unroll
      for (int i = 0; i < W; ++i) reinterpret_cast<uint4*>(o)[i] = orw[i];
    } else {
      o[0] = from_f<T>(dtype::swiglu(to_f<T>(g[0]), to_f<T>(u[0])));
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
cudaError_t launch(const void* gu, int64_t gs, void* out, int64_t os, int64_t rows, int64_t inter,
                   cudaStream_t stream) {
  const size_t es = sizeof(T);
  const bool vec = inter % 8 == 0 && aligned16(gu) && aligned16(out) && (gs * es) % 16 == 0 && (os * es) % 16 == 0 &&
                   (inter * es) % 16 == 0;
  const int64_t per_row = vec ? inter / 8 : inter;
  const dim3 grid(static_cast<unsigned>((per_row + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  const T* g = static_cast<const T*>(gu);
  T* o = static_cast<T*>(out);
  return vec ? launch_pdl(silu_mul_kernel<T, 8>, grid, kThreads, 0, stream, g, gs, o, os, rows, inter)
             : launch_pdl(silu_mul_kernel<T, 1>, grid, kThreads, 0, stream, g, gs, o, os, rows, inter);
}

}  // namespace

cudaError_t silu_mul(DType dtype, const void* gate_up, int64_t gu_stride, void* out, int64_t out_stride, int64_t rows,
                     int64_t inter, cudaStream_t stream) {
  if (rows < 0 || inter <= 0 || !gate_up || !out) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return launch<float>(gate_up, gu_stride, out, out_stride, rows, inter, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(gate_up, gu_stride, out, out_stride, rows, inter, stream);
    case DType::kFloat16:
      return launch<__half>(gate_up, gu_stride, out, out_stride, rows, inter, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
