// Split-K decode attention over compact (channel-pruned) keys; see compact_decode.h.
//
// Pass 1 (compact_split_kernel): grid (n_split, n_head_kv), 4 warps a block. A warp takes U entries
// at a time (their loads in flight together); lane l holds channels j = l + 32 c (c < C = D / 32)
// of the key and value rows. For a
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
constexpr int kMaxGroupSize = 8;
constexpr int kMinChunk = 16;
constexpr int kMaxSplit = 256;
constexpr int kTargetBlocks = 1056;  // eight blocks per SM of an H100 / H200

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// Entry u of a warp's group: its key channels (recovered) and value channels, fp32.
template <typename T, int C>
struct EntryRegs {
  float k[C], v[C];
};

template <typename T, int C, int U, int GT, bool kIdx>
__global__ void __launch_bounds__(kThreads)
    compact_split_kernel(const CompactDecodeArgs a, int64_t chunk, int n_split, float* ws) {
  constexpr int D = C * 32, kMaxGroup = GT;  // GT: the group size rounded up to 1, 2, 4 or 8 (registers)
  __shared__ float s_m[kWarps][kMaxGroup], s_l[kWarps][kMaxGroup];
  __shared__ float s_acc[kWarps][kMaxGroup][D];
  __shared__ int s_read[kWarps];
  const int h = blockIdx.y, split = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = a.group;
  // Positions [begin, end) of the split: entries themselves, or slots of the head's index.
  const int32_t* idx = kIdx ? a.index + static_cast<int64_t>(h) * a.index_stride : nullptr;
  const int64_t len = kIdx ? min(a.count[h], a.index_stride) : a.length[h], nc = a.n_compact ? a.n_compact[h] : 0;
  int n_read = 0;  // compact entries this warp attended (lane 0)
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
      q[g][c] = g < G
                    ? dtype::to_f<T>(Q[static_cast<int64_t>(h * G + g) * a.q_stride + c * 32 + lane]) * a.softmax_scale
                    : 0.f;
    }
  }
  const uint8_t* kept = nc > 0 ? reinterpret_cast<const uint8_t*>(a.kept[h]) : nullptr;
  const T* vals = nc > 0 ? reinterpret_cast<const T*>(a.values[h]) : nullptr;
  const uint8_t* sign = nc > 0 && a.sign ? reinterpret_cast<const uint8_t*>(a.sign[h]) : nullptr;
  const float* scale = sign ? reinterpret_cast<const float*>(a.scale[h]) : nullptr;
  const float* inv_a = sign ? reinterpret_cast<const float*>(a.inv_a[h]) : nullptr;
  const uint8_t* vkept = nc > 0 && a.v_kept ? reinterpret_cast<const uint8_t*>(a.v_kept[h]) : nullptr;
  const T* vvals = vkept ? reinterpret_cast<const T*>(a.v_values[h]) : nullptr;
  const int64_t v_row_bytes = (D + 7) / 8;
  const int64_t k_base = a.k_offset[h], v_base = a.offset[h];
  const unsigned below = (1u << lane) - 1u;
  float ia[C];  // SPARK's 1/a of this lane's channels (one per head)
