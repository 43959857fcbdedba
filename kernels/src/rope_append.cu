// RoPE on one decode token's q and k, fused with the KV-cache append (see rope.h). A tiny,
// latency-bound op (a few thousand elements): what counts is the number of dependent memory trips.
// One block per KV head h (one block in all without KV heads); one warp per head of that block:
// the query heads h, h + Hkv, h + 2 Hkv, ..., then KV head h's key, then its value. A warp holds
// its head in registers (lane l: channels l, l + 32, .., head_dim <= 256), so a head is read once
// with every load in flight: with q/k norms it reduces the squares by shuffles and normalises in
// registers; the rotation's partner channel comes through the warp's slice of shared memory. The
// key also goes to its cache row, the value is copied to its own, then the position. Once every
// warp of the block has read length[h] (a block barrier), one thread advances it. Partial rotary:
// channels past rotary_dim pass unchanged (k to the cache too).
#include "dtype.cuh"
#include "kvscope/kernels/rope.h"
#include "pdl.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::round_to;
using dtype::to_f;

constexpr int kSlots = kRopeAppendMaxHeadDim / 32;  // channels per lane
constexpr int kMaxWarps = 16;

template <typename T, bool kPairs>
__global__ void __launch_bounds__(kMaxWarps * 32) rope_append_kernel(const RopeAppendArgs a) {
  extern __shared__ float s_head[];  // [warps][head_dim]: the normalised head, for the partner channel
  pdl_trigger();
  const int D = a.head_dim, R = a.rotary_dim > 0 ? a.rotary_dim : D, half = R / 2, hk = blockIdx.x, nb = gridDim.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const bool has_kv = a.n_head_kv > 0;
  const int q_heads = (a.n_head - hk + nb - 1) / nb;  // query heads hk, hk + nb, ...
  const int heads = q_heads + (has_kv ? 2 : 0);       // + the key and the value of KV head hk
  float w_q[kSlots], w_k[kSlots];                     // norm weights: no kernel writes them
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int d = lane + 32 * i;
    const bool on = a.q_norm && d < D;
    w_q[i] = !on           ? 1.f
             : a.norm_fp32 ? static_cast<const float*>(a.q_norm)[d]
                           : to_f<T>(static_cast<const T*>(a.q_norm)[d]);
    w_k[i] = !on           ? 1.f
             : a.norm_fp32 ? static_cast<const float*>(a.k_norm)[d]
                           : to_f<T>(static_cast<const T*>(a.k_norm)[d]);
  }
  pdl_wait();
  int64_t position = 0, row = 0, krow = 0, vrow = 0;
  if (has_kv) {
    position = a.position_dev ? *a.position_dev : a.position;
    const int64_t len = a.length[hk];
    row = a.offset[hk] + (a.ring > 0 ? position % a.ring : len);
    krow = a.k_offset ? a.k_offset[hk] + len : row;  // compact keys: K in its own layout
    vrow = a.v_offset ? a.v_offset[hk] + len : row;  // compact values: V in its own layout
  }
  float* s = s_head + warp * D;
  for (int local = warp; local < heads; local += warps) {
    if (local == q_heads + 1) {  // the value: copied to its cache row, then the row's position
      const T* v = static_cast<const T*>(a.v) + static_cast<int64_t>(hk) * a.v_stride;
      T* vr = static_cast<T*>(a.v_cache) + vrow * D;
      T x[kSlots];
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        if (lane + 32 * i < D) x[i] = v[lane + 32 * i];
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        if (lane + 32 * i < D) vr[lane + 32 * i] = x[i];
      if (lane == 0 && a.pos) a.pos[row] = position;
      continue;
    }
    const bool is_q = local < q_heads;
    T* x = is_q ? static_cast<T*>(a.q) + static_cast<int64_t>(hk + local * nb) * a.q_stride
                : static_cast<T*>(a.k) + static_cast<int64_t>(hk) * a.k_stride;
    float xv[kSlots], c[kSlots], sn[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int d = lane + 32 * i, j = kPairs ? d / 2 : d % half;
      xv[i] = d < D ? to_f<T>(x[d]) : 0.f;
      c[i] = d < R ? to_f<T>(static_cast<const T*>(a.cos)[j]) : 1.f;
      sn[i] = d < R ? to_f<T>(static_cast<const T*>(a.sin)[j]) : 0.f;
    }
    if (a.q_norm) {  // Qwen3 / Gemma 3: RMSNorm over the head, rounded to dtype as HF's output is
      float ss = 0.f;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) ss = fmaf(xv[i], xv[i], ss);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
      const float r = rsqrtf(ss / static_cast<float>(D) + a.norm_eps);
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const float xn = xv[i] * r, w = is_q ? w_q[i] : w_k[i];
        xv[i] = a.norm_fp32 ? round_to<T>(xn * w) : round_to<T>(w * round_to<T>(xn));
      }
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + 32 * i < D) s[lane + 32 * i] = xv[i];
    __syncwarp();
    T* kr = static_cast<T*>(a.k_cache) + krow * D;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int d = lane + 32 * i;
      if (d >= D) continue;
      float y = xv[i];
      if (d < R) {  // the pair's first channel: x0 c - x1 s; its second: x1 c + x0 s
        const bool first = kPairs ? d % 2 == 0 : d < half;
        const float other = s[kPairs ? d ^ 1 : first ? d + half : d - half];
        y = first ? xv[i] * c[i] - other * sn[i] : xv[i] * c[i] + other * sn[i];
      }
      const T t = from_f<T>(y);
      x[d] = t;
      if (!is_q) kr[d] = t;
    }
    __syncwarp();  // the slice is rewritten by the warp's next head
  }
  if (!has_kv) return;
  __syncthreads();  // every read of length[hk] is done
  if (threadIdx.x == 0) {
    const int64_t n = a.length[hk] + 1;
    a.length[hk] = a.ring > 0 && n > a.ring ? a.ring : n;
  }
}

