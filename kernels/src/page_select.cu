// Page min/max maintenance, page scoring and row selection for HSA / Quest (see page_select.h).
//
// page_select runs two kernels:
//   1. score: grid (KV head, block of 256 pages). Every block loads the group's queries into shared
//      memory (fp32), picks HSA's top-k1 channels by rank counting over Σ_g|q| (D <= 256 values),
//      then each thread scores one page from its min/max row. HSA writes ŝ/τ per group member,
//      Quest the group-summed upper bound.
//   2. select: one 1024-thread block per KV head. HSA turns the per-member logits into Σ_g π
//      per page (a page's entries share one logit, so a token softmax is a page softmax weighted
//      by the entries per page); then a 4-pass 8-bit radix select over the order-preserving bits of
//      the page scores, weighted by entries (HSA) or 1 (Quest), finds the threshold score; a block
//      scan emits rows in ascending order (strictly-above pages whole, ties in page order).
// The score workspace is fp32 [n_head_kv, G, max_pages].
#include <cub/block/block_scan.cuh>

#include "dtype.cuh"
#include "kvscope/kernels/page_select.h"

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::to_f;

constexpr int kMaxDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kScoreThreads = 256;
constexpr int kSelectThreads = 1024;

__device__ __forceinline__ int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__device__ __forceinline__ int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

// ---- page min/max ---------------------------------------------------------------------------

template <typename T>
__global__ void page_minmax_kernel(const PageMinMaxArgs a) {
  const int h = blockIdx.x, c = threadIdx.x, D = a.head_dim;
  const int64_t len = a.length[h];
  const int64_t P = (a.first_page ? a.first_page[h] : max64(len - 1, 0) / a.page) + blockIdx.y, first = P * a.page;
  if (c >= D || first >= len || P >= a.page_capacity) return;
  const int64_t last = min64(len, first + a.page);
  const T* k = static_cast<const T*>(a.k) + (a.offset[h] + first) * D + c;
  float lo = to_f<T>(k[0]), hi = lo;
  for (int64_t r = 1; r < last - first; ++r) {
    const float x = to_f<T>(k[r * D]);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  }
  const int64_t o = (static_cast<int64_t>(h) * a.page_capacity + P) * D + c;
  static_cast<T*>(a.kmin)[o] = from_f<T>(lo);  // exact: lo and hi are values of T
  static_cast<T*>(a.kmax)[o] = from_f<T>(hi);
}

// ---- scoring ----------------------------------------------------------------------------------

template <typename T, int kG>
__global__ void __launch_bounds__(kScoreThreads) score_kernel(const PageSelectArgs a, float* scores) {
  __shared__ float qs[kMaxGroup * kMaxDim];
  __shared__ float mag[kMaxDim];
  __shared__ int sel[kMaxDim];
  __shared__ unsigned char use_max[kMaxDim];
  __shared__ float inv_tau[kMaxGroup];
  const int h = blockIdx.x, G = a.group, D = a.head_dim, tid = threadIdx.x;
  const int64_t len = a.length[h], n_pages = (len + a.page - 1) / a.page;
  if (static_cast<int64_t>(blockIdx.y) * kScoreThreads >= n_pages) return;  // uniform over the block
  const T* q = static_cast<const T*>(a.q);
  for (int i = tid; i < G * D; i += kScoreThreads)
    qs[i] = to_f<T>(q[(static_cast<int64_t>(h) * G + i / D) * a.q_stride + i % D]);
  __syncthreads();
  const bool hsa = a.mode == PageScore::kHsa;
  const int k1 = hsa ? a.k1 : D;
  if (hsa) {
    for (int c = tid; c < D; c += kScoreThreads) {
      float m = 0.f;
      for (int g = 0; g < G; ++g) m += fabsf(qs[g * D + c]);
      mag[c] = m;
    }
    __syncthreads();
    for (int c = tid; c < D; c += kScoreThreads) {
      int rank = 0;
      const float m = mag[c];
      for (int j = 0; j < D; ++j) rank += (mag[j] > m) || (mag[j] == m && j < c);
      if (rank < k1) {
        float s = 0.f;
        for (int g = 0; g < G; ++g) s += qs[g * D + c];
        sel[rank] = c;
        use_max[rank] = s >= 0.f;
      }
    }
    __syncthreads();
    if (tid < G) {
      float num = 0.f, den = 0.f;
      for (int r = 0; r < k1; ++r) num += fabsf(qs[tid * D + sel[r]]);
      for (int c = 0; c < D; ++c) den += fabsf(qs[tid * D + c]);
      const float ratio = den > 0.f ? num / den : 1.f;
      inv_tau[tid] = rsqrtf(ratio * static_cast<float>(D));
    }
    __syncthreads();
  }
  const int64_t P = static_cast<int64_t>(blockIdx.y) * kScoreThreads + tid;
  if (P >= n_pages) return;
  const int64_t row = (static_cast<int64_t>(h) * a.page_capacity + P) * D;
  const T* mn = static_cast<const T*>(a.kmin) + row;
  const T* mx = static_cast<const T*>(a.kmax) + row;
  float* out = scores + static_cast<int64_t>(h) * G * a.max_pages + P;
  if (hsa) {
    float acc[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) acc[g] = 0.f;
    for (int r = 0; r < k1; ++r) {
      const int c = sel[r];
      const float b = use_max[r] ? to_f<T>(mx[c]) : to_f<T>(mn[c]);
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) acc[g] = fmaf(qs[g * D + c], b, acc[g]);
    }
#pragma unroll
    for (int g = 0; g < kG; ++g)
      if (g < G) out[static_cast<int64_t>(g) * a.max_pages] = acc[g] * inv_tau[g];
  } else {
    float u = 0.f;
    for (int c = 0; c < D; ++c) {
      const float lo = to_f<T>(mn[c]), hi = to_f<T>(mx[c]);
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) {
          const float x = qs[g * D + c];
          u = fmaf(x, x >= 0.f ? hi : lo, u);
        }
    }
    out[0] = u;
  }
}

