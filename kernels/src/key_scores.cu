// KeyDiff anchor scores and SPARK fixed-mode channel pruning (see key_scores.h).
//
// Both walk rows of D <= 256 channels with one warp per row: lane l owns the PER = 1, 2, 4 or 8
// consecutive channels l*PER .. l*PER + PER - 1 (PER the smallest power of two with 32*PER >= D),
// loaded as one or two vector accesses when D % PER == 0 and the pointer and strides allow it,
// else element by element. Reductions over a row are warp shuffles; nothing is shared between
// rows except KeyDiff's per-block anchor partials.
#include "dtype.cuh"
#include "kvscope/kernels/key_scores.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::round_to;
using dtype::to_f;

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 8;  // warps per block (256 threads) in every kernel here
constexpr int kThreads = kWarps * 32;
constexpr int kMaxDim = 256;
constexpr int kRowsPerWarp = 4;    // KeyDiff: rows loaded back to back per warp iteration
constexpr int kMaxPartials = 256;  // KeyDiff pass 1: at most this many blocks per head
constexpr int kMinRowsPerBlock = 128;

template <int B>
struct Vec;
template <>
struct Vec<2> {
  using type = unsigned short;
};
template <>
struct Vec<4> {
  using type = unsigned int;
};
template <>
struct Vec<8> {
  using type = uint2;
};
template <>
struct Vec<16> {
  using type = uint4;
};

/// PER elements of T at p (aligned to min(16, PER * sizeof(T)) bytes) as fp32.
template <typename T, int PER>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[PER]) {
  constexpr int kBytes = PER * static_cast<int>(sizeof(T));
  constexpr int kW = kBytes >= 16 ? 16 : kBytes;
  using V = typename Vec<kW>::type;
  V raw[kBytes / kW];
  const V* q = reinterpret_cast<const V*>(p);
#pragma unroll
  for (int i = 0; i < kBytes / kW; ++i) raw[i] = q[i];
  const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
  for (int i = 0; i < PER; ++i) f[i] = to_f<T>(e[i]);
}

template <typename T, int PER>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[PER]) {
  constexpr int kBytes = PER * static_cast<int>(sizeof(T));
  constexpr int kW = kBytes >= 16 ? 16 : kBytes;
  using V = typename Vec<kW>::type;
  V raw[kBytes / kW];
  T* e = reinterpret_cast<T*>(raw);
#pragma unroll
  for (int i = 0; i < PER; ++i) e[i] = from_f<T>(f[i]);
  V* q = reinterpret_cast<V*>(p);
#pragma unroll
  for (int i = 0; i < kBytes / kW; ++i) q[i] = raw[i];
}

/// The lane's chunk of one row (channels c0 .. c0 + PER - 1, c0 = lane * PER); channels >= D read 0.
template <typename T, int PER>
__device__ __forceinline__ void load_chunk(const T* row, int c0, int D, bool vec, float (&f)[PER]) {
  if (vec) {
    if (c0 < D) {
      load_vec<T, PER>(row + c0, f);
    } else {
#pragma unroll
      for (int i = 0; i < PER; ++i) f[i] = 0.f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < PER; ++i) f[i] = c0 + i < D ? to_f<T>(row[c0 + i]) : 0.f;
  }
}

