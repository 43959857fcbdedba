// Page min/max maintenance, page scoring and row selection for HSA / Quest (see page_select.h).
//
// page_select runs two kernels:
//   1. score: grid (KV head, block of 32 pages). Every block loads the group's queries into shared
//      memory (fp32); for HSA the block ranks the channels of Σ_g|q| to pick the top k1
//      (top_channels). With K and offsets given, the warp owning a head's last page recomputes its
//      min/max first (the decode-append upkeep, fused). Each warp then scores 4 pages, its lanes
//      splitting the channels of the pages' min/max rows, the loads of all 4 pages in flight
//      together. HSA writes ŝ/τ per group member, Quest the group-summed upper bound.
//      (The selection chain of one layer, measured per phase with clock64 on an H200: see
//      docs/performance.md.)
//   2. select: one 512-thread block per KV head. HSA turns the per-member logits into Σ_g π per
//      page (a page's entries share one logit, so a token softmax is a page softmax weighted by the
//      entries per page; block-wide max, then block-wide Σ n·exp), from scores staged in shared
//      memory when they fit (kStageBytes). The page keys
//      (order-preserving bits) stay in registers, striped over threads; a 4-pass 8-bit radix select
//      with warp-aggregated histogram adds finds the threshold key (weighted by entries for HSA,
//      1 for Quest); one block scan of (above, tie) weights places each thread's contiguous run of
//      pages, which emits its rows in ascending order (strictly-above pages whole, ties in page
//      order).
// The score workspace is fp32 [n_head_kv, G, max_pages].
#include <cub/block/block_scan.cuh>

#include "dtype.cuh"
#include "kvscope/kernels/page_select.h"
#include "pdl.cuh"

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::to_f;

constexpr int kMaxDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kScoreThreads = 256;
constexpr int kSelectThreads = 512;



__device__ __forceinline__ int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__device__ __forceinline__ int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

// ---- page min/max ---------------------------------------------------------------------------

/// Channel c of one page's summaries: mn[c] / mx[c] = min / max over its `rows` rows (kr: the page's
/// first row of K, row stride D). Exact: the results are values of T.
template <typename T>
__device__ __forceinline__ void page_channel_minmax(const T* kr, int64_t rows, int D, int c, T* mn, T* mx) {
  float lo = to_f<T>(kr[c]), hi = lo;
  for (int64_t r = 1; r < rows; ++r) {
    const float x = to_f<T>(kr[r * D + c]);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  }
  mn[c] = from_f<T>(lo);
  mx[c] = from_f<T>(hi);
}

template <typename T>
__global__ void page_minmax_kernel(const PageMinMaxArgs a) {
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, c = threadIdx.x, D = a.head_dim;
  const int64_t len = a.length[h];
  const int64_t P = (a.first_page ? a.first_page[h] : max64(len - 1, 0) / a.page) + blockIdx.y, first = P * a.page;
  if (c >= D || first >= len || P >= a.page_capacity) return;
  const int64_t o = (static_cast<int64_t>(h) * a.page_capacity + P) * D;
  page_channel_minmax(static_cast<const T*>(a.k) + (a.offset[h] + first) * D, min64(len, first + a.page) - first, D, c,
                      static_cast<T*>(a.kmin) + o, static_cast<T*>(a.kmax) + o);
}

// ---- scoring ----------------------------------------------------------------------------------

/// Pages one warp scores in turn (a block of kScoreThreads covers kScoreWarps * kPagesPerWarp pages).
constexpr int kScoreWarps = kScoreThreads / 32;
constexpr int kPagesPerWarp = 4;
constexpr int kPagesPerBlock = kScoreWarps * kPagesPerWarp;