#pragma unroll
  for (int c = 0; c < C; ++c) ia[c] = sign ? inv_a[c * 32 + lane] : 0.f;
  // A warp takes U entries at a time, t, t + kWarps, ...: every load of a round is issued before
  // any is used (raw registers, converted after), so a round costs two dependent memory trips.
  for (int64_t t0 = begin + warp; t0 < end; t0 += kWarps * U) {
    T kraw[U][C], vraw[U][C];
    uint32_t bits[U][C], vbits[U][C];
    uint8_t sb[U][C];
    float sc[U];
#pragma unroll
    int64_t ts[U];  // the entries of the round (past the split: any live one, weight 0 below)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = min(t0 + u * kWarps, end - 1);
      ts[u] = kIdx ? idx[i] : i;
      if (kIdx && lane == 0 && t0 + u * kWarps < end && ts[u] < nc) ++n_read;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {  // round 1: kept bits (or dense keys), values, μ
      const int64_t t = ts[u];
      if (vkept && t < nc) {  // compact values: their kept bits now, the values in round 2
        const uint32_t* b = reinterpret_cast<const uint32_t*>(vkept + t * v_row_bytes);
#pragma unroll
        for (int c = 0; c < C; ++c) vbits[u][c] = b[c];
      } else {
        const T* vrow = V + (v_base + t) * D;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          vraw[u][c] = vrow[c * 32 + lane];
          vbits[u][c] = 0xffffffffu;
        }
      }
      if (t < nc) {
        const uint32_t* b = reinterpret_cast<const uint32_t*>(kept + t * a.kept_row_bytes);
#pragma unroll
        for (int c = 0; c < C; ++c) bits[u][c] = b[c];
        sc[u] = sign ? scale[t] : 0.f;
      } else {
        const T* row = K + (k_base + t) * D;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          kraw[u][c] = row[c * 32 + lane];
          bits[u][c] = 0xffffffffu;
        }
        sc[u] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {  // round 2 (compact entries): the kept values and sign bytes
      const int64_t t = ts[u];
      if (t >= nc) continue;
      const T* row = vals + t * a.stride;
      const uint8_t* srow = sign && a.sign_bytes > 0 ? sign + t * a.sign_bytes : nullptr;
      int prefix = 0;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const uint32_t w = bits[u][c];
        const int rank = prefix + __popc(w & below);
        prefix += __popc(w);
        const bool on = (w >> lane) & 1u;
        kraw[u][c] = a.stride > 0 ? row[on ? rank : 0] : dtype::from_f<T>(0.f);
        const int p = on ? 0 : c * 32 + lane - rank;  // pruned channels below this one
        sb[u][c] = srow ? static_cast<uint8_t>(srow[p >> 3] >> (p & 7)) : 0;
      }
      if (vkept) {
        const T* vr = vvals + t * a.v_stride;
        int vprefix = 0;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const uint32_t w = vbits[u][c];
          const int rank = vprefix + __popc(w & below);
          vprefix += __popc(w);
          vraw[u][c] = a.v_stride > 0 && ((w >> lane) & 1u) ? vr[rank] : dtype::from_f<T>(0.f);
        }
      }
    }
    EntryRegs<T, C> e[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t t = ts[u];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        e[u].v[c] = dtype::to_f<T>(vraw[u][c]);
        const bool on = (bits[u][c] >> lane) & 1u;
        if (on || t >= nc) {
          e[u].k[c] = dtype::to_f<T>(kraw[u][c]);
        } else if (sign) {
          const float mag = sc[u] * ia[c];
          e[u].k[c] = dtype::round_to<T>((sb[u][c] & 1) ? -mag : mag);
        } else {
          e[u].k[c] = 0.f;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
      float s[U];
      float mn = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float x = 0.f;
#pragma unroll
        for (int c = 0; c < C; ++c) x = fmaf(q[g][c], e[u].k[c], x);
        x = warp_sum(x);
        s[u] = t0 + u * kWarps < end ? x : -INFINITY;
        mn = fmaxf(mn, s[u]);
      }
      const float corr = __expf(m[g] - mn);
      l[g] *= corr;
#pragma unroll
      for (int c = 0; c < C; ++c) acc[g][c] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = __expf(s[u] - mn);
        l[g] += p;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[g][c] = fmaf(p, e[u].v[c], acc[g][c]);
      }
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
  if (kIdx && lane == 0) s_read[warp] = n_read;
  __syncthreads();
  if (kIdx && a.compact_read && threadIdx.x == 0) {
    int n = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) n += s_read[w];
    reinterpret_cast<int*>(ws + static_cast<int64_t>(a.n_head) * n_split * (D + 2))[h * n_split + split] = n;
  }
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
  // Block i merges query head i's splits: the weights exp(m_s - M) in shared memory, then each
  // thread sums its channels over the splits (independent loads).
  __shared__ float s_w[kMaxSplit], s_red[kThreads / 32];
  const int i = blockIdx.x, D = a.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* part = ws + static_cast<int64_t>(i) * n_split * (D + 2);
  float M = -INFINITY;
  for (int s = threadIdx.x; s < n_split; s += kThreads) M = fmaxf(M, part[s * (D + 2) + D]);
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  if (lane == 0) s_red[warp] = M;
  __syncthreads();
  M = s_red[0];
  for (int w = 1; w < kThreads / 32; ++w) M = fmaxf(M, s_red[w]);
  __syncthreads();
  float L = 0.f;
  for (int s = threadIdx.x; s < n_split; s += kThreads) {
    const float w = M == -INFINITY ? 0.f : __expf(part[s * (D + 2) + D] - M);
    s_w[s] = w;
    L += w * part[s * (D + 2) + D + 1];
  }
  for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
  if (lane == 0) s_red[warp] = L;
  __syncthreads();
  L = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) L += s_red[w];
  for (int j = threadIdx.x; j < D; j += kThreads) {
    float A = 0.f;
#pragma unroll 8
    for (int s = 0; s < n_split; ++s) A = fmaf(s_w[s], part[s * (D + 2) + j], A);
    static_cast<T*>(a.o)[static_cast<int64_t>(i) * D + j] = dtype::from_f<T>(L > 0.f ? A / L : 0.f);
  }
  if (a.compact_read && i % a.group == 0 && threadIdx.x == 0) {  // the KV head's compact entries read
    const int* n = reinterpret_cast<const int*>(ws + static_cast<int64_t>(a.n_head) * n_split * (D + 2)) +
                   static_cast<int64_t>(i / a.group) * n_split;
    int64_t total = 0;
    for (int s = 0; s < n_split; ++s) total += n[s];
    a.compact_read[i / a.group] = total;
  }
}

