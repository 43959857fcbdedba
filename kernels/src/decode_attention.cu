// Split-K GQA decode attention over a ragged per-KV-head cache (see decode.h for the contract).
//
// Pass 1 (decode_split_kernel): grid (n_split, n_head_kv * head chunks), 4 warps a block. One block
// streams the tokens [split * chunk, min(len, (split + 1) * chunk)) of one KV head and serves the
// GT query heads of its head chunk from each K/V load. A token row is read by LPT = D / 8 lanes
// with one 16-byte load each (8 elements; two loads for fp32), so a warp covers TPW = 32 / LPT
// tokens per load instruction and U such steps are in flight at once. Each lane keeps a running
// max / sum / accumulator (online softmax, log2 domain, fp32) for its token slot; slots are merged
// through shuffles (within a warp) and shared memory (across warps) at the end.
// Pass 2 (combine_kernel): one block per query head merges the splits' (max, sum, acc) partials.
#include "kvscope/kernels/decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kvscope::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMinChunk = 128;    // tokens per split at least (block prologue/epilogue amortised)
constexpr int kBlocksPerSm = 2;   // split target: about this many pass-1 blocks per SM

// ---- 8 elements of T: one 16-byte load (two for fp32), converted to fp32 -------------------------
template <typename T> struct Raw8 { uint4 a; };
template <> struct Raw8<float> { uint4 a, b; };

template <typename T>
__device__ __forceinline__ Raw8<T> load8(const T* p) {
  Raw8<T> r;
  r.a = __ldg(reinterpret_cast<const uint4*>(p));
  if constexpr (sizeof(T) == 4) r.b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
  return r;
}

template <typename T>
__device__ __forceinline__ void zero8(Raw8<T>& r) {
  r.a = make_uint4(0, 0, 0, 0);
  if constexpr (sizeof(T) == 4) r.b = make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void unpack2(uint32_t w, float& x, float& y, __nv_bfloat16*) {
  x = __uint_as_float(w << 16);
  y = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpack2(uint32_t w, float& x, float& y, __half*) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
  x = f.x;
  y = f.y;
}

template <typename T>
__device__ __forceinline__ void to_float8(const Raw8<T>& r, float (&f)[8]) {
  if constexpr (sizeof(T) == 4) {
    f[0] = __uint_as_float(r.a.x); f[1] = __uint_as_float(r.a.y);
    f[2] = __uint_as_float(r.a.z); f[3] = __uint_as_float(r.a.w);
    f[4] = __uint_as_float(r.b.x); f[5] = __uint_as_float(r.b.y);
    f[6] = __uint_as_float(r.b.z); f[7] = __uint_as_float(r.b.w);
  } else {
    unpack2(r.a.x, f[0], f[1], static_cast<T*>(nullptr));
    unpack2(r.a.y, f[2], f[3], static_cast<T*>(nullptr));
    unpack2(r.a.z, f[4], f[5], static_cast<T*>(nullptr));
    unpack2(r.a.w, f[6], f[7], static_cast<T*>(nullptr));
  }
}

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

struct Params {
  const void* q;
  int64_t q_stride;
  const void* k;
  const void* v;
  const int64_t* offset;
  const int64_t* length;
  const int32_t* index;
  int64_t index_stride;
  float scale_log2;  // scale * log2(e)
  void* o;
  float* part_o;     // [n_head, n_split, D]
  float2* part_ml;   // [n_head, n_split]: (max in log2 units, sum)
  int group, n_hchunk, n_split;
  int64_t chunk;
};

// Merges running (max, sum, acc) states a <- a (+) b, log2 domain.
template <int GT>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&acc)[8], float mo, float lo, const float (&acco)[8]) {
  const float mx = fmaxf(m, mo);
  const float mu = mx == -INFINITY ? 0.f : mx;
  const float a = exp2f(m - mu), b = exp2f(mo - mu);
  m = mx;
  l = l * a + lo * b;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = acc[j] * a + acco[j] * b;
}