/// HSA step 1 (RocketKV §3.4 Alg. 1): the top-k1 channels of Σ_g|q_g| (ties: lower channel first),
/// written in rank order to sel[0..k1), with use_max[r] = (Σ_g q_g[sel[r]] >= 0). Called by the whole
/// block. Every channel's rank is counted against all D magnitudes, each of kScoreThreads / D
/// threads per channel counting a slice of them (4 values per shared-memory load); the slices meet
/// in shared memory. mag: D floats of scratch, rank: D ints of scratch.
__device__ void top_channels(const float* qs, int G, int D, int k1, float* mag, int* rank, int* sel,
                             unsigned char* use_max) {
  const int tid = threadIdx.x;
  for (int c = tid; c < D; c += kScoreThreads) {
    float m = 0.f;
    for (int g = 0; g < G; ++g) m += fabsf(qs[g * D + c]);
    mag[c] = m;
    rank[c] = 0;
  }
  __syncthreads();
  const int splits = kScoreThreads / D, span = D / splits;  // D in {64, 128, 256}: 4, 2, 1 slices
  if (kScoreThreads % D == 0 && span % 4 == 0) {
    const int c = tid % D, part = tid / D;
    const float m = mag[c];
    int r = 0;
    const float4* m4 = reinterpret_cast<const float4*>(mag + part * span);
    for (int j4 = 0; j4 < span / 4; ++j4) {
      const float4 v = m4[j4];
      const int j = part * span + 4 * j4;
      r += (v.x > m) || (v.x == m && j < c);
      r += (v.y > m) || (v.y == m && j + 1 < c);
      r += (v.z > m) || (v.z == m && j + 2 < c);
      r += (v.w > m) || (v.w == m && j + 3 < c);
    }
    atomicAdd(&rank[c], r);
  } else {
    for (int c = tid; c < D; c += kScoreThreads) {
      int r = 0;
      const float m = mag[c];
      for (int j = 0; j < D; ++j) r += (mag[j] > m) || (mag[j] == m && j < c);
      rank[c] = r;
    }
  }
  __syncthreads();
  for (int c = tid; c < D; c += kScoreThreads)
    if (rank[c] < k1) {
      float s = 0.f;
      for (int g = 0; g < G; ++g) s += qs[g * D + c];
      sel[rank[c]] = c;
      use_max[rank[c]] = s >= 0.f;
    }
}

template <typename T, int kG>
__global__ void __launch_bounds__(kScoreThreads, kG >= 16 ? 2 : 4) score_kernel(const PageSelectArgs a, float* scores) {
  __shared__ float qs[kMaxGroup * kMaxDim];
  __shared__ int sel[kMaxDim];
  __shared__ unsigned char use_max[kMaxDim];
  __shared__ float inv_tau[kMaxGroup];
  __shared__ __align__(16) float mag[kMaxDim];
  __shared__ int rank[kMaxDim];
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, G = a.group, D = a.head_dim, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t len = a.length[h], n_pages = (len + a.page - 1) / a.page;
  const int64_t first_page = static_cast<int64_t>(blockIdx.y) * kPagesPerBlock;
  if (first_page >= n_pages) return;  // uniform over the block
  const T* q = static_cast<const T*>(a.q) + static_cast<int64_t>(h) * G * a.q_stride;
  for (int g = warp; g < G; g += kScoreWarps)
    for (int c = lane; c < D; c += 32) qs[g * D + c] = to_f<T>(q[g * a.q_stride + c]);
  __syncthreads();
  const bool hsa = a.mode == PageScore::kHsa;
  const int k1 = hsa ? a.k1 : D;
  if (hsa) {
    top_channels(qs, G, D, k1, mag, rank, sel, use_max);
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
  // Warp w scores pages first_page + i * kScoreWarps + w (i < kPagesPerWarp); its lanes split the
  // channels of each page's min/max row (coalesced), and the loads of all its pages for one slice of
  // channels are issued together before any is used.
  const T* kmin = static_cast<const T*>(a.kmin) + static_cast<int64_t>(h) * a.page_capacity * D;
  const T* kmax = static_cast<const T*>(a.kmax) + static_cast<int64_t>(h) * a.page_capacity * D;
  if (a.k) {  // fused upkeep: the warp that scores the head's last page recomputes its min/max first
    const int64_t last = n_pages - 1, rel = last - first_page;
    if (rel < kPagesPerBlock && static_cast<int>(rel % kScoreWarps) == warp) {  // warp-uniform
      const T* kr = static_cast<const T*>(a.k) + (a.offset[h] + last * a.page) * D;
      const int64_t o = (static_cast<int64_t>(h) * a.page_capacity + last) * D;
      for (int c = lane; c < D; c += 32)
        page_channel_minmax(kr, len - last * a.page, D, c, static_cast<T*>(a.kmin) + o, static_cast<T*>(a.kmax) + o);
      __threadfence_block();  // this warp reads the row back below
      __syncwarp();
    }
  }
  int64_t row[kPagesPerWarp];
  bool live[kPagesPerWarp];
#pragma unroll
  for (int i = 0; i < kPagesPerWarp; ++i) {
    const int64_t P = first_page + static_cast<int64_t>(i) * kScoreWarps + warp;
    live[i] = P < n_pages;
    row[i] = (live[i] ? P : 0) * D;
  }
  float acc[kPagesPerWarp][kG];
#pragma unroll
  for (int i = 0; i < kPagesPerWarp; ++i)
#pragma unroll
    for (int g = 0; g < kG; ++g) acc[i][g] = 0.f;
  // Channel slices unrolled (D <= 256: at most 8), so every slice's loads can be in flight together.
  // Lanes split the selected channels; each slice's loads for all the warp's pages go out together.
  for (int r = lane; r < k1; r += 32) {
    if (hsa) {
      const int c = sel[r];
      const T* src = use_max[r] ? kmax : kmin;
      float b[kPagesPerWarp];
#pragma unroll
      for (int i = 0; i < kPagesPerWarp; ++i) b[i] = live[i] ? to_f<T>(src[row[i] + c]) : 0.f;
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) {
          const float x = qs[g * D + c];
#pragma unroll
          for (int i = 0; i < kPagesPerWarp; ++i) acc[i][g] = fmaf(x, b[i], acc[i][g]);
        }
    } else {  // Quest: the group-summed upper bound, channel c = r
      float lo[kPagesPerWarp], hi[kPagesPerWarp];
#pragma unroll
      for (int i = 0; i < kPagesPerWarp; ++i) {
        lo[i] = live[i] ? to_f<T>(kmin[row[i] + r]) : 0.f;
        hi[i] = live[i] ? to_f<T>(kmax[row[i] + r]) : 0.f;
      }
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) {
          const float x = qs[g * D + r];
#pragma unroll
          for (int i = 0; i < kPagesPerWarp; ++i) acc[i][0] = fmaf(x, x >= 0.f ? hi[i] : lo[i], acc[i][0]);
        }
    }
  }
  const int outs = hsa ? G : 1;