/// The lane's chunks of rows r, r + kWarps, ..., r + (kRowsPerWarp - 1) * kWarps of one head (row
/// stride rs), their loads in flight together; rows >= end read 0.
template <typename T, int PER>
__device__ __forceinline__ void load_rows(const T* head, int64_t r, int64_t end, int64_t rs, int c0, int D, bool vec,
                                          float (&f)[kRowsPerWarp][PER]) {
#pragma unroll
  for (int u = 0; u < kRowsPerWarp; ++u) {
    const int64_t row = r + static_cast<int64_t>(u) * kWarps;
    if (row < end) {
      load_chunk<T, PER>(head + row * rs, c0, D, vec, f[u]);
    } else {
#pragma unroll
      for (int i = 0; i < PER; ++i) f[u][i] = 0.f;
    }
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  return v;
}

bool aligned(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

/// Elements per lane for head_dim D (1..256).
int per_lane(int D) { return D <= 32 ? 1 : D <= 64 ? 2 : D <= 128 ? 4 : 8; }

/// Bytes of one vector access of PER elements (as load_vec issues them).
size_t vec_align(int per, size_t es) {
  const size_t b = static_cast<size_t>(per) * es;
  return b >= 16 ? 16 : b;
}

// ---- KeyDiff ---------------------------------------------------------------------------------------

struct KeyDiffPlan {
  int64_t rows_per_block = 0;
  int n_blocks = 0;  // pass-1 blocks per head
};

KeyDiffPlan plan_keydiff(int64_t n) {
  KeyDiffPlan p;
  if (n <= 0) return p;
  int64_t blocks = (n + kMinRowsPerBlock - 1) / kMinRowsPerBlock;
  if (blocks > kMaxPartials) blocks = kMaxPartials;
  p.rows_per_block = (n + blocks - 1) / blocks;
  p.n_blocks = static_cast<int>((n + p.rows_per_block - 1) / p.rows_per_block);
  return p;
}

/// Pass 1: block (b, h) sums rows [b*rpb, min((b+1)*rpb, n)) of head h, each scaled by
/// 1 / max(||k||, 1e-12) when kNormalize, into partial[h][b][0..D).
template <typename T, int PER, bool kNormalize>
__global__ void __launch_bounds__(kThreads)
    keydiff_sum_kernel(const T* __restrict__ keys, int64_t hs, int64_t rs, int64_t n, int D, int64_t rpb, bool vec,
                       float* __restrict__ partial) {
  __shared__ float s_part[kWarps][kMaxDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c0 = lane * PER;
  const int h = blockIdx.y, b = blockIdx.x;
  const T* head = keys + static_cast<int64_t>(h) * hs;
  const int64_t r0 = static_cast<int64_t>(b) * rpb;
  const int64_t r1 = r0 + rpb < n ? r0 + rpb : n;
  float acc[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) acc[i] = 0.f;
  for (int64_t r = r0 + warp; r < r1; r += kWarps * kRowsPerWarp) {
    float f[kRowsPerWarp][PER];
    load_rows<T, PER>(head, r, r1, rs, c0, D, vec, f);
#pragma unroll
    for (int u = 0; u < kRowsPerWarp; ++u) {
      float scale = 1.f;
      if constexpr (kNormalize) {
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) ss = fmaf(f[u][i], f[u][i], ss);
        scale = 1.f / fmaxf(sqrtf(warp_sum(ss)), 1e-12f);  // rows past r1 are zeros: 0 * scale = 0
      }
#pragma unroll
      for (int i = 0; i < PER; ++i) acc[i] = fmaf(f[u][i], scale, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < PER; ++i)
    if (c0 + i < D) s_part[warp][c0 + i] = acc[i];
  __syncthreads();
  float* out = partial + (static_cast<int64_t>(h) * gridDim.x + b) * D;
  for (int c = threadIdx.x; c < D; c += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += s_part[w][c];
    out[c] = s;
  }
}

/// Pass 2: one block per head: anchor[h] = Σ_b partial[h][b] / n (fixed order), anorm[h] =
/// max(||anchor[h]||, 1e-8).
__global__ void __launch_bounds__(kThreads)
    keydiff_anchor_kernel(const float* __restrict__ partial, int n_blocks, int64_t n, int D, float* __restrict__ anchor,
                          float* __restrict__ anorm) {
  __shared__ float s_warp[kWarps];
  const int h = blockIdx.x, c = threadIdx.x;
  float mu = 0.f;
  if (c < D) {
    const float* p = partial + static_cast<int64_t>(h) * n_blocks * D + c;
    float s = 0.f;
    for (int b = 0; b < n_blocks; ++b) s += p[static_cast<int64_t>(b) * D];
    mu = __fdiv_rn(s, static_cast<float>(n));
    anchor[static_cast<int64_t>(h) * D + c] = mu;
  }
  const float ss = warp_sum(mu * mu);
  if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += s_warp[w];
    anorm[h] = fmaxf(sqrtf(t), 1e-8f);
  }
}

/// Pass 3: warp `warp` of block (x, h) scores rows x*32 + warp + 8u, u < 4, of head h.
template <typename T, int PER>
__global__ void __launch_bounds__(kThreads)
    keydiff_score_kernel(const T* __restrict__ keys, int64_t hs, int64_t rs, int64_t n, int D, bool vec,
                         const float* __restrict__ anchor, const float* __restrict__ anorm,
                         float* __restrict__ scores) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c0 = lane * PER;
  const int h = blockIdx.y;
  const T* head = keys + static_cast<int64_t>(h) * hs;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kWarps * kRowsPerWarp) + warp;
  float f[kRowsPerWarp][PER];
  load_rows<T, PER>(head, r, n, rs, c0, D, vec, f);
  float mu[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) mu[i] = c0 + i < D ? anchor[static_cast<int64_t>(h) * D + c0 + i] : 0.f;
  const float inv_anorm = 1.f / anorm[h];
  float dot[kRowsPerWarp], ss[kRowsPerWarp];
#pragma unroll
  for (int u = 0; u < kRowsPerWarp; ++u) {
    dot[u] = 0.f;
    ss[u] = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      dot[u] = fmaf(f[u][i], mu[i], dot[u]);
      ss[u] = fmaf(f[u][i], f[u][i], ss[u]);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int u = 0; u < kRowsPerWarp; ++u) {
      dot[u] += __shfl_xor_sync(kFull, dot[u], off);
      ss[u] += __shfl_xor_sync(kFull, ss[u], off);
    }
#pragma unroll
  for (int u = 0; u < kRowsPerWarp; ++u) {
    const int64_t row = r + static_cast<int64_t>(u) * kWarps;
    if (lane == u && row < n)
      scores[static_cast<int64_t>(h) * n + row] = -(dot[u] / fmaxf(sqrtf(ss[u]), 1e-8f)) * inv_anorm;
  }
}

template <typename T, int PER>
cudaError_t launch_keydiff(const KeyDiffArgs& a, const KeyDiffPlan& p, float* partial, float* anchor, float* anorm,
                           cudaStream_t stream) {
  const T* keys = static_cast<const T*>(a.keys);
  const size_t es = sizeof(T), va = vec_align(PER, es);
  const bool vec = PER > 1 && a.head_dim % PER == 0 && aligned(a.keys, va) &&
                   (static_cast<size_t>(a.row_stride) * es) % va == 0 &&
                   (static_cast<size_t>(a.head_stride) * es) % va == 0;
  const dim3 g1(static_cast<unsigned>(p.n_blocks), static_cast<unsigned>(a.n_head_kv));
  if (a.normalized_anchor)
    keydiff_sum_kernel<T, PER, true><<<g1, kThreads, 0, stream>>>(keys, a.head_stride, a.row_stride, a.n_tok,
                                                                  a.head_dim, p.rows_per_block, vec, partial);
  else
    keydiff_sum_kernel<T, PER, false><<<g1, kThreads, 0, stream>>>(keys, a.head_stride, a.row_stride, a.n_tok,
                                                                   a.head_dim, p.rows_per_block, vec, partial);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  keydiff_anchor_kernel<<<a.n_head_kv, kThreads, 0, stream>>>(partial, p.n_blocks, a.n_tok, a.head_dim, anchor, anorm);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const dim3 g3(static_cast<unsigned>((a.n_tok + rows_per_block - 1) / rows_per_block),
                static_cast<unsigned>(a.n_head_kv));
  keydiff_score_kernel<T, PER><<<g3, kThreads, 0, stream>>>(keys, a.head_stride, a.row_stride, a.n_tok, a.head_dim, vec,
                                                            anchor, anorm, a.scores);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch_keydiff(const KeyDiffArgs& a, const KeyDiffPlan& p, float* partial, float* anchor, float* anorm,
                             cudaStream_t stream) {
  switch (per_lane(a.head_dim)) {
    case 1:
      return launch_keydiff<T, 1>(a, p, partial, anchor, anorm, stream);
    case 2:
      return launch_keydiff<T, 2>(a, p, partial, anchor, anorm, stream);
    case 4:
      return launch_keydiff<T, 4>(a, p, partial, anchor, anorm, stream);
    default:
      return launch_keydiff<T, 8>(a, p, partial, anchor, anorm, stream);
  }
}

/// Workspace layout: partial [Hkv][n_blocks][D], anchor [Hkv][D], anorm [Hkv] (fp32).
size_t keydiff_floats(const KeyDiffArgs& a, const KeyDiffPlan& p) {
  const size_t hkv = static_cast<size_t>(a.n_head_kv), d = static_cast<size_t>(a.head_dim);
  return hkv * static_cast<size_t>(p.n_blocks) * d + hkv * d + hkv;
}

// ---- SPARK -----------------------------------------------------------------------------------------

/// k_tj * 0 as LibTorch computes it (±0 with the sign of k, NaN for NaN / inf), without arithmetic
/// (so no flush-to-zero can touch it).
__device__ __forceinline__ float times_zero(float k) {
  const unsigned b = __float_as_uint(k);
  return (b & 0x7fffffffu) >= 0x7f800000u ? __uint_as_float(0x7fc00000u) : __uint_as_float(b & 0x80000000u);
}

/// z + r where z = k * 0 (±0 or NaN) and r is the refill already rounded to the dtype: IEEE
/// semantics (NaN propagates, -0 + -0 = -0, any other zero sum is +0), without flush-to-zero.
__device__ __forceinline__ float zero_plus(float z, float r) {
  const unsigned zb = __float_as_uint(z), rb = __float_as_uint(r);
  if ((zb & 0x7fffffffu) > 0x7f800000u) return z;
  if ((rb & 0x7fffffffu) == 0) return __uint_as_float(zb & rb & 0x80000000u);
  return r;
}

template <typename T, int PER>
__global__ void __launch_bounds__(kThreads)
    spark_fixed_kernel(const T* __restrict__ k, int64_t ks, int64_t n, int D, int kept, bool refill, bool vec_in,
                       bool vec_out, const float* __restrict__ a, bool* __restrict__ mask, T* __restrict__ out,
                       float* __restrict__ pruned_sum) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c0 = lane * PER;
  float av[PER], inv_a[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    av[i] = c0 + i < D ? a[c0 + i] : 0.f;
    inv_a[i] = av[i] > 0.f ? __frcp_rn(av[i]) : 0.f;  // IEEE 1/a, as at::reciprocal
  }
  const int n_pruned = D - kept;
  const float mu_den = static_cast<float>(n_pruned > 1 ? n_pruned : 1);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp; t < n;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    float kf[PER];
    load_chunk<T, PER>(k + t * ks, c0, D, vec_in, kf);
    float w[PER];
    unsigned bits[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      w[i] = __fmul_rn(fabsf(kf[i]), av[i]);
      bits[i] = __float_as_uint(w[i]) & 0x7fffffffu;
    }
    unsigned keep = 0;  // bit i: channel c0 + i kept
    if (kept >= D) {
      keep = (1u << PER) - 1;
    } else if (kept > 0) {
      // thr = the largest value v with #{w_bits >= v} >= kept: the bits of the kept-th largest w.
      unsigned thr = 0;
#pragma unroll 1
      for (int b = 30; b >= 0; --b) {
        const unsigned cand = thr | (1u << b);
        unsigned cnt = 0;
#pragma unroll
        for (int i = 0; i < PER; ++i) cnt += (c0 + i < D && bits[i] >= cand) ? 1u : 0u;
        if (static_cast<int>(__reduce_add_sync(kFull, cnt)) >= kept) thr = cand;
      }
      unsigned gt = 0, eq = 0;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        gt += (c0 + i < D && bits[i] > thr) ? 1u : 0u;
        eq += (c0 + i < D && bits[i] == thr) ? 1u : 0u;
      }
      const int need = kept - static_cast<int>(__reduce_add_sync(kFull, gt));  // ties to take, >= 1
      unsigned incl = eq;  // inclusive prefix of eq over lanes (channel order)
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned v = __shfl_up_sync(kFull, incl, off);
        if (lane >= off) incl += v;
      }
      int before = static_cast<int>(incl - eq);
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        if (c0 + i >= D) continue;
        if (bits[i] > thr) {
          keep |= 1u << i;
        } else if (bits[i] == thr) {
          if (before < need) keep |= 1u << i;
          ++before;
        }
      }
    }
    float ps = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (c0 + i < D && !((keep >> i) & 1u)) ps += w[i];
    ps = warp_sum(ps);
    if (lane == 0) pruned_sum[t] = ps;
    const float mu = __fdiv_rn(ps, mu_den);
    float o[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const bool kp = (keep >> i) & 1u;
      if (!refill) {
        o[i] = kp ? kf[i] : times_zero(kf[i]);
      } else if (kp) {
        // k * 1 + 0 in the dtype: k itself, except that -0 + 0 = +0.
        o[i] = __float_as_uint(kf[i]) == 0x80000000u ? 0.f : kf[i];
      } else {
        const float sgn = kf[i] > 0.f ? 1.f : kf[i] < 0.f ? -1.f : 0.f;
        const float r = round_to<T>(__fmul_rn(__fmul_rn(sgn, mu), inv_a[i]));
        o[i] = zero_plus(times_zero(kf[i]), r);
      }
    }
    T* orow = out + t * D;
    bool* mrow = mask + t * D;
    if (vec_out) {
      if (c0 < D) {
        store_vec<T, PER>(orow + c0, o);
        if constexpr (PER == 1) {
          mrow[c0] = keep & 1u;
        } else {
          // PER mask bytes (0 / 1) packed into one 2-, 4- or 8-byte store.
          unsigned long long m = 0;
#pragma unroll
          for (int i = 0; i < PER; ++i) m |= static_cast<unsigned long long>((keep >> i) & 1u) << (8 * i);
          if constexpr (PER == 2)
            *reinterpret_cast<unsigned short*>(mrow + c0) = static_cast<unsigned short>(m);
          else if constexpr (PER == 4)
            *reinterpret_cast<unsigned int*>(mrow + c0) = static_cast<unsigned int>(m);
          else
            *reinterpret_cast<unsigned long long*>(mrow + c0) = m;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (c0 + i < D) {
          orow[c0 + i] = from_f<T>(o[i]);
          mrow[c0 + i] = (keep >> i) & 1u;
        }
    }
  }
}