template <typename T, int D, int GT, bool kGather>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const Params p) {
  constexpr int LPT = D / 8;   // lanes per token row
  constexpr int TPW = 32 / LPT;  // token rows per warp load
  // Loads in flight per lane per step: 2U rows of 16 bytes (fp32: 32 bytes). Fewer for many heads
  // (registers: q and acc take 16 GT floats a lane).
  constexpr int U0 = (GT >= 8 ? 2 : 4) / (sizeof(T) == 4 ? 2 : 1);
  constexpr int U = U0 > 0 ? U0 : 1;
  constexpr int kStep = TPW * U;  // tokens per warp per iteration

  __shared__ float s_acc[kWarps][GT][D];
  __shared__ float2 s_ml[kWarps][GT];

  const int split = blockIdx.x;
  const int hk = blockIdx.y / p.n_hchunk, hc = blockIdx.y % p.n_hchunk;
  const int64_t len = p.length[hk];
  const int64_t t_begin = split * p.chunk;
  if (t_begin >= len) return;  // empty split (shorter head): the combine pass skips it
  const int64_t t_end = len < t_begin + p.chunk ? len : t_begin + p.chunk;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slot = lane / LPT, sub = lane % LPT;
  const int h0 = hk * p.group + hc * GT;                // first query head of this block
  const int nh = p.group - hc * GT < GT ? p.group - hc * GT : GT;  // valid heads in the chunk

  const T* qp = static_cast<const T*>(p.q);
  float q[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (g < nh) {
      to_float8(load8(qp + (h0 + g) * p.q_stride + sub * 8), q[g]);
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] *= p.scale_log2;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[g][j] = 0.f;
    }
  }

  float m[GT], l[GT], acc[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.f;
  }

  const int64_t base_row = p.offset[hk];
  const T* kp = static_cast<const T*>(p.k) + base_row * D + sub * 8;
  const T* vp = static_cast<const T*>(p.v) + base_row * D + sub * 8;
  const int32_t* ip = kGather ? p.index + hk * p.index_stride : nullptr;

  for (int64_t t0 = t_begin + warp * kStep; t0 < t_end; t0 += kWarps * kStep) {
    Raw8<T> kr[U], vr[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t t = t0 + u * TPW + slot;
      ok[u] = t < t_end;
      if (ok[u]) {
        const int64_t row = kGather ? static_cast<int64_t>(__ldg(ip + t)) : t;
        kr[u] = load8(kp + row * D);
        vr[u] = load8(vp + row * D);
      } else {
        zero8(kr[u]);
        zero8(vr[u]);
      }
    }
    float s[U][GT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      to_float8(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float d = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) d = fmaf(q[g][j], kf[j], d);
        s[u][g] = d;
      }
    }
#pragma unroll
    for (int off = LPT / 2; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int g = 0; g < GT; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);

    // Online softmax: one rescale per U tokens.
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!ok[u]) s[u][g] = -INFINITY;
        mx = fmaxf(mx, s[u][g]);
      }
      const float mu = mx == -INFINITY ? 0.f : mx;
      const float corr = exp2f(m[g] - mu);
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[g][j] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u][g] = exp2f(s[u][g] - mu);  // now the weight p
        l[g] += s[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      to_float8(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(s[u][g], vf[j], acc[g][j]);
    }
  }

  // Merge the TPW token slots of the warp (lanes sub, sub + LPT, ...).
#pragma unroll
  for (int off = LPT; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      float ao[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) ao[j] = __shfl_xor_sync(0xffffffffu, acc[g][j], off);
      merge_state<GT>(m[g], l[g], acc[g], mo, lo, ao);
    }
  }
  if (slot == 0) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
#pragma unroll
      for (int j = 0; j < 8; ++j) s_acc[warp][g][sub * 8 + j] = acc[g][j];
      if (sub == 0) s_ml[warp][g] = make_float2(m[g], l[g]);
    }
  }
  __syncthreads();

  // Merge the warps: thread e handles element (g, d) = (e / D, e % D).
  for (int e = threadIdx.x; e < GT * D; e += kThreads) {
    const int g = e / D, d = e % D;
    if (g >= nh) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_ml[w][g].x);
    const float mu = mx == -INFINITY ? 0.f : mx;
    float lsum = 0.f, o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = exp2f(s_ml[w][g].x - mu);
      lsum += s_ml[w][g].y * wt;
      o += s_acc[w][g][d] * wt;
    }
    const int h = h0 + g;
    if (p.n_split == 1) {
      static_cast<T*>(p.o)[static_cast<int64_t>(h) * D + d] = from_float<T>(lsum > 0.f ? o / lsum : 0.f);
    } else {
      const int64_t ps = static_cast<int64_t>(h) * p.n_split + split;
      p.part_o[ps * D + d] = o;
      if (d == 0) p.part_ml[ps] = make_float2(mx, lsum);
    }
  }
}