#pragma unroll
  for (int i = 0; i < kPagesPerWarp; ++i) {
#pragma unroll
    for (int g = 0; g < kG; ++g)
      if (g < outs) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[i][g] += __shfl_xor_sync(0xffffffffu, acc[i][g], off);
      }
    if (lane == 0 && live[i]) {
      float* out = scores + static_cast<int64_t>(h) * G * a.max_pages + first_page + static_cast<int64_t>(i) * kScoreWarps + warp;
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < outs) out[static_cast<int64_t>(g) * a.max_pages] = hsa ? acc[i][g] * inv_tau[g] : acc[i][g];
    }
  }
}

// ---- selection --------------------------------------------------------------------------------

/// Unsigned bits that order like the floats (negative values flipped).
__device__ __forceinline__ unsigned ordered_bits(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Reduces v[g] (g < G) over the block with op: warp shuffles (the members' chains interleaved),
/// then warp g folds the warps' partials of member g; out[g] = fin(total). part: shared scratch,
/// [kMaxGroup][32]. Called by the whole block; ends with a barrier.
template <int kWarps, int kG, typename Op, typename Fin>
__device__ __forceinline__ void block_reduce_members(float (&v)[kG], int G, float (*part)[32], float* out, float identity,
                                                     Op op, Fin fin) {
  static_assert(kWarps <= 32 && kG <= kWarps, "one warp per member");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int g = 0; g < kG; ++g) v[g] = op(v[g], __shfl_xor_sync(0xffffffffu, v[g], off));
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < kG; ++g)
      if (g < G) part[g][warp] = v[g];
  __syncthreads();
  if (warp < G) {
    float x = lane < kWarps ? part[warp][lane] : identity;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
    if (lane == 0) out[warp] = fin(x);
  }
  __syncthreads();
}

/// Striped pages per thread whose keys the select kernel keeps in registers (6144 pages per head
/// with 512 threads; more would spill at 128 registers); later pages are re-read from the workspace
/// in every pass.
constexpr int kRegPages = 12;



