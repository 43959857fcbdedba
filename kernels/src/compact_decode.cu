// Split-K decode attention over compact (channel-pruned) keys; see compact_decode.h.
//
// Pass 1 (compact_split_kernel): grid (n_split, n_head_kv), 4 warps a block. A warp takes one entry
// at a time; lane l holds channels j = l + 32 c (c < C = D / 32) of the key and value rows. For a
// compact entry the lane finds its channel's bit in 32-bit words of the kept row: the rank of a
// kept channel is the popcount of the lower bits (and of the earlier words); a pruned channel's
// rank among the pruned ones is j minus that, which indexes its sign bit. The G query heads'
// logits are warp sums; each warp keeps an online softmax per query head, and the block merges its
// warps through shared memory into one fp32 partial (max, sum, acc[D]) per query head and split.
// Pass 2 (combine_kernel): one block per query head merges the splits.
#include "dtype.cuh"
#include "kvscope/kernels/compact_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kvscope::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroup = 8;
constexpr int kMinChunk = 128;
constexpr int kMaxSplit = 256;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <typename T, int C>
__global__ void __launch_bounds__(kThreads) compact_split_kernel(const CompactDecodeArgs a, int64_t chunk, int n_split,
                                                                 float* ws) {
  constexpr int D = C * 32;
  __shared__ float s_m[kWarps][kMaxGroup], s_l[kWarps][kMaxGroup];
  __shared__ float s_acc[kWarps][kMaxGroup][D];
  const int h = blockIdx.y, split = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = a.group;
  const int64_t len = a.length[h], nc = a.n_compact ? a.n_compact[h] : 0;
  const int64_t begin = static_cast<int64_t>(split) * chunk, end = min(len, begin + chunk);
  const T* Q = static_cast<const T*>(a.q);
  const T* K = static_cast<const T*>(a.k);
  const T* V = static_cast<const T*>(a.v);
  float q[kMaxGroup][C], m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][C];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      acc[g][c] = 0.f;
      q[g][c] = g < G ? dtype::to_f<T>(Q[static_cast<int64_t>(h * G + g) * a.q_stride + c * 32 + lane]) * a.softmax_scale
                      : 0.f;
    }
  }
  const uint8_t* kept = nc > 0 ? reinterpret_cast<const uint8_t*>(a.kept[h]) : nullptr;
  const T* vals = nc > 0 ? reinterpret_cast<const T*>(a.values[h]) : nullptr;
  const uint8_t* sign = nc > 0 && a.sign ? reinterpret_cast<const uint8_t*>(a.sign[h]) : nullptr;
  const float* scale = sign ? reinterpret_cast<const float*>(a.scale[h]) : nullptr;
  const float* inv_a = sign ? reinterpret_cast<const float*>(a.inv_a[h]) : nullptr;
  const unsigned below = (1u << lane) - 1u;
  for (int64_t t = begin + warp; t < end; t += kWarps) {
    float kv[C], vv[C];
    if (t < nc) {
      const uint32_t* bits = reinterpret_cast<const uint32_t*>(kept + t * a.kept_row_bytes);
      const T* row = vals + t * a.stride;
      int prefix = 0;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const uint32_t w = bits[c];
        const int rank = prefix + __popc(w & below);
        prefix += __popc(w);
        if ((w >> lane) & 1u) {
          kv[c] = dtype::to_f<T>(row[rank]);
        } else if (sign) {
          const int p = c * 32 + lane - rank;  // pruned channels below this one
          const bool neg = (sign[t * a.sign_bytes + (p >> 3)] >> (p & 7)) & 1;
          const float mag = scale[t] * inv_a[c * 32 + lane];
          kv[c] = dtype::round_to<T>(neg ? -mag : mag);
        } else {
          kv[c] = 0.f;
        }
      }
    } else {
      const T* row = K + (a.k_offset[h] + t) * D;
#pragma unroll
      for (int c = 0; c < C; ++c) kv[c] = dtype::to_f<T>(row[c * 32 + lane]);
    }
    const T* vrow = V + (a.offset[h] + t) * D;
#pragma unroll
    for (int c = 0; c < C; ++c) vv[c] = dtype::to_f<T>(vrow[c * 32 + lane]);
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < C; ++c) s = fmaf(q[g][c], kv[c], s);
      s = warp_sum(s);
      const float mn = fmaxf(m[g], s), corr = __expf(m[g] - mn), e = __expf(s - mn);
      l[g] = l[g] * corr + e;
