// RoPE on one decode token's q and k, fused with the KV-cache append (see rope.h). A tiny,
// latency-bound op (a few thousand elements). One block per KV head h (one block in all without
// KV heads) runs over three kinds of items:
//   rotation pairs of the query heads h, h + Hkv, h + 2 Hkv, ... and of KV head h (D/2 each); the
//   KV head also writes its rotated pair to the cache row
//   V elements of head h copied to the cache row, then the position of the row
// and, once every thread of the block has read length[h], advances it by one: the head's items all
// live in its block, so a block barrier orders that write after the reads. With per-head q/k norms
// a first phase normalises each head in place (one warp a head, a shuffle reduction), then a block
// barrier. Partial rotary: channels past rotary_dim are copied (k to the cache) unchanged.
// Accesses are coalesced across threads; nothing is reused, so no vectorisation.
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

constexpr int kThreads = 256;

/// RMSNorm of one head of D channels in place by one warp (rope.h: q_norm / k_norm).
template <typename T>
__device__ __forceinline__ void norm_head(T* x, int D, const void* w, bool w_fp32, float eps, int lane) {
  float ss = 0.f;
  for (int d = lane; d < D; d += 32) {
    const float v = to_f<T>(x[d]);
    ss = fmaf(v, v, ss);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float r = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int d = lane; d < D; d += 32) {
    const float xn = to_f<T>(x[d]) * r;
    x[d] = w_fp32 ? from_f<T>(xn * static_cast<const float*>(w)[d])
                  : from_f<T>(to_f<T>(static_cast<const T*>(w)[d]) * round_to<T>(xn));
  }
}

template <typename T, bool kPairs>
__global__ void __launch_bounds__(kThreads) rope_append_kernel(const RopeAppendArgs a) {
  pdl_trigger();
  pdl_wait();
  const int D = a.head_dim, R = a.rotary_dim > 0 ? a.rotary_dim : D, half = R / 2, hk = blockIdx.x, nb = gridDim.x;
  const bool has_kv = a.n_head_kv > 0;
  const int q_heads = (a.n_head - hk + nb - 1) / nb;  // query heads hk, hk + nb, ...
  auto head_ptr = [&](int local) -> T* {              // local < q_heads: a query head; q_heads: KV head hk
    return local < q_heads ? static_cast<T*>(a.q) + static_cast<int64_t>(hk + local * nb) * a.q_stride
                           : static_cast<T*>(a.k) + static_cast<int64_t>(hk) * a.k_stride;
  };
  if (a.q_norm) {  // phase 1: per-head RMSNorm of q and k (Qwen3, Gemma 3), one warp a head
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, heads = q_heads + (has_kv ? 1 : 0);
    for (int local = warp; local < heads; local += kThreads / 32)
      norm_head<T>(head_ptr(local), D, local < q_heads ? a.q_norm : a.k_norm, a.norm_fp32, a.norm_eps, lane);
    __syncthreads();
  }
  const int64_t n_pairs = static_cast<int64_t>(q_heads + (has_kv ? 1 : 0)) * half;
  const int pass = D - R;  // k channels past the rotary ones, copied as they are
  const int64_t total = n_pairs + (has_kv ? pass + D + 1 : 0);
  int64_t position = 0, row = 0, krow = 0, vrow = 0;
  if (has_kv) {
    position = a.position_dev ? *a.position_dev : a.position;
    row = a.offset[hk] + (a.ring > 0 ? position % a.ring : a.length[hk]);
    krow = a.k_offset ? a.k_offset[hk] + a.length[hk] : row;  // compact keys: K in its own layout
    vrow = a.v_offset ? a.v_offset[hk] + a.length[hk] : row;  // compact values: V in its own layout
  }
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  for (int64_t i = threadIdx.x; i < total; i += kThreads) {
    if (i < n_pairs) {
      const int local = static_cast<int>(i / half), j = static_cast<int>(i % half);
      const bool is_q = local < q_heads;
      T* x = head_ptr(local);
      const int i0 = kPairs ? 2 * j : j, i1 = kPairs ? 2 * j + 1 : j + half;
      const float c = to_f<T>(cs[j]), s = to_f<T>(sn[j]);
      const float x0 = to_f<T>(x[i0]), x1 = to_f<T>(x[i1]);
      const T y0 = from_f<T>(x0 * c - x1 * s), y1 = from_f<T>(x1 * c + x0 * s);
      x[i0] = y0;
      x[i1] = y1;
      if (!is_q) {
        T* kr = static_cast<T*>(a.k_cache) + krow * D;
        kr[i0] = y0;
        kr[i1] = y1;
      }
    } else if (i < n_pairs + pass) {
      const int d = R + static_cast<int>(i - n_pairs);
      static_cast<T*>(a.k_cache)[krow * D + d] =
          (static_cast<const T*>(a.k) + static_cast<int64_t>(hk) * a.k_stride)[d];
    } else if (i < n_pairs + pass + D) {
      const int d = static_cast<int>(i - n_pairs - pass);
      static_cast<T*>(a.v_cache)[vrow * D + d] =
          (static_cast<const T*>(a.v) + static_cast<int64_t>(hk) * a.v_stride)[d];
    } else if (a.pos) {
      a.pos[row] = position;
    }
  }
  if (!has_kv) return;
  __syncthreads();  // every read of length[hk] (row) is done
  if (threadIdx.x == 0) {
    const int64_t n = a.length[hk] + 1;
    a.length[hk] = a.ring > 0 && n > a.ring ? a.ring : n;
  }
}

template <typename T>
cudaError_t launch(const RopeAppendArgs& a, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(a.n_head_kv > 0 ? a.n_head_kv : 1);
  return a.mode == RopeMode::kAdjacentPairs ? launch_pdl(rope_append_kernel<T, true>, blocks, kThreads, 0, stream, a)
                                            : launch_pdl(rope_append_kernel<T, false>, blocks, kThreads, 0, stream, a);
}

}  // namespace

cudaError_t rope_append(const RopeAppendArgs& a, cudaStream_t stream) {
  if (a.n_head < 0 || a.n_head_kv < 0 || a.head_dim <= 0 || a.head_dim % 2 != 0) return cudaErrorInvalidValue;
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