/// Dynamic shared memory the select kernel may stage page scores in: with the opt-in attribute
/// (above 48 KB) sm_90 gives a block up to 227 KB, next to the kernel's ~6 KB of static shared
/// memory; one 512-thread block per KV head needs no more room on its SM. (RocketKV at t = 4,096 of
/// 32K: ~7.5K pages x G 4 = 119 KB.)
constexpr size_t kStageBytes = 200 * 1024;
/// Dynamic shared memory a launch gets without the opt-in (48 KB less the static ~6 KB).
constexpr size_t kNoOptInBytes = 40 * 1024;

template <int kG>
__global__ void __launch_bounds__(kSelectThreads) select_kernel(const PageSelectArgs a, float* scores, bool staged) {
  static_assert(kSelectThreads % 32 == 0 && kSelectThreads <= 1024, "whole warps, at most 32");
  constexpr int kSelectWarps = kSelectThreads / 32;
  using Scan = cub::BlockScan<unsigned long long, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float part[kMaxGroup][32];
  __shared__ float s_max[kMaxGroup], s_inv[kMaxGroup];
  __shared__ unsigned hist[2][256];
  __shared__ unsigned s_prefix[2];
  __shared__ long long s_rem[2];
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, G = a.group, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool hsa = a.mode == PageScore::kHsa;
  // Lambdas capture these locals, never `a` (taking the parameter's address copies it to the stack).
  const int64_t page = a.page, max_pages = a.max_pages, keep = a.keep;
  const int64_t len = a.length[h], n_pages = (len + page - 1) / page;
  int32_t* index = a.index + static_cast<int64_t>(h) * a.index_stride;
  if (hsa ? len <= keep : n_pages <= keep) {  // dense: every live entry
    for (int64_t i = tid; i < len; i += kSelectThreads) index[i] = static_cast<int32_t>(i);
    if (tid == 0) a.count[h] = len;
    return;
  }
  // The head's page scores, staged in shared memory when they fit (every later read then costs
  // shared-memory latency instead of L2's); ss: the row stride of member g's scores.
  extern __shared__ float stage[];
  float* s = scores + static_cast<int64_t>(h) * G * max_pages;
  int64_t ss = max_pages;
  if (staged) {
    const int rows = hsa ? G : 1;
#pragma unroll 4
    for (int64_t P = tid; P < n_pages; P += kSelectThreads)
#pragma unroll
      for (int g = 0; g < kG; ++g)  // the members' loads in flight together
        if (g < rows) stage[g * n_pages + P] = s[g * max_pages + P];
    __syncthreads();
    s = stage;
    ss = n_pages;
  }
  float* keys = s;  // row 0 of the head's scores, overwritten page by page with the selection keys
  auto entries = [=](int64_t P) { return static_cast<unsigned>(min64(page, len - P * page)); };
  const int64_t warp_first = tid - lane;  // the warp's first striped page (loops stay warp-uniform)

  // 1. HSA: Σ_g softmax over tokens. A page's entries share one logit, so the normaliser of member
  //    g is Z_g = Σ_P n_P exp(ŝ_gP - m_g).
  if (hsa) {
    // Max, then Σ n·exp(x - max), each reduced over the block with cheap ops.
    float m[kG], z[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) m[g] = -INFINITY, z[g] = 0.f;
    for (int64_t P = tid; P < n_pages; P += kSelectThreads)
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) m[g] = fmaxf(m[g], s[g * ss + P]);
    block_reduce_members<kSelectWarps>(m, G, part, s_max, -INFINITY, [](float x, float y) { return fmaxf(x, y); },
                                       [](float x) { return x; });
    for (int64_t P = tid; P < n_pages; P += kSelectThreads) {
      const float n = static_cast<float>(entries(P));
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) z[g] += n * __expf(s[g * ss + P] - s_max[g]);
    }
    block_reduce_members<kSelectWarps>(z, G, part, s_inv, 0.f, [](float x, float y) { return x + y; },
                                       [](float x) { return 1.f / x; });
  }

  // 2. Selection keys of the striped pages tid + i * kSelectThreads: registers for the first kRegPages, and
  //    the workspace for all (the emission below reads contiguous runs).
  auto key_of = [&](int64_t P) {
    float v = 0.f;
    if (hsa) {
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) v += __expf(s[g * ss + P] - s_max[g]) * s_inv[g];
    } else {
      v = s[P];
    }
    return ordered_bits(v);
  };
  unsigned kr[kRegPages];