// ---- selection --------------------------------------------------------------------------------

/// Unsigned bits that order like the floats (negative values flipped).
__device__ __forceinline__ unsigned ordered_bits(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <typename Op>
__device__ float block_reduce(float v, Op op, float* s_part) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // s_part may still be read by a previous reduction
  if (lane == 0) s_part[warp] = v;
  __syncthreads();
  v = s_part[0];
  for (int w = 1; w < kSelectThreads / 32; ++w) v = op(v, s_part[w]);
  return v;
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(const PageSelectArgs a, float* scores) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float s_part[kSelectThreads / 32];
  __shared__ float s_max[kMaxGroup], s_inv_z[kMaxGroup];
  __shared__ unsigned hist[256];
  __shared__ unsigned s_prefix;
  __shared__ long long s_rem;
  const int h = blockIdx.x, G = a.group, tid = threadIdx.x;
  const bool hsa = a.mode == PageScore::kHsa;
  const int64_t len = a.length[h], n_pages = (len + a.page - 1) / a.page;
  int32_t* index = a.index + static_cast<int64_t>(h) * a.index_stride;
  if (hsa ? len <= a.keep : n_pages <= a.keep) {  // dense: every live entry
    for (int64_t i = tid; i < len; i += kSelectThreads) index[i] = static_cast<int32_t>(i);
    if (tid == 0) a.count[h] = len;
    return;
  }
  float* s = scores + static_cast<int64_t>(h) * G * a.max_pages;
  auto entries = [&](int64_t P) { return static_cast<int>(min64(a.page, len - P * a.page)); };
  if (hsa) {
    for (int g = 0; g < G; ++g) {
      const float* sg = s + static_cast<int64_t>(g) * a.max_pages;
      float m = -INFINITY;
      for (int64_t P = tid; P < n_pages; P += kSelectThreads) m = fmaxf(m, sg[P]);
      m = block_reduce(m, [](float x, float y) { return fmaxf(x, y); }, s_part);
      float z = 0.f;
      for (int64_t P = tid; P < n_pages; P += kSelectThreads) z += entries(P) * __expf(sg[P] - m);
      z = block_reduce(z, [](float x, float y) { return x + y; }, s_part);
      if (tid == 0) {
        s_max[g] = m;
        s_inv_z[g] = 1.f / z;
      }
    }
    __syncthreads();
    for (int64_t P = tid; P < n_pages; P += kSelectThreads) {
      float w = 0.f;
      for (int g = 0; g < G; ++g) w += __expf(s[static_cast<int64_t>(g) * a.max_pages + P] - s_max[g]) * s_inv_z[g];
      s[P] = w;  // this thread alone reads and writes page P
    }
    __syncthreads();
  }
  // Radix select of the threshold key: weight above it < keep <= weight at or above it.
  if (tid == 0) {
    s_prefix = 0;
    s_rem = a.keep;
  }
  unsigned mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kSelectThreads) hist[b] = 0;
    __syncthreads();
    const unsigned prefix = s_prefix;
    for (int64_t P = tid; P < n_pages; P += kSelectThreads) {
      const unsigned key = ordered_bits(s[P]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], hsa ? entries(P) : 1u);
    }
    __syncthreads();
    if (tid == 0) {
      long long cum = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= s_rem || b == 0) {
          s_prefix = prefix | (static_cast<unsigned>(b) << shift);
          s_rem -= cum;
          break;
        }
        cum += hist[b];
      }
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const unsigned thr = s_prefix;
  const long long rem = s_rem;
  // Emission in page order.
  long long tie_carry = 0, out_carry = 0;
  for (int64_t base = 0; base < n_pages; base += kSelectThreads) {
    const int64_t P = base + tid;
    const bool live = P < n_pages;
    const unsigned key = live ? ordered_bits(s[P]) : 0u;
    const int n = live ? entries(P) : 0;
    const bool above = live && key > thr, tie = live && key == thr;
    int tie_before, tie_total;
    Scan(scan_tmp).ExclusiveSum(tie ? (hsa ? n : 1) : 0, tie_before, tie_total);
    __syncthreads();
    const long long before = tie_carry + tie_before;
    int take = 0;
    if (above) take = n;
    else if (tie) take = hsa ? static_cast<int>(max64(0, min64(n, rem - before))) : (before < rem ? n : 0);
    int out_before, out_total;
    Scan(scan_tmp).ExclusiveSum(take, out_before, out_total);
    __syncthreads();
    const int64_t o = out_carry + out_before;
    for (int j = 0; j < take; ++j) index[o + j] = static_cast<int32_t>(P * a.page + j);
    tie_carry += tie_total;
    out_carry += out_total;
  }
  if (tid == 0) a.count[h] = out_carry;
}

