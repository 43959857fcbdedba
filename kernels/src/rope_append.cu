// RoPE on one decode token's q and k, fused with the KV-cache append (see rope.h). A tiny,
// latency-bound op (a few thousand elements): one grid-stride launch over three kinds of items,
//   [0, P)            rotation pairs: (n_head + n_head_kv) heads x D/2 pairs; KV heads also
//                     write the rotated pair to the cache row
//   [P, P + Hkv*D)    V elements copied to the cache row
//   [.., .. + Hkv)    the position of the cache row
// Accesses are coalesced across threads; nothing is reused, so no vectorisation.
#include "dtype.cuh"
#include "kvscope/kernels/rope.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::round_to;
using dtype::to_f;

constexpr int kThreads = 256;

template <typename T, bool kPairs>
__global__ void __launch_bounds__(kThreads) rope_append_kernel(const RopeAppendArgs a) {
  const int D = a.head_dim, half = D / 2;
  const int64_t n_pairs = static_cast<int64_t>(a.n_head + a.n_head_kv) * half;
  const int64_t n_v = static_cast<int64_t>(a.n_head_kv) * D;
  const int64_t total = n_pairs + n_v + a.n_head_kv;
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < n_pairs) {
      const int head = static_cast<int>(i / half), j = static_cast<int>(i % half);
      const bool is_q = head < a.n_head;
      const int hk = head - a.n_head;
      T* x = is_q ? static_cast<T*>(a.q) + head * a.q_stride : static_cast<T*>(a.k) + hk * a.k_stride;
      const int i0 = kPairs ? 2 * j : j, i1 = kPairs ? 2 * j + 1 : j + half;
      const float c = to_f<T>(cs[j]), s = to_f<T>(sn[j]);
      const float x0 = to_f<T>(x[i0]), x1 = to_f<T>(x[i1]);
      const T y0 = from_f<T>(x0 * c - x1 * s), y1 = from_f<T>(x1 * c + x0 * s);
      x[i0] = y0;
      x[i1] = y1;
      if (!is_q) {
        T* row = static_cast<T*>(a.k_cache) + (a.offset[hk] + a.length[hk]) * D;
        row[i0] = y0;
        row[i1] = y1;
      }
    } else if (i < n_pairs + n_v) {
      const int64_t e = i - n_pairs;
      const int hk = static_cast<int>(e / D), d = static_cast<int>(e % D);
      const T* v = static_cast<const T*>(a.v) + hk * a.v_stride;
      static_cast<T*>(a.v_cache)[(a.offset[hk] + a.length[hk]) * D + d] = v[d];
    } else {
      const int hk = static_cast<int>(i - n_pairs - n_v);
      if (a.pos) a.pos[a.offset[hk] + a.length[hk]] = a.position_dev ? *a.position_dev : a.position;
    }
  }
}

template <typename T>
cudaError_t launch(const RopeAppendArgs& a, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(a.n_head + a.n_head_kv) * (a.head_dim / 2) +
                        static_cast<int64_t>(a.n_head_kv) * a.head_dim + a.n_head_kv;
  const int64_t blocks64 = (total + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(blocks64 < 1024 ? blocks64 : 1024);
  if (a.mode == RopeMode::kAdjacentPairs) rope_append_kernel<T, true><<<blocks, kThreads, 0, stream>>>(a);
  else rope_append_kernel<T, false><<<blocks, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rope_append(const RopeAppendArgs& a, cudaStream_t stream) {
  if (a.n_head < 0 || a.n_head_kv < 0 || a.head_dim <= 0 || a.head_dim % 2 != 0) return cudaErrorInvalidValue;
  if ((a.n_head > 0 && !a.q) || (a.n_head_kv > 0 && (!a.k || !a.v || !a.k_cache || !a.v_cache || !a.offset || !a.length)))
    return cudaErrorInvalidValue;
  if (!a.cos || !a.sin) return cudaErrorInvalidValue;
  if (a.mode != RopeMode::kRotateHalf && a.mode != RopeMode::kAdjacentPairs) return cudaErrorInvalidValue;
  if (a.n_head + a.n_head_kv == 0) return cudaSuccess;
  switch (a.dtype) {
    case DType::kFloat32: return launch<float>(a, stream);
    case DType::kBFloat16: return launch<__nv_bfloat16>(a, stream);
    case DType::kFloat16: return launch<__half>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