#pragma unroll
      for (int c = 0; c < C; ++c) acc[g][c] = fmaf(acc[g][c], corr, e * vv[c]);
      m[g] = mn;
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    if (lane == 0) {
      s_m[warp][g] = m[g];
      s_l[warp][g] = l[g];
    }
#pragma unroll
    for (int c = 0; c < C; ++c) s_acc[warp][g][c * 32 + lane] = acc[g][c];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int g = i / D, j = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w][g]);
    float L = 0.f, A = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = __expf(s_m[w][g] - M);
        L += s_l[w][g] * f;
        A += s_acc[w][g][j] * f;
      }
    }
    float* out = ws + (static_cast<int64_t>(h * G + g) * n_split + split) * (D + 2);
    out[j] = A;
    if (j == 0) {
      out[D] = M;
      out[D + 1] = L;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) combine_kernel(const CompactDecodeArgs a, int n_split, const float* ws) {
  const int i = blockIdx.x, D = a.head_dim;
  const float* part = ws + static_cast<int64_t>(i) * n_split * (D + 2);
  float M = -INFINITY;
  for (int s = 0; s < n_split; ++s) M = fmaxf(M, part[s * (D + 2) + D]);
  for (int j = threadIdx.x; j < D; j += kThreads) {
    float L = 0.f, A = 0.f;
    if (M != -INFINITY)
      for (int s = 0; s < n_split; ++s) {
        const float* p = part + s * (D + 2);
        const float f = __expf(p[D] - M);
        L += p[D + 1] * f;
        A += p[j] * f;
      }
    static_cast<T*>(a.o)[static_cast<int64_t>(i) * D + j] = dtype::from_f<T>(L > 0.f ? A / L : 0.f);
  }
}

template <typename T, int C>
cudaError_t launch_typed(const CompactDecodeArgs& a, const CompactDecodePlan& p, float* ws, cudaStream_t stream) {
  compact_split_kernel<T, C><<<dim3(p.n_split, a.n_head_kv), kThreads, 0, stream>>>(a, p.chunk, p.n_split, ws);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  combine_kernel<T><<<a.n_head, kThreads, 0, stream>>>(a, p.n_split, ws);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_d(const CompactDecodeArgs& a, const CompactDecodePlan& p, float* ws, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      return launch_typed<T, 2>(a, p, ws, stream);
    case 96:
      return launch_typed<T, 3>(a, p, ws, stream);
    case 128:
      return launch_typed<T, 4>(a, p, ws, stream);
    case 256:
      return launch_typed<T, 8>(a, p, ws, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

bool compact_decode_head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

CompactDecodePlan plan_compact_decode(int n_head, int head_dim, int64_t max_len) {
  CompactDecodePlan p;
  const int64_t len = std::max<int64_t>(max_len, 1);
  p.n_split = static_cast<int>(std::min<int64_t>(kMaxSplit, (len + kMinChunk - 1) / kMinChunk));
  p.chunk = (len + p.n_split - 1) / p.n_split;
  p.workspace_bytes = static_cast<size_t>(n_head) * p.n_split * (head_dim + 2) * sizeof(float);
  return p;
}

cudaError_t compact_decode_attention(const CompactDecodeArgs& a, const CompactDecodePlan& p, void* workspace,
                                     cudaStream_t stream) {
  if (!compact_decode_head_dim_supported(a.head_dim) || a.group < 1 || a.group > kMaxGroup ||
      a.n_head != a.n_head_kv * a.group || a.n_head_kv < 1 || a.n_head_kv > 65535 || !a.q || !a.k || !a.v ||
      !a.o || !a.offset || !a.k_offset || !a.length || p.n_split < 1 || p.chunk < 1 || !workspace ||
      (a.n_compact && (!a.kept || !a.values)) || (a.sign && (!a.scale || !a.inv_a)))
    return cudaErrorInvalidValue;
  float* ws = static_cast<float*>(workspace);
  switch (a.dtype) {
    case DType::kFloat32:
      return launch_d<float>(a, p, ws, stream);
    case DType::kBFloat16:
      return launch_d<__nv_bfloat16>(a, p, ws, stream);
    case DType::kFloat16:
      return launch_d<__half>(a, p, ws, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