#pragma unroll
  for (int i = 0; i < kRegPages; ++i) {
    const int64_t P = tid + static_cast<int64_t>(i) * kSelectThreads;
    kr[i] = P < n_pages ? key_of(P) : 0u;
    if (P < n_pages) keys[P] = __uint_as_float(kr[i]);
  }
  for (int64_t P = tid + static_cast<int64_t>(kRegPages) * kSelectThreads; P < n_pages; P += kSelectThreads)
    keys[P] = __uint_as_float(key_of(P));

  // 3. Radix select of the threshold key (weight above it < keep <= weight at or above it), four
  //    8-bit passes. Histogram adds are aggregated per warp over lanes with the same bin (the top
  //    bits of similar scores mostly share one bin); the next pass's histogram is cleared meanwhile.
  if (tid < 256) hist[0][tid] = 0;
  if (tid == 0) s_prefix[0] = 0, s_rem[0] = keep;
  __syncthreads();
  unsigned mask = 0;
#pragma unroll 1
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass, b = pass & 1;
    const unsigned prefix = s_prefix[b];
    unsigned* hc = hist[b];
    auto count = [&](int64_t P, unsigned key, bool valid) {
      const bool on = valid && (key & mask) == prefix;
      const unsigned act = __ballot_sync(0xffffffffu, on);
      if (on) {
        const unsigned bin = (key >> shift) & 255u;
        const unsigned peers = __match_any_sync(act, bin);
        // HSA weighs a page by its entries: every page holds `page` but the head's last one, whose
        // lane adds the difference itself (a reduce over the peers would serialise the groups).
        const unsigned per_page = hsa ? static_cast<unsigned>(page) : 1u;
        if (lane == __ffs(peers) - 1) atomicAdd(&hc[bin], per_page * static_cast<unsigned>(__popc(peers)));
        if (hsa && P == n_pages - 1) atomicAdd(&hc[bin], entries(P) - per_page);  // unsigned wrap: subtracts
      }
    };
#pragma unroll
    for (int i = 0; i < kRegPages; ++i) {
      const int64_t P = tid + static_cast<int64_t>(i) * kSelectThreads;
      if (warp_first + static_cast<int64_t>(i) * kSelectThreads >= n_pages) break;  // warp-uniform
      count(P, kr[i], P < n_pages);
    }
    for (int64_t wf = warp_first + static_cast<int64_t>(kRegPages) * kSelectThreads; wf < n_pages; wf += kSelectThreads) {
      const int64_t P = wf + lane;
      count(P, P < n_pages ? __float_as_uint(keys[P]) : 0u, P < n_pages);
    }
    if (tid < 256) hist[b ^ 1][tid] = 0;
    __syncthreads();
    if (warp == 0) {  // lane L owns bins 255-8L .. 248-8L (descending)
      unsigned own[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += own[j] = hc[255 - (lane * 8 + j)];
      unsigned incl = sum;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned y = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += y;
      }
      const long long rem = s_rem[b];
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
        s_prefix[b ^ 1] = prefix | (static_cast<unsigned>(bin) << shift);
        s_rem[b ^ 1] = rem - cum;
      }
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const unsigned thr = s_prefix[0];  // pass 3 wrote slot 0
  const long long rem = s_rem[0];

  // 4. Emission in page order over contiguous runs: one scan of (weight strictly above the
  //    threshold, tie weight) packed in 32-bit halves. Ties are taken in page order up to `rem`:
  //    HSA entry by entry (the first entries of the boundary page), Quest page by page; every page
  //    before the last is full, so the tie rows taken before a run are min(rem, ties before) * page.
  const int64_t per = (n_pages + kSelectThreads - 1) / kSelectThreads;
  const int64_t p0 = min64(tid * per, n_pages), p1 = min64(p0 + per, n_pages);
  unsigned long long run_w = 0;
  for (int64_t P = p0; P < p1; ++P) {
    const unsigned key = __float_as_uint(keys[P]);
    if (key > thr) run_w += static_cast<unsigned long long>(entries(P)) << 32;
    else if (key == thr) run_w += hsa ? entries(P) : 1u;
  }
  unsigned long long before = 0;
  Scan(scan_tmp).ExclusiveSum(run_w, before);
  const long long tie_before = static_cast<long long>(before & 0xffffffffull);
  long long tb = tie_before;
  int64_t o = static_cast<int64_t>(before >> 32) + (hsa ? min64(rem, tie_before) : min64(rem, tie_before) * page);
  for (int64_t P = p0; P < p1; ++P) {
    const unsigned key = __float_as_uint(keys[P]);
    const int64_t n = entries(P);
    int64_t take = 0;
    if (key > thr) {
      take = n;
    } else if (key == thr) {
      take = hsa ? max64(0, min64(n, rem - tb)) : (tb < rem ? n : 0);
      tb += hsa ? n : 1;
    }
    for (int64_t j = 0; j < take; ++j) index[o + j] = static_cast<int32_t>(P * page + j);
    o += take;
  }
  if (p0 < p1 && p1 == n_pages) a.count[h] = o;  // the thread holding the last page
}