template <typename T, int C, int GT>
cudaError_t launch_split(const CompactDecodeArgs& a, const CompactDecodePlan& p, float* ws, cudaStream_t stream) {
  constexpr int U = C > 2 ? 2 : 4;  // entries in flight per warp (registers: occupancy)
  if (a.index)
    compact_split_kernel<T, C, U, GT, true>
        <<<dim3(p.n_split, a.n_head_kv), kThreads, 0, stream>>>(a, p.chunk, p.n_split, ws);
  else
    compact_split_kernel<T, C, U, GT, false>
        <<<dim3(p.n_split, a.n_head_kv), kThreads, 0, stream>>>(a, p.chunk, p.n_split, ws);
  return cudaGetLastError();
}

template <typename T, int C>
cudaError_t launch_typed(const CompactDecodeArgs& a, const CompactDecodePlan& p, float* ws, cudaStream_t stream) {
  const cudaError_t e = a.group <= 1   ? launch_split<T, C, 1>(a, p, ws, stream)
                        : a.group <= 2 ? launch_split<T, C, 2>(a, p, ws, stream)
                        : a.group <= 4 ? launch_split<T, C, 4>(a, p, ws, stream)
                                       : launch_split<T, C, 8>(a, p, ws, stream);
  if (e != cudaSuccess) return e;
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

CompactDecodePlan plan_compact_decode(int n_head, int n_head_kv, int head_dim, int64_t max_len) {
  CompactDecodePlan p;
  const int64_t len = std::max<int64_t>(max_len, 1);
  // Splits enough for about kTargetBlocks blocks over the KV heads (a step is latency-bound at
  // these lengths: every block is one round of dependent loads per U entries a warp), at least
  // kMinChunk entries each.
  const int64_t want = (kTargetBlocks + std::max(n_head_kv, 1) - 1) / std::max(n_head_kv, 1);
  p.n_split = static_cast<int>(std::clamp<int64_t>(std::min(want, (len + kMinChunk - 1) / kMinChunk), 1, kMaxSplit));
  p.chunk = (len + p.n_split - 1) / p.n_split;
  p.workspace_bytes = static_cast<size_t>(n_head) * p.n_split * (head_dim + 2) * sizeof(float) +
                      static_cast<size_t>(std::max(n_head_kv, 1)) * p.n_split * sizeof(int);
  return p;
}

cudaError_t compact_decode_attention(const CompactDecodeArgs& a, const CompactDecodePlan& p, void* workspace,
                                     cudaStream_t stream) {
  if (!compact_decode_head_dim_supported(a.head_dim) || a.group < 1 || a.group > kMaxGroupSize ||
      a.n_head != a.n_head_kv * a.group || a.n_head_kv < 1 || a.n_head_kv > 65535 || !a.q || !a.k || !a.v || !a.o ||
      !a.offset || !a.k_offset || !a.length || p.n_split < 1 || p.chunk < 1 || !workspace ||
      (a.n_compact && (!a.kept || !a.values)) || (a.sign && (!a.scale || !a.inv_a)) ||
      (a.index && (!a.count || a.index_stride < 1)))
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