template <typename T, int PER>
cudaError_t launch_spark(const SparkPruneArgs& a, int kept, cudaStream_t stream) {
  const size_t es = sizeof(T), va = vec_align(PER, es);
  const bool fits = PER > 1 && a.head_dim % PER == 0;
  const bool vec_in = fits && aligned(a.k, va) && (static_cast<size_t>(a.k_stride) * es) % va == 0;
  // masked_k rows are D elements apart and mask rows D bytes: D % PER == 0 keeps every chunk aligned.
  const bool vec_out = fits && aligned(a.masked_k, va) && aligned(a.mask, PER);
  int64_t blocks = (a.n_tok + kWarps - 1) / kWarps;
  if (blocks > 8192) blocks = 8192;  // grid-stride beyond: a and 1/a are loaded once per block
  spark_fixed_kernel<T, PER><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const T*>(a.k), a.k_stride, a.n_tok, a.head_dim, kept, a.key_sign_refill, vec_in, vec_out, a.a,
      a.mask, static_cast<T*>(a.masked_k), a.pruned_sum);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch_spark(const SparkPruneArgs& a, int kept, cudaStream_t stream) {
  switch (per_lane(a.head_dim)) {
    case 1:
      return launch_spark<T, 1>(a, kept, stream);
    case 2:
      return launch_spark<T, 2>(a, kept, stream);
    case 4:
      return launch_spark<T, 4>(a, kept, stream);
    default:
      return launch_spark<T, 8>(a, kept, stream);
  }
}

}  // namespace

