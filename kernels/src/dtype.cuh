#pragma once
// fp32 <-> storage dtype conversions shared by the kernels (internal to kvscope_kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvscope::kernels::dtype {

template <typename T>
__device__ __forceinline__ float to_f(T x);
template <>
__device__ __forceinline__ float to_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f<__half>(__half x) {
  return __half2float(x);
}
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f<__half>(float x) {
  return __float2half_rn(x);
}
/// x rounded to T and back (the value a dtype tensor would hold).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f<T>(from_f<T>(x));
}

/// SwiGLU of one gate / up pair in fp32: silu(gate) * up = gate / (1 + e^-gate) * up (the Llama
/// MLP's activation; silu_mul.cu and the GEMVs' fused epilogue share it).
__device__ __forceinline__ float swiglu(float gate, float up) { return gate / (1.f + __expf(-gate)) * up; }

/// GeGLU of one gate / up pair in fp32: gelu_tanh(gate) * up, gelu_tanh(x) = x / 2 (1 + tanh(sqrt(2/pi)
/// (x + 0.044715 x³))) (Gemma 2/3's gelu_pytorch_tanh; Shazeer 2020, GLU variants).
__device__ __forceinline__ float geglu(float gate, float up) {
  const float inner = 0.7978845608028654f * fmaf(0.044715f * gate, gate * gate, gate);
  return 0.5f * gate * (1.f + tanhf(inner)) * up;
}

}  // namespace kvscope::kernels::dtype