template <typename T>
cudaError_t launch_score(const PageSelectArgs& a, float* ws, dim3 grid, cudaStream_t stream) {
  const int G = a.group;
  if (G <= 1) score_kernel<T, 1><<<grid, kScoreThreads, 0, stream>>>(a, ws);
  else if (G <= 2) score_kernel<T, 2><<<grid, kScoreThreads, 0, stream>>>(a, ws);
  else if (G <= 4) score_kernel<T, 4><<<grid, kScoreThreads, 0, stream>>>(a, ws);
  else if (G <= 8) score_kernel<T, 8><<<grid, kScoreThreads, 0, stream>>>(a, ws);
  else score_kernel<T, 16><<<grid, kScoreThreads, 0, stream>>>(a, ws);
  return cudaGetLastError();
}

}  // namespace

cudaError_t page_minmax_update(const PageMinMaxArgs& a, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.head_dim <= 0 || a.head_dim > kMaxDim || a.page <= 0 || a.max_span <= 0 || !a.k ||
      !a.offset || !a.length || !a.kmin || !a.kmax || a.page_capacity <= 0 || a.max_span > 65535)
    return cudaErrorInvalidValue;
  const dim3 grid(a.n_head_kv, static_cast<unsigned>(a.max_span));
  const int threads = (a.head_dim + 31) / 32 * 32;
  switch (a.dtype) {
    case DType::kFloat32: page_minmax_kernel<float><<<grid, threads, 0, stream>>>(a); break;
    case DType::kBFloat16: page_minmax_kernel<__nv_bfloat16><<<grid, threads, 0, stream>>>(a); break;
    case DType::kFloat16: page_minmax_kernel<__half><<<grid, threads, 0, stream>>>(a); break;
  }
  return cudaGetLastError();
}

size_t page_select_workspace_bytes(const PageSelectArgs& a) {
  return static_cast<size_t>(a.n_head_kv) * static_cast<size_t>(a.group) * static_cast<size_t>(a.max_pages) * sizeof(float);
}

cudaError_t page_select(const PageSelectArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.group < 1 || a.group > kMaxGroup || a.head_dim <= 0 || a.head_dim > kMaxDim ||
      a.page <= 0 || a.keep <= 0 || a.max_pages <= 0 || a.max_pages > a.page_capacity || !a.q || !a.kmin ||
      !a.kmax || !a.length || !a.index || !a.count || !workspace ||
      (a.mode == PageScore::kHsa && (a.k1 < 1 || a.k1 > a.head_dim || a.index_stride < a.keep)) ||
      (a.mode == PageScore::kQuest && a.index_stride < a.keep * a.page))
    return cudaErrorInvalidValue;
  const int64_t blocks = (a.max_pages + kScoreThreads - 1) / kScoreThreads;
  if (blocks > 65535) return cudaErrorInvalidValue;
  float* ws = static_cast<float*>(workspace);
  const dim3 grid(a.n_head_kv, static_cast<unsigned>(blocks));
  cudaError_t err = cudaSuccess;
  switch (a.dtype) {
    case DType::kFloat32: err = launch_score<float>(a, ws, grid, stream); break;
    case DType::kBFloat16: err = launch_score<__nv_bfloat16>(a, ws, grid, stream); break;
    case DType::kFloat16: err = launch_score<__half>(a, ws, grid, stream); break;
  }
  if (err != cudaSuccess) return err;
  select_kernel<<<a.n_head_kv, kSelectThreads, 0, stream>>>(a, ws);
  return cudaGetLastError();
}

}  // namespace kvscope::kernels