// Pass 2: one block of D threads per query head; blockDim.x == D.
template <typename T, int D>
__global__ void __launch_bounds__(128) combine_kernel(const Params p) {
  extern __shared__ float s_w[];  // [n_split] weights
  __shared__ float s_red[D / 32];
  __shared__ float s_bcast;
  const int h = blockIdx.x, d = threadIdx.x, lane = d & 31, warp = d >> 5;
  const int64_t len = p.length[h / p.group];
  const int64_t n_nonempty = (len + p.chunk - 1) / p.chunk;
  const int n_valid = len <= 0 ? 0 : static_cast<int>(n_nonempty < p.n_split ? n_nonempty : p.n_split);
  T* out = static_cast<T*>(p.o) + static_cast<int64_t>(h) * D;
  if (n_valid == 0) {
    out[d] = from_float<T>(0.f);
    return;
  }
  const float2* ml = p.part_ml + static_cast<int64_t>(h) * p.n_split;
  // Block max of the split maxima.
  float mx = -INFINITY;
  for (int s = d; s < n_valid; s += D) mx = fmaxf(mx, ml[s].x);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) s_red[warp] = mx;
  __syncthreads();
  if (d == 0) {
    float v = s_red[0];
    for (int w = 1; w < D / 32; ++w) v = fmaxf(v, s_red[w]);
    s_bcast = v;
  }
  __syncthreads();
  const float mu = s_bcast == -INFINITY ? 0.f : s_bcast;
  // Split weights and the total sum.
  float lsum = 0.f;
  for (int s = d; s < n_valid; s += D) {
    const float2 v = ml[s];
    const float w = exp2f(v.x - mu);
    s_w[s] = w;
    lsum += v.y * w;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
  __syncthreads();  // s_red reuse and s_w visible
  if (lane == 0) s_red[warp] = lsum;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < D / 32; ++w) total += s_red[w];
  // Weighted sum of the partial accumulators (independent loads, unrolled).
  const float* po = p.part_o + static_cast<int64_t>(h) * p.n_split * D + d;
  float o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
  int s = 0;
  for (; s + 4 <= n_valid; s += 4) {
    o0 = fmaf(po[(s + 0) * D], s_w[s + 0], o0);
    o1 = fmaf(po[(s + 1) * D], s_w[s + 1], o1);
    o2 = fmaf(po[(s + 2) * D], s_w[s + 2], o2);
    o3 = fmaf(po[(s + 3) * D], s_w[s + 3], o3);
  }
  for (; s < n_valid; ++s) o0 = fmaf(po[s * D], s_w[s], o0);
  const float o = (o0 + o1) + (o2 + o3);
  out[d] = from_float<T>(total > 0.f ? o / total : 0.f);
}