size_t keydiff_workspace_bytes(const KeyDiffArgs& a) {
  if (a.n_head_kv <= 0 || a.n_tok <= 0 || a.head_dim <= 0 || a.head_dim > kMaxDim) return 0;
  const size_t bytes = keydiff_floats(a, plan_keydiff(a.n_tok)) * sizeof(float);
  return (bytes + 15) / 16 * 16;
}

cudaError_t keydiff_scores(const KeyDiffArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n_head_kv < 0 || a.n_head_kv > 65535 || a.n_tok < 0 || a.head_dim <= 0 || a.head_dim > kMaxDim)
    return cudaErrorInvalidValue;
  if (a.n_head_kv == 0 || a.n_tok == 0) return cudaSuccess;
  if (!a.keys || !a.scores || !workspace || a.row_stride < 0 || a.head_stride < 0) return cudaErrorInvalidValue;
  if ((a.n_tok + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp) > 0x7fffffff) return cudaErrorInvalidValue;
  const KeyDiffPlan p = plan_keydiff(a.n_tok);
  float* partial = static_cast<float*>(workspace);
  float* anchor = partial + static_cast<size_t>(a.n_head_kv) * p.n_blocks * a.head_dim;
  float* anorm = anchor + static_cast<size_t>(a.n_head_kv) * a.head_dim;
  switch (a.dtype) {
    case DType::kFloat32:
      return dispatch_keydiff<float>(a, p, partial, anchor, anorm, stream);
    case DType::kBFloat16:
      return dispatch_keydiff<__nv_bfloat16>(a, p, partial, anchor, anorm, stream);
    case DType::kFloat16:
      return dispatch_keydiff<__half>(a, p, partial, anchor, anorm, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t spark_prune_fixed(const SparkPruneArgs& a, cudaStream_t stream) {
  if (a.n_tok < 0 || a.head_dim <= 0 || a.head_dim > kMaxDim) return cudaErrorInvalidValue;
  if (a.n_tok == 0) return cudaSuccess;
  if (!a.k || !a.a || !a.mask || !a.masked_k || !a.pruned_sum || a.k_stride < 0) return cudaErrorInvalidValue;
  const int kept = a.kept < 0 ? 0 : a.kept > a.head_dim ? a.head_dim : a.kept;
  switch (a.dtype) {
    case DType::kFloat32:
      return dispatch_spark<float>(a, kept, stream);
    case DType::kBFloat16:
      return dispatch_spark<__nv_bfloat16>(a, kept, stream);
    case DType::kFloat16:
      return dispatch_spark<__half>(a, kept, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