template <typename T>
cudaError_t launch(const RopeAppendArgs& a, cudaStream_t stream) {
  const int blocks = a.n_head_kv > 0 ? a.n_head_kv : 1;
  const int heads = (a.n_head + blocks - 1) / blocks + (a.n_head_kv > 0 ? 2 : 0);
  const int warps = heads < kMaxWarps ? heads : kMaxWarps;
  const size_t smem = static_cast<size_t>(warps) * a.head_dim * sizeof(float);
  return a.mode == RopeMode::kAdjacentPairs
             ? launch_pdl(rope_append_kernel<T, true>, blocks, warps * 32, smem, stream, a)
             : launch_pdl(rope_append_kernel<T, false>, blocks, warps * 32, smem, stream, a);
}

}  // namespace

cudaError_t rope_append(const RopeAppendArgs& a, cudaStream_t stream) {
  if (a.n_head < 0 || a.n_head_kv < 0 || a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > kRopeAppendMaxHeadDim)
    return cudaErrorInvalidValue;
  if (a.rotary_dim < 0 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim || a.ring < 0 || !(a.norm_eps >= 0.f) ||
      (a.q_norm == nullptr) != (a.k_norm == nullptr))
    return cudaErrorInvalidValue;
  if ((a.n_head > 0 && !a.q) ||
      (a.n_head_kv > 0 && (!a.k || !a.v || !a.k_cache || !a.v_cache || !a.offset || !a.length)))
    return cudaErrorInvalidValue;
  if (!a.cos || !a.sin) return cudaErrorInvalidValue;
  if (a.mode != RopeMode::kRotateHalf && a.mode != RopeMode::kAdjacentPairs) return cudaErrorInvalidValue;
  if (a.n_head + a.n_head_kv == 0) return cudaSuccess;
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