template <typename T, int D, int GT>
cudaError_t launch_typed(const Params& p, int n_head, int n_head_kv, cudaStream_t stream) {
  const dim3 grid(p.n_split, n_head_kv * p.n_hchunk);
  if (p.index) decode_split_kernel<T, D, GT, true><<<grid, kThreads, 0, stream>>>(p);
  else decode_split_kernel<T, D, GT, false><<<grid, kThreads, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || p.n_split == 1) return err;
  combine_kernel<T, D><<<n_head, D, p.n_split * sizeof(float), stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_gt(const Params& p, int gt, int n_head, int n_head_kv, cudaStream_t stream) {
  switch (gt) {
    case 1: return launch_typed<T, D, 1>(p, n_head, n_head_kv, stream);
    case 2: return launch_typed<T, D, 2>(p, n_head, n_head_kv, stream);
    case 4: return launch_typed<T, D, 4>(p, n_head, n_head_kv, stream);
    case 8: return launch_typed<T, D, 8>(p, n_head, n_head_kv, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_d(const Params& p, int d, int gt, int n_head, int n_head_kv, cudaStream_t stream) {
  if (d == 64) return launch_gt<T, 64>(p, gt, n_head, n_head_kv, stream);
  if (d == 128) return launch_gt<T, 128>(p, gt, n_head, n_head_kv, stream);
  return cudaErrorInvalidValue;
}

int head_chunk_for(int group) {
  int gt = 1;
  while (gt < group && gt < 8) gt *= 2;
  return gt;
}

int sm_count_of_current_device() {
  static int cached[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
    cached[dev] = n;
  }
  return cached[dev];
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

DecodeAttentionPlan plan_decode_attention(int n_head, int n_head_kv, int head_dim, int64_t max_len, int n_split_override,
                                          int sm_count) {
  DecodeAttentionPlan plan;
  if (n_head <= 0 || n_head_kv <= 0) return plan;
  const int group = std::max(1, n_head / n_head_kv);
  plan.head_chunk = head_chunk_for(group);
  const int n_hchunk = (group + plan.head_chunk - 1) / plan.head_chunk;
  max_len = std::max<int64_t>(max_len, 1);
  int n_split = n_split_override;
  if (n_split <= 0) {
    if (sm_count <= 0) sm_count = sm_count_of_current_device();
    const int blocks_per_split = n_head_kv * n_hchunk;
    n_split = std::max(1, (kBlocksPerSm * sm_count + blocks_per_split - 1) / blocks_per_split);
    int64_t chunk = std::max<int64_t>(kMinChunk, (max_len + n_split - 1) / n_split);
    chunk = (chunk + 63) / 64 * 64;
    n_split = static_cast<int>((max_len + chunk - 1) / chunk);
    plan.chunk = chunk;
  } else {
    n_split = static_cast<int>(std::min<int64_t>(n_split, max_len));
    plan.chunk = (max_len + n_split - 1) / n_split;
    n_split = static_cast<int>((max_len + plan.chunk - 1) / plan.chunk);
  }
  plan.n_split = std::max(1, n_split);
  if (plan.n_split > 1) {
    const size_t rows = static_cast<size_t>(n_head) * plan.n_split;
    plan.workspace_bytes = rows * head_dim * sizeof(float) + rows * sizeof(float2);
  }
  return plan;
}

cudaError_t decode_attention(const DecodeAttentionArgs& a, const DecodeAttentionPlan& plan, void* workspace,
                             cudaStream_t stream) {
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.group <= 0 || a.n_head != a.n_head_kv * a.group) return cudaErrorInvalidValue;
  if (a.head_dim != 64 && a.head_dim != 128) return cudaErrorInvalidValue;
  if (plan.n_split < 1 || plan.chunk < 1 || plan.head_chunk != head_chunk_for(a.group)) return cudaErrorInvalidValue;
  if (!a.q || !a.k || !a.v || !a.o || !a.offset || !a.length) return cudaErrorInvalidValue;
  const size_t es = dtype_size(a.dtype);
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || (a.q_stride * es) % 16 != 0) return cudaErrorInvalidValue;
  if (plan.n_split > 1 && (!workspace || !aligned16(workspace))) return cudaErrorInvalidValue;
  if (plan.n_split > 12288) return cudaErrorInvalidValue;  // combine keeps one float per split in shared memory
  if (a.index && a.index_stride <= 0) return cudaErrorInvalidValue;

  Params p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.k = a.k;
  p.v = a.v;
  p.offset = a.offset;
  p.length = a.length;
  p.index = a.index;
  p.index_stride = a.index_stride;
  p.scale_log2 = a.scale * kLog2e;
  p.o = a.o;
  p.group = a.group;
  p.n_hchunk = (a.group + plan.head_chunk - 1) / plan.head_chunk;
  p.n_split = plan.n_split;
  p.chunk = plan.chunk;
  if (plan.n_split > 1) {
    const size_t rows = static_cast<size_t>(a.n_head) * plan.n_split;
    p.part_o = static_cast<float*>(workspace);
    p.part_ml = reinterpret_cast<float2*>(static_cast<char*>(workspace) + rows * a.head_dim * sizeof(float));
  }
  if (static_cast<int64_t>(a.n_head_kv) * p.n_hchunk > 65535) return cudaErrorInvalidValue;
  switch (a.dtype) {
    case DType::kFloat32: return launch_d<float>(p, a.head_dim, plan.head_chunk, a.n_head, a.n_head_kv, stream);
    case DType::kBFloat16: return launch_d<__nv_bfloat16>(p, a.head_dim, plan.head_chunk, a.n_head, a.n_head_kv, stream);
    case DType::kFloat16: return launch_d<__half>(p, a.head_dim, plan.head_chunk, a.n_head, a.n_head_kv, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
