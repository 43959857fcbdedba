// Page min/max maintenance, page scoring and row selection for HSA / Quest (see page_select.h).
//
// page_select runs two kernels:
//   1. score: grid (KV head, block of 32 pages). Every block loads the group's queries into shared
//      memory (fp32), picks HSA's top-k1 channels by rank counting over Σ_g|q| (D <= 256 values),
//      then each warp scores a page at a time, its lanes splitting the channels of the page's
//      min/max row (coalesced loads, no serial dependent chain). HSA writes ŝ/τ per group member,
//      Quest the group-summed upper bound.
//   2. select: one 1024-thread block per KV head, each thread a contiguous run of pages. HSA turns
//      the per-member logits into Σ_g π per page (a page's entries share one logit, so a token
//      softmax is a page softmax weighted by the entries per page; all G maxima / sums reduced
//      together); then a 4-pass 8-bit radix select over the order-preserving bits of the page
//      scores, weighted by entries (HSA) or 1 (Quest), finds the threshold score (warp 0 finds the
//      bin with a shuffle scan); two block scans emit rows in ascending order (strictly-above
//      pages whole, ties in page order).
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

/// Pages one warp scores in turn (a block of kScoreThreads covers kScoreWarps * kPagesPerWarp pages).
constexpr int kScoreWarps = kScoreThreads / 32;
constexpr int kPagesPerWarp = 4;
constexpr int kPagesPerBlock = kScoreWarps * kPagesPerWarp;

template <typename T, int kG>
__global__ void __launch_bounds__(kScoreThreads) score_kernel(const PageSelectArgs a, float* scores) {
  __shared__ float qs[kMaxGroup * kMaxDim];
  __shared__ float mag[kMaxDim];
  __shared__ int sel[kMaxDim];
  __shared__ unsigned char use_max[kMaxDim];
  __shared__ float inv_tau[kMaxGroup];
  const int h = blockIdx.x, G = a.group, D = a.head_dim, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t len = a.length[h], n_pages = (len + a.page - 1) / a.page;
  const int64_t first_page = static_cast<int64_t>(blockIdx.y) * kPagesPerBlock;
  if (first_page >= n_pages) return;  // uniform over the block
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
    // SparQ temperature per member g (warp g): sqrt(D · Σ|q̂_g| / Σ|q_g|).
    for (int g = warp; g < G; g += kScoreWarps) {
      float num = 0.f, den = 0.f;
      for (int r = lane; r < k1; r += 32) num += fabsf(qs[g * D + sel[r]]);
      for (int c = lane; c < D; c += 32) den += fabsf(qs[g * D + c]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        num += __shfl_xor_sync(0xffffffffu, num, off);
        den += __shfl_xor_sync(0xffffffffu, den, off);
      }
      if (lane == 0) inv_tau[g] = rsqrtf((den > 0.f ? num / den : 1.f) * static_cast<float>(D));
    }
    __syncthreads();
  }
  // One warp per page: lanes split the channels (coalesced within the page's row), then reduce.
  for (int i = 0; i < kPagesPerWarp; ++i) {
    const int64_t P = first_page + static_cast<int64_t>(i) * kScoreWarps + warp;
    if (P >= n_pages) break;
    const int64_t row = (static_cast<int64_t>(h) * a.page_capacity + P) * D;
    const T* mn = static_cast<const T*>(a.kmin) + row;
    const T* mx = static_cast<const T*>(a.kmax) + row;
    float* out = scores + static_cast<int64_t>(h) * G * a.max_pages + P;
    float acc[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) acc[g] = 0.f;
    if (hsa) {
      for (int r = lane; r < k1; r += 32) {
        const int c = sel[r];
        const float b = use_max[r] ? to_f<T>(mx[c]) : to_f<T>(mn[c]);
#pragma unroll
        for (int g = 0; g < kG; ++g)
          if (g < G) acc[g] = fmaf(qs[g * D + c], b, acc[g]);
      }
    } else {
      for (int c = lane; c < D; c += 32) {
        const float lo = to_f<T>(mn[c]), hi = to_f<T>(mx[c]);
#pragma unroll
        for (int g = 0; g < kG; ++g)
          if (g < G) {
            const float x = qs[g * D + c];
            acc[0] = fmaf(x, x >= 0.f ? hi : lo, acc[0]);  // Quest: group-summed bound
          }
      }
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g < G && (hsa || g == 0)) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], off);
      }
    }
    if (lane == 0) {
      if (hsa) {
#pragma unroll
        for (int g = 0; g < kG; ++g)
          if (g < G) out[static_cast<int64_t>(g) * a.max_pages] = acc[g] * inv_tau[g];
      } else {
        out[0] = acc[0];
      }
    }
  }
}

// ---- selection --------------------------------------------------------------------------------