template <typename T>
cudaError_t launch_score(const PageSelectArgs& a, float* ws, dim3 grid, cudaStream_t stream) {
  const int G = a.group;
  const auto kernel = G <= 1 ? score_kernel<T, 1> : G <= 2 ? score_kernel<T, 2> : G <= 4 ? score_kernel<T, 4>
                    : G <= 8 ? score_kernel<T, 8> : score_kernel<T, 16>;
  return launch_pdl(kernel, grid, kScoreThreads, 0, stream, a, ws);
}

}  // namespace


cudaError_t page_minmax_update(const PageMinMaxArgs& a, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.head_dim <= 0 || a.head_dim > kMaxDim || a.page <= 0 || a.max_span <= 0 || !a.k ||
      !a.offset || !a.length || !a.kmin || !a.kmax || a.page_capacity <= 0 || a.max_span > 65535)
    return cudaErrorInvalidValue;
  const dim3 grid(a.n_head_kv, static_cast<unsigned>(a.max_span));
  const int threads = (a.head_dim + 31) / 32 * 32;
  switch (a.dtype) {
    case DType::kFloat32: return launch_pdl(page_minmax_kernel<float>, grid, threads, 0, stream, a);
    case DType::kBFloat16: return launch_pdl(page_minmax_kernel<__nv_bfloat16>, grid, threads, 0, stream, a);
    case DType::kFloat16: return launch_pdl(page_minmax_kernel<__half>, grid, threads, 0, stream, a);
  }
  return cudaErrorInvalidValue;
}

size_t page_select_workspace_bytes(const PageSelectArgs& a) {
  return static_cast<size_t>(a.n_head_kv) * static_cast<size_t>(a.group) * static_cast<size_t>(a.max_pages) * sizeof(float);
}

cudaError_t page_select(const PageSelectArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.group < 1 || a.group > kMaxGroup || a.head_dim <= 0 || a.head_dim > kMaxDim ||
      a.page <= 0 || a.keep <= 0 || a.max_pages <= 0 || a.max_pages > a.page_capacity || !a.q || !a.kmin ||
      !a.kmax || !a.length || !a.index || !a.count || !workspace ||
      (a.mode == PageScore::kHsa && (a.k1 < 1 || a.k1 > a.head_dim || a.index_stride < a.keep)) ||
      (a.mode == PageScore::kQuest && a.index_stride < a.keep * a.page) || (a.k && !a.offset))
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
  const int G = a.group;
  const size_t stage = static_cast<size_t>(a.mode == PageScore::kHsa ? G : 1) * a.max_pages * sizeof(float);
  const bool staged = stage <= kStageBytes;
  const size_t smem = staged ? stage : 0;
  const auto select = G <= 1 ? select_kernel<1> : G <= 2 ? select_kernel<2> : G <= 4 ? select_kernel<4>
                    : G <= 8 ? select_kernel<8> : select_kernel<16>;
  if (smem > kNoOptInBytes) {  // opt in (not a stream operation: fine under graph capture)
    err = cudaFuncSetAttribute(select, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  return launch_pdl(select, a.n_head_kv, kSelectThreads, smem, stream, a, ws, staged);
}

}  // namespace kvscope::kernels