/// Unsigned bits that order like the floats (negative values flipped).
__device__ __forceinline__ unsigned ordered_bits(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Reduces G values per thread over the block with `op`; thread-uniform G <= kMaxGroup. The result
/// of member g lands in out[g] (shared). Two __syncthreads.
template <typename Op>
__device__ void block_reduce_group(const float (&v)[kMaxGroup], int G, Op op, float (*part)[32], float* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    float x = v[g];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
    if (lane == 0) part[g][warp] = x;
  }
  __syncthreads();
  if (warp < G) {
    float x = part[warp][lane];  // kSelectThreads / 32 == 32 warps
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
    if (lane == 0) out[warp] = x;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(const PageSelectArgs a, float* scores) {
  static_assert(kSelectThreads == 1024, "block_reduce_group assumes 32 warps");
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float part[kMaxGroup][32];
  __shared__ float s_max[kMaxGroup], s_sum[kMaxGroup];
  __shared__ unsigned hist[256];
  __shared__ unsigned s_prefix;
  __shared__ long long s_rem;
  const int h = blockIdx.x, G = a.group, tid = threadIdx.x, lane = tid & 31;
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
  // Each thread owns a contiguous run of pages, so a scan over threads orders pages.
  const int64_t per = (n_pages + kSelectThreads - 1) / kSelectThreads;
  const int64_t p0 = min64(tid * per, n_pages), p1 = min64(p0 + per, n_pages);
  if (hsa) {
    // Σ_g softmax over tokens: a page's entries share one logit, so Z_g = Σ_P n_P exp(ŝ_gP - m_g).
    float m[kMaxGroup], z[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) m[g] = -INFINITY, z[g] = 0.f;
    for (int64_t P = p0; P < p1; ++P)
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) m[g] = fmaxf(m[g], s[static_cast<int64_t>(g) * a.max_pages + P]);
    block_reduce_group(m, G, [](float x, float y) { return fmaxf(x, y); }, part, s_max);
    for (int64_t P = p0; P < p1; ++P) {
      const float n = static_cast<float>(entries(P));
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) z[g] += n * __expf(s[static_cast<int64_t>(g) * a.max_pages + P] - s_max[g]);
    }
    block_reduce_group(z, G, [](float x, float y) { return x + y; }, part, s_sum);
    for (int64_t P = p0; P < p1; ++P) {
      float w = 0.f;
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) w += __expf(s[static_cast<int64_t>(g) * a.max_pages + P] - s_max[g]) / s_sum[g];
      s[P] = w;  // this thread alone reads and writes page P
    }
  }
  // Radix select of the threshold key: weight above it < keep <= weight at or above it.
  if (tid == 0) {
    s_prefix = 0;
    s_rem = a.keep;
  }
  unsigned mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (tid < 256) hist[tid] = 0;
    __syncthreads();
    const unsigned prefix = s_prefix;
    for (int64_t P = p0; P < p1; ++P) {
      const unsigned key = ordered_bits(s[P]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], hsa ? entries(P) : 1u);
    }
    __syncthreads();
    if (tid < 32) {  // warp 0: lane L owns bins 255-8L .. 248-8L (descending)
      unsigned own[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += own[j] = hist[255 - (lane * 8 + j)];
      unsigned incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned y = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += y;
      }
      const long long rem = s_rem;
      const unsigned hit = __ballot_sync(0xffffffffu, static_cast<long long>(incl) >= rem);
      const int first = hit ? __ffs(hit) - 1 : 31;
      if (lane == first) {
        long long cum = static_cast<long long>(incl) - sum;
        int bin = 255 - (lane * 8 + 7);
        for (int j = 0; j < 8; ++j) {
          if (cum + own[j] >= rem || j == 7) {
            bin = 255 - (lane * 8 + j);
            break;
          }
          cum += own[j];
        }
        s_prefix = prefix | (static_cast<unsigned>(bin) << shift);
        s_rem = rem - cum;
      }
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const unsigned thr = s_prefix;
  const long long rem = s_rem;
  // Emission in page order: ties (weight) before this thread's run, then rows before it.
  int tie_w = 0;
  for (int64_t P = p0; P < p1; ++P)
    if (ordered_bits(s[P]) == thr) tie_w += hsa ? entries(P) : 1;
  int tie_before = 0, tie_total = 0;
  Scan(scan_tmp).ExclusiveSum(tie_w, tie_before, tie_total);
  __syncthreads();
  int take_total = 0;
  {
    long long tb = tie_before;
    for (int64_t P = p0; P < p1; ++P) {
      const unsigned key = ordered_bits(s[P]);
      const int n = entries(P);
      if (key > thr) take_total += n;
      else if (key == thr) {
        take_total += hsa ? static_cast<int>(max64(0, min64(n, rem - tb))) : (tb < rem ? n : 0);
        tb += hsa ? n : 1;
      }
    }
  }
  int out_before = 0, out_total = 0;
  Scan(scan_tmp).ExclusiveSum(take_total, out_before, out_total);
  {
    long long tb = tie_before;
    int64_t o = out_before;
    for (int64_t P = p0; P < p1; ++P) {
      const unsigned key = ordered_bits(s[P]);
      const int n = entries(P);
      int take = 0;
      if (key > thr) take = n;
      else if (key == thr) {
        take = hsa ? static_cast<int>(max64(0, min64(n, rem - tb))) : (tb < rem ? n : 0);
        tb += hsa ? n : 1;
      }
      for (int j = 0; j < take; ++j) index[o + j] = static_cast<int32_t>(P * a.page + j);
      o += take;
    }
  }
  if (tid == 0) a.count[h] = out_total;
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
  const int64_t blocks = (a.max_pages + kPagesPerBlock - 1) / kPagesPerBlock;
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
