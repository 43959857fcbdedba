// Page scoring and row selection for HSA / Quest, with the decode-append page min/max upkeep (see
// page_select.h).
//
// page_select is one launch: a thread-block cluster of nc blocks per KV head (sm_90, CUDA
// Programming Guide "Thread Block Clusters"), block r of the cluster owning the r-th contiguous
// chunk of the head's pages; nc = 8 (kCluster), or 4 or 2 where 8 per head would not fit the
// GPU's SMs in one wave (a batch's B x n_head_kv heads; cluster_blocks). Selection over a whole
// head used to be one block per head (8 blocks on 132 SMs for a Llama-3 layer, each phase a chain
// of barrier and memory latencies); a cluster splits every phase of it, and the blocks meet
// through distributed shared memory.
//   0. Before its wait (pdl.cuh) every block asks L2 for its chunk's min/max rows, which no kernel
//      of the step writes, up to its share of a quarter of the L2 (prefetch_chunk).
//   1. Every block loads the group's queries (fp32, shared memory). HSA ranks the channels of
//      Σ_g|q| (top k1) and computes each member's SparQ temperature; Quest folds the group into two
//      coefficients per channel (Σ_g max(q_g, 0) on Kmax, Σ_g min(q_g, 0) on Kmin, as
//      max(q·Kmax, q·Kmin) = q⁺·Kmax + q⁻·Kmin for Kmax >= Kmin).
//   2. Scoring: the block's warps stream the chunk's min/max rows with 16-byte loads, a slot of L
//      lanes per page, several pages in flight per lane; scores go to shared memory (the global
//      workspace when the chunk does not fit). With K given, the block holding the head's last page
//      recomputes that page's min/max first (the decode-append upkeep, fused; stored to global
//      memory at the end).
//   3. HSA: a page's entries share one logit, so the token softmax of member g is a page softmax
//      weighted by entries per page; each block's max and Σ n·exp are merged over the cluster.
//      Key of a page: Σ_g π_g (HSA), the upper bound (Quest); order-preserving bits.
//   4. Radix select of the threshold key over the cluster (weights: entries for HSA, 1 for Quest):
//      per 8-bit pass every block histograms its keys (warp-aggregated adds) and adds its non-zero
//      bins to every block's totals (remote shared-memory atomics); after one cluster barrier each
//      block finds the same bin. It stops once the bin is taken whole (or, HSA, holds one page).
//   5. Emission: a block scan of (weight strictly above, tie weight) over each thread's contiguous
//      run of pages, offset by the totals of the cluster's blocks before it, writes the rows in
//      ascending order (ties in page order; HSA takes the first entries of a boundary page).
// The score workspace is fp32 [n_head_kv, G, max_pages] (used only for chunks too large to stage).
#include <cooperative_groups.h>

#include <cub/block/block_scan.cuh>

#include <type_traits>

#include "device_props.cuh"
#include "dtype.cuh"
#include "kvscope/kernels/page_select.h"
#include "mma.cuh"
#include "pdl.cuh"

namespace kvscope::kernels {
namespace {

using dtype::from_f;
using dtype::to_f;

namespace cg = cooperative_groups;

constexpr int kMaxDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
/// Query values each thread loads (G x D <= 16 x 256).
constexpr int kQPerThread = kMaxGroup * kMaxDim / kThreads;
/// Blocks per KV head at most: the portable cluster size. (16, the non-portable maximum, scores
/// faster alone but waits for a whole free GPC: slower inside the decode step, docs/performance.md.)
constexpr int kCluster = 8;
/// L2 line bytes (the prefetch granule).
constexpr int kLine = 128;

/// Pages of a head each of its nc blocks owns at most, for n pages per head (with the host bound
/// max_pages: the row stride of staged scores).
__host__ __device__ constexpr int64_t block_pages(int64_t n, int nc) { return (n + nc - 1) / nc; }

__device__ __forceinline__ int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__device__ __forceinline__ int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

/// Block `rank`'s contiguous chunk [b, e) of a head's n_pages pages.
struct PageRange {
  int64_t b, e;
};
__device__ __forceinline__ PageRange block_chunk(int64_t n_pages, int rank, int nc) {
  const int64_t b = min64(rank * block_pages(n_pages, nc), n_pages);
  return {b, min64(b + block_pages(n_pages, nc), n_pages)};
}

// ---- scoring ----------------------------------------------------------------------------------

/// HSA step 1 (RocketKV §3.4 Alg. 1): the top-k1 channels of Σ_g|q_g| (ties: lower channel first).
/// chan[c] = 1 (selected) | 2 (Σ_g q_g[c] >= 0: the page's Kmax bounds it, else Kmin). Called by the
/// whole block; ends with a barrier. Every channel's rank is counted against all D magnitudes, each
/// of kThreads / D threads per channel counting a slice of them (4 values per shared-memory load).
/// mag: D floats of scratch, rank: D ints of scratch.
__device__ void top_channels(const float* qs, int G, int D, int k1, float* mag, int* rank, unsigned char* chan) {
  const int tid = threadIdx.x;
  for (int c = tid; c < D; c += kThreads) {
    float m = 0.f;
    for (int g = 0; g < G; ++g) m += fabsf(qs[g * D + c]);
    mag[c] = m;
    rank[c] = 0;
  }
  __syncthreads();
  const int splits = kThreads / D, span = D / splits;  // D in {64, 128, 256}: 8, 4, 2 slices
  if (kThreads % D == 0 && span % 4 == 0) {
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
    for (int c = tid; c < D; c += kThreads) {
      int r = 0;
      const float m = mag[c];
      for (int j = 0; j < D; ++j) r += (mag[j] > m) || (mag[j] == m && j < c);
      rank[c] = r;
    }
  }
  __syncthreads();
  for (int c = tid; c < D; c += kThreads) {
    float s = 0.f;
    for (int g = 0; g < G; ++g) s += qs[g * D + c];
    chan[c] = rank[c] < k1 ? static_cast<unsigned char>(1 | (s >= 0.f ? 2 : 0)) : 0;
  }
  __syncthreads();
}

/// 16 bytes of a min/max row: kN channels.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
  T v[kN];
};

/// Channels c0 .. c0 + kN - 1 of a row (row + c0); channels >= D and !on read as 0. aligned: rows
/// are 16-byte aligned and D a multiple of kN (one vector load), else element loads.
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p, int c0, int D, bool aligned, bool on) {
  Pack<T> x;
  if (on && aligned) return *reinterpret_cast<const Pack<T>*>(p);
#pragma unroll
  for (int t = 0; t < Pack<T>::kN; ++t) x.v[t] = on && c0 + t < D ? p[t] : from_f<T>(0.f);
  return x;
}

/// One lane's share of page scoring. A page's min/max rows (D channels, D / kN vectors each) are
/// read by a slot of L lanes, L the power of two >= the vectors of a row (at most 32), lane sl of the
/// slot covering vectors sl, sl + L, ... (at most 8 channels: D <= 256); a warp scores 32 / L pages
/// per load instruction. The lane keeps its channels' coefficients in registers.
template <typename T, int kG, bool kHsa>
struct PageScorer {
  static constexpr int kN = Pack<T>::kN;
  static constexpr int kVpl = 8 / kN;    ///< vectors per lane, at most
  static constexpr int kCh = kVpl * kN;  ///< channels per lane, at most
  static constexpr int kOut = kHsa ? kG : 1;
  int D = 0, L = 1, slots = 32, slot = 0, sl = 0;
  bool aligned = false;
  int c0[kVpl];
  /// HSA: q_g[c] on selected channels, 0 elsewhere. Quest: Σ_g max(q_g[c], 0) (on Kmax).
  float cf[kCh][kOut];
  /// Quest: Σ_g min(q_g[c], 0) (on Kmin).
  float cb[kHsa ? 1 : kCh];
  /// HSA: channel bits taking Kmax; vector bits that need the Kmin / Kmax row at all.
  unsigned use_max = 0, need_lo = 0, need_hi = 0;

  __device__ PageScorer(const float* qs, const unsigned char* chan, int G, int D_, bool aligned_)
      : D(D_), aligned(aligned_) {
    const int nvec = (D + kN - 1) / kN, lane = threadIdx.x & 31;
    while (L < nvec && L < 32) L <<= 1;
    slots = 32 / L;
    slot = lane / L;
    sl = lane % L;
#pragma unroll
    for (int j = 0; j < kVpl; ++j) {
      c0[j] = (sl + j * L) * kN;
      bool any = false;
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        const int e = j * kN + t, c = c0[j] + t;
        const bool valid = c < D;
        if (kHsa) {
          const unsigned char f = valid ? chan[c] : 0;
#pragma unroll
          for (int g = 0; g < kG; ++g) cf[e][g] = (f & 1) && g < G ? qs[g * D + c] : 0.f;
          if (f & 1) {
            if (f & 2)
              use_max |= 1u << e, need_hi |= 1u << j;
            else
              need_lo |= 1u << j;
          }
        } else {
          float hi = 0.f, lo = 0.f;
          if (valid)
            for (int g = 0; g < G; ++g) {
              const float x = qs[g * D + c];
              hi += fmaxf(x, 0.f);
              lo += fminf(x, 0.f);
            }
          cf[e][0] = hi;
          cb[e] = lo;
          any |= valid;
        }
      }
      if (!kHsa && any) need_lo |= 1u << j, need_hi |= 1u << j;
    }
  }

  /// Scores pages P[u] (live[u]; else 0) of the head's rows kmin / kmax into acc[u] (every lane of the
  /// slot gets the slot's sums). Called by whole warps.
  template <int U>
  __device__ __forceinline__ void score(const T* kmin, const T* kmax, const int64_t (&P)[U], const bool (&live)[U],
                                        float (&acc)[U][kOut]) const {
    Pack<T> lo[U][kVpl], hi[U][kVpl];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < kVpl; ++j) {
        const int64_t r = P[u] * D + c0[j];
        const bool on = live[u] && c0[j] < D;
        lo[u][j] = load_pack(kmin + r, c0[j], D, aligned, on && ((need_lo >> j) & 1u));
        hi[u][j] = load_pack(kmax + r, c0[j], D, aligned, on && ((need_hi >> j) & 1u));
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int o = 0; o < kOut; ++o) acc[u][o] = 0.f;
#pragma unroll
      for (int j = 0; j < kVpl; ++j)
#pragma unroll
        for (int t = 0; t < kN; ++t) {
          const int e = j * kN + t;
          const float l = to_f<T>(lo[u][j].v[t]), x = to_f<T>(hi[u][j].v[t]);
          if (kHsa) {
            const float v = (use_max >> e) & 1u ? x : l;
#pragma unroll
            for (int g = 0; g < kG; ++g) acc[u][g] = fmaf(cf[e][g], v, acc[u][g]);
          } else {
            acc[u][0] = fmaf(cf[e][0], x, fmaf(cb[e], l, acc[u][0]));
          }
        }
    }
    for (int off = L >> 1; off > 0; off >>= 1)  // the slot's sums, all pages' and outputs' chains together
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int o = 0; o < kOut; ++o) acc[u][o] += __shfl_xor_sync(0xffffffffu, acc[u][o], off);
  }
};

/// Tensor-core page scoring (16-bit rows, D a multiple of 32, up to 8 outputs per page): a warp
/// scores a tile of 16 pages as [16 x D] x [D x 8] products on tensor cores (mma.cuh), one per
/// summary row: score[P][o] = Σ_c Kmax[P][c]·hi[c][o] + Kmin[P][c]·lo[c][o]. Lane (g, t) loads, per
/// 32-channel base j, the 16-byte vector at channel 32j + 8t of pages g and g + 8 (a page's four
/// lanes read 64 contiguous bytes); its 8 values are the lane's k positions of two mma
/// instructions, and B's fragments (MmaCoefs, built once per launch) use the same k mapping, so the
/// rows need no shared memory. hi / lo:
///   HSA: column g (member g < G) is q_g on the selected channels, on Kmax where Σ_g q_g >= 0 and
///        on Kmin elsewhere, 0 on the rest: exact (q is a T value), the products exact in fp32.
///   Quest: the fp32 coefficients Σ_g max(q_g, 0) (Kmax) and Σ_g min(q_g, 0) (Kmin) split into a T
///        value (column 0) and its remainder rounded to T (column 1): score = C[., 0] + C[., 1],
///        within ~2^-16 of the fp32 coefficients' score.
/// The CUDA-core PageScorer serves fp32 rows, other head dims and groups of more than 8.
constexpr int kMmaBase = 32;  ///< channels per base: 4 lanes x 8 values of a 16-byte vector

/// B fragments: frag[j][s][lane] = {hi k 2t..2t+1, hi k 2t+8..2t+9, lo ..., lo ...} of mma s (0, 1)
/// of base j, lane (g, t): channels 32j + 8t + 4s + {0, 1} and + {2, 3}, column g.
struct MmaCoefs {
  uint4 frag[kMaxDim / kMmaBase][2][32];
};

/// a and b rounded to T, packed as one 32-bit mma register (a in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const T x = from_f<T>(a), y = from_f<T>(b);
  unsigned short u, v;
  memcpy(&u, &x, 2);
  memcpy(&v, &y, 2);
  return static_cast<uint32_t>(u) | static_cast<uint32_t>(v) << 16;
}

/// Fills c.frag from the group's fp32 queries qs [G, D] (and, HSA, the channel flags of
/// top_channels). Called by the whole block; the caller syncs before use.
template <typename T, bool kHsa>
__device__ void build_mma_coefs(const float* qs, const unsigned char* chan, int G, int D, MmaCoefs& c) {
  for (int i = threadIdx.x; i < (D / kMmaBase) * 64; i += kThreads) {
    const int j = i >> 6, s = (i >> 5) & 1, ln = i & 31, n = ln >> 2, ch0 = kMmaBase * j + 8 * (ln & 3) + 4 * s;
    float hi[4], lo[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int ch = ch0 + e;
      if (kHsa) {
        const unsigned char f = chan[ch];
        const float x = n < G && (f & 1) ? qs[n * D + ch] : 0.f;
        hi[e] = f & 2 ? x : 0.f;
        lo[e] = f & 2 ? 0.f : x;
      } else {
        float h = 0.f, l = 0.f;
        for (int g = 0; g < G && n < 2; ++g) {  // columns 0 and 1 only
          const float x = qs[g * D + ch];
          h += fmaxf(x, 0.f);
          l += fminf(x, 0.f);
        }
        const float h0 = dtype::round_to<T>(h), l0 = dtype::round_to<T>(l);
        hi[e] = n == 0 ? h0 : n == 1 ? h - h0 : 0.f;
        lo[e] = n == 0 ? l0 : n == 1 ? l - l0 : 0.f;
      }
    }
    c.frag[j][s][ln] =
        make_uint4(pack2<T>(hi[0], hi[1]), pack2<T>(hi[2], hi[3]), pack2<T>(lo[0], lo[1]), pack2<T>(lo[2], lo[3]));
  }
}

/// The 16-byte vector at channel `off` of page P's row (rows: a head's [pages, D] summaries), or of
/// `up` (the recomputed last page, shared memory) when is_up; zeros when !on.
template <typename T>
__device__ __forceinline__ uint4 row_vec(const T* rows, const T* up, int64_t P, int D, int off, bool on, bool is_up) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (on && !is_up) v = *reinterpret_cast<const uint4*>(rows + P * D + off);
  if (on && is_up) v = *reinterpret_cast<const uint4*>(up + off);
  return v;
}

/// c += the tile's scores (pages tile + g, tile + g + 8 of the lane; see MmaCoefs) for pages below
/// end; the page `up_page` is read from up_lo / up_hi instead. Called by whole warps.
template <typename T>
__device__ __forceinline__ void mma_score_tile(const T* kmin, const T* kmax, const T* up_lo, const T* up_hi,
                                               int64_t up_page, int64_t tile, int64_t end, int D, const MmaCoefs& cf,
                                               float (&c)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, nb = D / kMmaBase;
  const int64_t Pa = tile + g, Pb = tile + g + 8;
  const bool ona = Pa < end, onb = Pb < end, upa = Pa == up_page, upb = Pb == up_page;
  for (int j0 = 0; j0 < nb; j0 += 4) {  // 4 bases (128 channels) of loads in flight
    uint4 la[4], lb[4], ha[4], hb[4];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int off = kMmaBase * (j0 + jj) + 8 * t;
      const bool in = j0 + jj < nb;
      la[jj] = row_vec(kmin, up_lo, Pa, D, off, in && ona, upa);
      lb[jj] = row_vec(kmin, up_lo, Pb, D, off, in && onb, upb);
      ha[jj] = row_vec(kmax, up_hi, Pa, D, off, in && ona, upa);
      hb[jj] = row_vec(kmax, up_hi, Pb, D, off, in && onb, upb);
    }
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      if (j0 + jj >= nb) break;
      const uint4 f0 = cf.frag[j0 + jj][0][lane], f1 = cf.frag[j0 + jj][1][lane];
      mma16816<T>(c, ha[jj].x, hb[jj].x, ha[jj].y, hb[jj].y, f0.x, f0.y);
      mma16816<T>(c, la[jj].x, lb[jj].x, la[jj].y, lb[jj].y, f0.z, f0.w);
      mma16816<T>(c, ha[jj].z, hb[jj].z, ha[jj].w, hb[jj].w, f1.x, f1.y);
      mma16816<T>(c, la[jj].z, lb[jj].z, la[jj].w, lb[jj].w, f1.z, f1.w);
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
/// then warp g folds the warps' partials of member g; out[g] = total. part: shared scratch,
/// [kMaxGroup][32]. Called by the whole block; ends with a barrier.
template <int kG, typename Op>
__device__ __forceinline__ void block_reduce_members(float (&v)[kG], int G, float (*part)[32], float* out,
                                                     float identity, Op op) {
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
    if (lane == 0) out[warp] = x;
  }
  __syncthreads();
}

/// Pages per scoring slot in flight (HSA with 8+ members holds more coefficients per lane).
template <int kG, bool kHsa>
constexpr int kPagesInFlight = kHsa&& kG >= 8 ? 2 : 4;

/// Striped pages per thread whose keys stay in registers (2048 pages per block); later pages are
/// re-read from the scores in every radix pass.
constexpr int kRegPages = 4;

/// Dynamic shared memory a block may stage its chunk's scores in: with the opt-in attribute (above
/// 48 KB in all) sm_90 gives a block up to 227 KB, next to the kernel's <= 42 KB of static shared
/// memory (HSA at t = 4,096 of 32K: ~940 pages x G 4 per block = 15 KB; 184 KB holds 11.7K pages x
/// G 4).
constexpr size_t kStageBytes = 184 * 1024;

/// The selection's L2 prefetch takes at most 1 / kPrefetchL2Share of the L2, over all blocks.
/// A batch of 8 at 32K holds 64 MB of Quest summaries per layer (30 MB for RocketKV at t = 4,096
/// at batch 1); asked of L2 whole, the rows evicted each other and the weights the next
/// projections had prefetched. With a quarter: batch 8, 32K, Quest 70.0 / 69.6 / 71.2% ->
/// 71.4 / 71.5 / 72.9% and RocketKV 65.9 / 60.9 / 50.8% -> 66.1 / 62.2 / 54.8% of the roofline;
/// batch 1 unchanged (docs/performance.md).
constexpr int kPrefetchL2Share = 4;

/// Before the wait (pdl.cuh): the summaries of every page but a head's last are written by no
/// kernel of the step, so block `rank` of a head's cluster asks L2 for the first `most` bytes of its
/// chunk's kmin / kmax rows (row_bytes each) while the kernels before it (the QKV projection's
/// tail, RoPE / append) run; in the decode step they are cold, a layer's summaries being read once
/// per token. The length is read while RoPE / append may still advance it: the chunk is a hint
/// only, bounded by max_pages.
template <typename T>
__device__ __forceinline__ void prefetch_chunk(const T* kmin, const T* kmax, int64_t row_bytes, const int64_t* length,
                                               int64_t page, int64_t max_pages, int rank, int nc, int64_t most) {
  int64_t len;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(len) : "l"(length));
  const PageRange c = block_chunk(min64((max64(len, 0) + page - 1) / page, max_pages), rank, nc);
  const int64_t b0 = c.b * row_bytes, b1 = min64(c.e * row_bytes, b0 + most);
  for (int64_t b = b0 + static_cast<int64_t>(threadIdx.x) * kLine; b < b1;
       b += static_cast<int64_t>(kThreads) * kLine) {
    prefetch_l2(reinterpret_cast<const char*>(kmin) + b);
    prefetch_l2(reinterpret_cast<const char*>(kmax) + b);
  }
}

/// kMma: score on tensor cores (16-bit rows, 16-byte aligned, D % 32 == 0, G <= 8; launch_select
/// decides), else PageScorer. prefetch_most: bytes of each summary array a block asks L2 for before
/// its wait (kPrefetchL2Share).
template <typename T, int kG, bool kHsa, bool kMma>
__global__ void __launch_bounds__(kThreads, 1)
    page_select_kernel(const PageSelectArgs a, float* ws, bool staged, int64_t prefetch_most) {
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  using Scorer = PageScorer<T, kG, kHsa>;
  static_assert(!kMma || (!std::is_same_v<T, float> && kG <= 8), "tensor-core scoring: 16-bit rows, G <= 8");
  constexpr int U = kPagesInFlight<kG, kHsa>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float qs[kMaxGroup * kMaxDim];
  __shared__ __align__(16) float mag[kMaxDim];
  __shared__ int rnk[kMaxDim];
  __shared__ unsigned char chan[kMaxDim];
  __shared__ float inv_tau[kMaxGroup];
  __shared__ float part[kMaxGroup][32];
  __shared__ float s_mloc[kMaxGroup], s_zloc[kMaxGroup], s_max[kMaxGroup], s_inv[kMaxGroup];
  __shared__ unsigned hist[2][256], tot[256];
  __shared__ float up_part[2][kThreads];
  __shared__ __align__(16) T up_row[2][kMaxDim];
  __shared__ unsigned s_prefix;
  __shared__ long long s_rem;
  __shared__ int s_done;
  __shared__ unsigned long long s_total, s_pre;
  __shared__ MmaCoefs mcoef;
  extern __shared__ float stage[];
  const cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.group, D = a.head_dim;
  const int nc = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int h = static_cast<int>(blockIdx.x) / nc;
  // Lambdas capture these locals, never `a` (taking the parameter's address copies it to the stack).
  const int64_t page = a.page, keep = a.keep;
  const T* kmin = static_cast<const T*>(a.kmin) + static_cast<int64_t>(h) * a.page_capacity * D;
  const T* kmax = static_cast<const T*>(a.kmax) + static_cast<int64_t>(h) * a.page_capacity * D;
  pdl_trigger();
  prefetch_chunk(kmin, kmax, D * static_cast<int64_t>(sizeof(T)), a.length + h, page, a.max_pages, rank, nc,
                 prefetch_most);
  pdl_wait();
  // Every global load the block's set-up needs goes out before any is used: the head's length and
  // cache offset, and the group's queries (kQPerThread values per thread, into registers).
  const int64_t len = a.length[h], k_offset = a.k ? a.offset[h] : 0, k_first = a.k_first ? a.k_first[h] : 0;
  const T* q = static_cast<const T*>(a.q) + static_cast<int64_t>(h) * G * a.q_stride;
  float qv[kQPerThread];
#pragma unroll
  for (int i = 0; i < kQPerThread; ++i) {
    const int e = tid + i * kThreads;  // member e / D, channel e % D
    qv[i] = e < G * D ? to_f<T>(q[(e / D) * a.q_stride + e % D]) : 0.f;
  }
  const int64_t n_pages = (len + page - 1) / page, last = n_pages - 1;
  const PageRange own = block_chunk(n_pages, rank, nc);
  const int64_t cbeg = own.b, cend = own.e, nloc = cend - cbeg;
  int32_t* index = a.index + static_cast<int64_t>(h) * a.index_stride;
  // The block holding the head's last page recomputes its summaries (decode-append upkeep): thread
  // t takes channel t % D over rows t / D, t / D + R, ... of the page (R = kThreads / D row groups),
  // its loads in flight with the queries'; the groups meet in shared memory (finish_upkeep), and
  // the last warp scores the page from there after the rest.
  const bool upkeep = a.k && last >= cbeg && last < cend;
  const int R = kThreads / D;
  float up_lo = INFINITY, up_hi = -INFINITY;
  if (upkeep && tid < R * D) {
    const T* kr = static_cast<const T*>(a.k) + (k_offset + last * page) * D + tid % D;
    const int64_t rows = len - last * page, r0 = max64(k_first - last * page, 0);  // r0 > 0: compact rows first
    if (r0 > 0 && tid < D) {  // their min / max, kept aside (the page's stored one may hold rolled-back keys)
      up_lo = to_f<T>(static_cast<const T*>(a.edge_min)[static_cast<int64_t>(h) * D + tid]);
      up_hi = to_f<T>(static_cast<const T*>(a.edge_max)[static_cast<int64_t>(h) * D + tid]);
    }
#pragma unroll 4
    for (int64_t r = r0 + tid / D; r < rows; r += R) {
      const float x = to_f<T>(kr[r * D]);
      up_lo = fminf(up_lo, x);
      up_hi = fmaxf(up_hi, x);
    }
  }
  auto finish_upkeep = [&] {  // the upkeep block's threads, all of them
    if (tid < R * D) up_part[0][tid] = up_lo, up_part[1][tid] = up_hi;
    __syncthreads();
    if (tid < D) {
      float lo = up_part[0][tid], hi = up_part[1][tid];
      for (int r = 1; r < R; ++r) lo = fminf(lo, up_part[0][r * D + tid]), hi = fmaxf(hi, up_part[1][r * D + tid]);
      up_row[0][tid] = from_f<T>(lo);
      up_row[1][tid] = from_f<T>(hi);
    }
  };
  // The recomputed rows go to global memory last: a cluster barrier's release would otherwise wait
  // for these stores to complete.
  auto store_upkeep = [&] {
    if (tid < D) {
      const int64_t o = (static_cast<int64_t>(h) * a.page_capacity + last) * D + tid;
      static_cast<T*>(a.kmin)[o] = up_row[0][tid];
      static_cast<T*>(a.kmax)[o] = up_row[1][tid];
    }
  };
  if (kHsa ? len <= keep : n_pages <= keep) {  // dense: every live entry (uniform over the cluster)
    if (upkeep) finish_upkeep(), store_upkeep();
    for (int64_t i = cbeg * page + tid; i < min64(cend * page, len); i += kThreads) index[i] = static_cast<int32_t>(i);
    if (rank == 0 && tid == 0) a.count[h] = len;
    return;
  }

  // 1. Queries, channels, coefficients.
#pragma unroll
  for (int i = 0; i < kQPerThread; ++i)
    if (tid + i * kThreads < G * D) qs[tid + i * kThreads] = qv[i];
  if (tid < 256) hist[0][tid] = hist[1][tid] = 0;
  if (upkeep) finish_upkeep();
  __syncthreads();
  if (kHsa) {
    top_channels(qs, G, D, a.k1, mag, rnk, chan);
    // SparQ temperature per member g (warp g): sqrt(D · Σ|q̂_g| / Σ|q_g|).
    for (int g = warp; g < G; g += kWarps) {
      float num = 0.f, den = 0.f;
      for (int c = lane; c < D; c += 32) {
        const float x = fabsf(qs[g * D + c]);
        den += x;
        if (chan[c] & 1) num += x;
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        num += __shfl_xor_sync(0xffffffffu, num, off);
        den += __shfl_xor_sync(0xffffffffu, den, off);
      }
      if (lane == 0) inv_tau[g] = rsqrtf((den > 0.f ? num / den : 1.f) * static_cast<float>(D));
    }
    __syncthreads();
  }
  if constexpr (kMma) {
    build_mma_coefs<T, kHsa>(qs, chan, G, D, mcoef);
    __syncthreads();
  }

  // 2. Scores of the chunk: s[g * ss + (P - cbeg)], in shared memory when staged.
  float* s = staged ? stage : ws + static_cast<int64_t>(h) * (kHsa ? G : 1) * a.max_pages + cbeg;
  const int64_t ss = staged ? block_pages(a.max_pages, nc) : a.max_pages;
  float m[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g) m[g] = -INFINITY;
  if constexpr (kMma) {
    const int t = lane & 3;
    for (int64_t tile = cbeg + 16 * warp; tile < cend; tile += 16 * kWarps) {  // warp-uniform
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      mma_score_tile<T>(kmin, kmax, up_row[0], up_row[1], upkeep ? last : -1, tile, cend, D, mcoef, c);
      const int64_t Pa = tile + (lane >> 2), Pb = Pa + 8;  // c: {Pa, Pb} x columns {2t, 2t + 1}
      if constexpr (kHsa) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int o = 2 * t + e;
          if (o >= G) continue;
          const float va = c[e] * inv_tau[o], vb = c[2 + e] * inv_tau[o];
          if (Pa < cend) s[o * ss + (Pa - cbeg)] = va;
          if (Pb < cend) s[o * ss + (Pb - cbeg)] = vb;
          const float mx = fmaxf(Pa < cend ? va : -INFINITY, Pb < cend ? vb : -INFINITY);
#pragma unroll
          for (int g = 0; g < kG; ++g)
            if (g == o) m[g] = fmaxf(m[g], mx);
        }
      } else if (t == 0) {  // Quest: the score's key, final already
        if (Pa < cend) s[Pa - cbeg] = __uint_as_float(ordered_bits(c[0] + c[1]));
        if (Pb < cend) s[Pb - cbeg] = __uint_as_float(ordered_bits(c[2] + c[3]));
      }
    }
  } else {
    const bool aligned =
        D % Scorer::kN == 0 && (reinterpret_cast<uintptr_t>(a.kmin) | reinterpret_cast<uintptr_t>(a.kmax)) % 16 == 0;
    const Scorer scorer(qs, chan, G, D, aligned);
    auto store = [&](int64_t P, const float(&acc)[Scorer::kOut]) {
#pragma unroll
      for (int o = 0; o < Scorer::kOut; ++o) {
        const float v = kHsa ? acc[o] * inv_tau[o] : acc[o];
        if (kHsa && o < G) {
          s[o * ss + (P - cbeg)] = v;
          m[o] = fmaxf(m[o], v);
        } else if (!kHsa) {
          s[P - cbeg] = __uint_as_float(ordered_bits(v));  // Quest: the score's key, final already
        }
      }
    };
    const int64_t scored_end = upkeep ? last : cend;
    const int64_t per_warp = static_cast<int64_t>(scorer.slots) * U;
    for (int64_t base = cbeg + warp * per_warp; base < scored_end; base += kWarps * per_warp) {  // warp-uniform
      int64_t P[U];
      bool live[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        P[u] = base + u * scorer.slots + scorer.slot;
        live[u] = P[u] < scored_end;
      }
      float acc[U][Scorer::kOut];
      scorer.score(kmin, kmax, P, live, acc);
      if (scorer.sl == 0)
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (live[u]) store(P[u], acc[u]);
    }
    if (upkeep && warp == kWarps - 1) {  // the last page, from its recomputed rows
      const int64_t P[1] = {0};
      const bool live[1] = {scorer.slot == 0};
      float acc[1][Scorer::kOut];
      scorer.score(up_row[0], up_row[1], P, live, acc);
      if (scorer.sl == 0 && live[0]) store(last, acc[0]);
    }
  }
  auto entries = [=](int64_t P) { return static_cast<unsigned>(min64(page, len - P * page)); };

  // 3. HSA: Σ_g softmax over tokens, Z_g = Σ_P n_P exp(ŝ_gP - m_g), merged over the cluster from
  //    each block's (max, Σ n·exp relative to it).
  if (kHsa) {
    block_reduce_members(m, G, part, s_mloc, -INFINITY, [](float x, float y) { return fmaxf(x, y); });
    float z[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) z[g] = 0.f;
    for (int64_t P = cbeg + tid; P < cend; P += kThreads) {
      const float n = static_cast<float>(entries(P));
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (g < G) z[g] += n * __expf(s[g * ss + (P - cbeg)] - s_mloc[g]);
    }
    block_reduce_members(z, G, part, s_zloc, 0.f, [](float x, float y) { return x + y; });
    cluster.sync();
    if (tid < G) {
      float mx = -INFINITY, zs = 0.f, mr[kCluster], zr[kCluster];
#pragma unroll
      for (int r = 0; r < kCluster; ++r) {
        mr[r] = r < nc ? *cluster.map_shared_rank(&s_mloc[tid], r) : -INFINITY;
        zr[r] = r < nc ? *cluster.map_shared_rank(&s_zloc[tid], r) : 0.f;
        mx = fmaxf(mx, mr[r]);
      }
#pragma unroll
      for (int r = 0; r < kCluster; ++r)
        if (zr[r] > 0.f) zs += zr[r] * __expf(mr[r] - mx);
      s_max[tid] = mx;
      s_inv[tid] = 1.f / zs;
    }
    __syncthreads();
  } else {
    __syncthreads();
  }

  // 4. Keys of the striped pages cbeg + tid + i * kThreads: registers for the first kRegPages, and
  //    row 0 of the scores for all (the emission reads contiguous runs).
  float* keys = s;
  auto key_of = [&](int64_t Pl) {
    if constexpr (!kHsa) return __float_as_uint(s[Pl]);  // Quest stored its keys while scoring
    float v = 0.f;
#pragma unroll
    for (int g = 0; g < kG; ++g)
      if (g < G) v += __expf(s[g * ss + Pl] - s_max[g]) * s_inv[g];
    return ordered_bits(v);
  };
  unsigned kr[kRegPages];
#pragma unroll
  for (int i = 0; i < kRegPages; ++i) {
    const int64_t Pl = tid + static_cast<int64_t>(i) * kThreads;
    kr[i] = Pl < nloc ? key_of(Pl) : 0u;
    if (kHsa && Pl < nloc) keys[Pl] = __uint_as_float(kr[i]);
  }
  if (kHsa)
    for (int64_t Pl = tid + static_cast<int64_t>(kRegPages) * kThreads; Pl < nloc; Pl += kThreads)
      keys[Pl] = __uint_as_float(key_of(Pl));

  // 5. Radix select of the threshold (weight above it < keep <= weight at or above it), 8-bit passes
  //    over the cluster. Pass p counts into the block's hist[p & 1]; after the cluster barrier
  //    (release / acquire) every block reads the cluster's eight hist[p & 1] (DSMEM loads) and sums
  //    them into its tot. The others read a block's hist[p & 1] before they arrive at pass p + 1's
  //    barrier, so the block clears it after that barrier, for pass p + 2. (Adding to every block's
  //    totals with remote atomics instead made each barrier's release wait for 8 x 256 of them.)
  if (tid == 0) s_prefix = 0, s_rem = keep, s_done = 0;
  __syncthreads();
  const int64_t warp_first = tid - lane;  // the warp's first striped page (loops stay warp-uniform)
  unsigned mask = 0;
#pragma unroll 1
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass, b = pass & 1;
    const unsigned prefix = s_prefix;
    auto count = [&](int64_t Pl, unsigned key, bool valid) {
      const bool on = valid && (key & mask) == prefix;
      const unsigned act = __ballot_sync(0xffffffffu, on);
      if (on) {
        const unsigned bin = (key >> shift) & 255u;
        const unsigned peers = __match_any_sync(act, bin);
        // HSA weighs a page by its entries: every page holds `page` but the head's last one, whose
        // lane adds the difference itself (a reduce over the peers would serialise the groups).
        const unsigned per_page = kHsa ? static_cast<unsigned>(page) : 1u;
        if (lane == __ffs(peers) - 1) atomicAdd(&hist[b][bin], per_page * static_cast<unsigned>(__popc(peers)));
        if (kHsa && cbeg + Pl == last) atomicAdd(&hist[b][bin], entries(last) - per_page);  // unsigned wrap: subtracts
      }
    };
#pragma unroll
    for (int i = 0; i < kRegPages; ++i) {
      const int64_t Pl = tid + static_cast<int64_t>(i) * kThreads;
      if (warp_first + static_cast<int64_t>(i) * kThreads >= nloc) break;  // warp-uniform
      count(Pl, kr[i], Pl < nloc);
    }
    for (int64_t wf = warp_first + static_cast<int64_t>(kRegPages) * kThreads; wf < nloc; wf += kThreads) {
      const int64_t Pl = wf + lane;
      count(Pl, Pl < nloc ? __float_as_uint(keys[Pl]) : 0u, Pl < nloc);
    }
    cluster.sync();
    if (tid < 256) {
      unsigned v[kCluster], sum = 0;
#pragma unroll
      for (int r = 0; r < kCluster; ++r) v[r] = r < nc ? *cluster.map_shared_rank(&hist[b][tid], r) : 0u;
#pragma unroll
      for (int r = 0; r < kCluster; ++r) sum += v[r];
      tot[tid] = sum;
      hist[b ^ 1][tid] = 0;  // the others read it in pass p - 1, before this pass's barrier
    }
    __syncthreads();
    if (warp == 0) {  // lane L owns bins 255-8L .. 248-8L (descending)
      unsigned own[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += own[j] = tot[255 - (lane * 8 + j)];
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
        int j = 0;
        for (; j < 7 && cum + own[j] < rem; ++j) cum += own[j];
        s_prefix = prefix | (static_cast<unsigned>(255 - (lane * 8 + j)) << shift);
        s_rem = rem - cum;
        // Done once the bin is taken whole, or (HSA) holds one page, of which the emission takes
        // the first rem - cum entries (a bin of two pages weighs more than `page`).
        s_done = static_cast<long long>(own[j]) == rem - cum || (kHsa && own[j] <= page);
      }
    }
    mask |= 255u << shift;
    __syncthreads();
    if (s_done) break;  // uniform over the cluster: every block saw the same totals
  }
  const unsigned thr = s_prefix;
  const long long rem = s_rem;

  // 6. Emission in page order over contiguous runs: one scan of (weight strictly above the
  //    threshold, tie weight) packed in 32-bit halves, offset by the blocks before this one. Ties are
  //    taken in page order up to `rem`: HSA entry by entry, Quest page by page; every page before the
  //    last is full, so the tie rows taken before a run are min(rem, ties before) * page.
  const int64_t per = (nloc + kThreads - 1) / kThreads;
  const int64_t p0 = min64(tid * per, nloc), p1 = min64(p0 + per, nloc);
  unsigned long long run_w = 0;
  for (int64_t Pl = p0; Pl < p1; ++Pl) {
    const unsigned key = __float_as_uint(keys[Pl]) & mask;
    if (key > thr)
      run_w += static_cast<unsigned long long>(entries(cbeg + Pl)) << 32;
    else if (key == thr)
      run_w += kHsa ? entries(cbeg + Pl) : 1u;
  }
  unsigned long long before = 0, total = 0;
  Scan(scan_tmp).ExclusiveSum(run_w, before, total);
  if (tid == 0) s_total = total;
  cluster.sync();
  if (warp == 0) {
    unsigned long long v = lane < rank ? *cluster.map_shared_rank(&s_total, lane) : 0ull;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) s_pre = v;
  }
  __syncthreads();
  auto token = cluster.barrier_arrive();  // no block reads another's shared memory after this
  before += s_pre;
  const long long tie_before = static_cast<long long>(before & 0xffffffffull);
  long long tb = tie_before;
  int64_t o = static_cast<int64_t>(before >> 32) + (kHsa ? min64(rem, tie_before) : min64(rem, tie_before) * page);
  for (int64_t Pl = p0; Pl < p1; ++Pl) {
    const unsigned key = __float_as_uint(keys[Pl]) & mask;
    const int64_t P = cbeg + Pl, n = entries(P);
    int64_t take = 0;
    if (key > thr) {
      take = n;
    } else if (key == thr) {
      take = kHsa ? max64(0, min64(n, rem - tb)) : (tb < rem ? n : 0);
      tb += kHsa ? n : 1;
    }
    for (int64_t j = 0; j < take; ++j) index[o + j] = static_cast<int32_t>(P * page + j);
    o += take;
  }
  if (p0 < p1 && cbeg + p1 == n_pages) a.count[h] = o;  // the thread holding the head's last page
  if (upkeep) store_upkeep();
  cluster.barrier_wait(std::move(token));
}

/// Blocks per KV head: kCluster, halved (down to 2) while n_head_kv clusters would not fit the
/// SMs in one wave. A batch of 8 sequences of a Llama-3 layer (64 KV heads) then runs 128 blocks in
/// one wave, not 512 in four, each wave paying the whole barrier chain.
int cluster_blocks(int n_head_kv) {
  int nc = kCluster;
  while (nc > 2 && static_cast<int64_t>(n_head_kv) * nc > detail::sm_count()) nc /= 2;
  return nc;
}

template <typename T, int kG, bool kHsa, bool kMma>
cudaError_t launch_kernel(const PageSelectArgs& a, float* ws, cudaStream_t stream) {
  const auto kernel = page_select_kernel<T, kG, kHsa, kMma>;
  const int nc = cluster_blocks(a.n_head_kv);
  const size_t rows = kHsa ? static_cast<size_t>(a.group) : 1;
  const size_t stage = rows * static_cast<size_t>(block_pages(a.max_pages, nc)) * sizeof(float);
  const bool staged = stage <= kStageBytes;
  const size_t smem = staged ? stage : 0;
  if (smem > 0) {  // opt in (static + dynamic may pass 48 KB; not a stream operation: fine under graph capture)
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const int64_t blocks = static_cast<int64_t>(a.n_head_kv) * nc;
  const int64_t most = detail::l2_bytes() / kPrefetchL2Share / (2 * blocks);  // bytes per block and array
  return launch_pdl_cluster(kernel, dim3(static_cast<unsigned>(blocks)), kThreads, nc, smem, stream, a, ws, staged,
                            most);
}

/// Tensor-core scoring where its conditions hold (page_select_kernel's kMma).
template <typename T, int kG, bool kHsa>
cudaError_t launch_select(const PageSelectArgs& a, float* ws, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float> && kG <= 8) {
    const bool aligned = (reinterpret_cast<uintptr_t>(a.kmin) | reinterpret_cast<uintptr_t>(a.kmax)) % 16 == 0;
    if (aligned && a.head_dim % kMmaBase == 0) return launch_kernel<T, kG, kHsa, true>(a, ws, stream);
  }
  return launch_kernel<T, kG, kHsa, false>(a, ws, stream);
}

template <typename T>
cudaError_t launch_typed(const PageSelectArgs& a, float* ws, cudaStream_t stream) {
  if (a.mode == PageScore::kQuest) return launch_select<T, 1, false>(a, ws, stream);
  const int G = a.group;
  return G <= 1   ? launch_select<T, 1, true>(a, ws, stream)
         : G <= 2 ? launch_select<T, 2, true>(a, ws, stream)
         : G <= 4 ? launch_select<T, 4, true>(a, ws, stream)
         : G <= 8 ? launch_select<T, 8, true>(a, ws, stream)
                  : launch_select<T, 16, true>(a, ws, stream);
}

}  // namespace

size_t page_select_workspace_bytes(const PageSelectArgs& a) {
  return static_cast<size_t>(a.n_head_kv) * static_cast<size_t>(a.group) * static_cast<size_t>(a.max_pages) *
         sizeof(float);
}

cudaError_t page_select(const PageSelectArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.group < 1 || a.group > kMaxGroup || a.head_dim <= 0 || a.head_dim > kMaxDim ||
      a.page <= 0 || a.keep <= 0 || a.max_pages <= 0 || a.max_pages > a.page_capacity || !a.q || !a.kmin || !a.kmax ||
      !a.length || !a.index || !a.count || !workspace ||
      (a.mode == PageScore::kHsa && (a.k1 < 1 || a.k1 > a.head_dim || a.index_stride < a.keep)) ||
      (a.mode == PageScore::kQuest && a.index_stride < a.keep * a.page) || (a.k && !a.offset) ||
      (a.k && a.k_first && (!a.edge_min || !a.edge_max)) || static_cast<int64_t>(a.n_head_kv) * kCluster > 0x7fffffff)
    return cudaErrorInvalidValue;
  float* ws = static_cast<float*>(workspace);
  switch (a.dtype) {
    case DType::kFloat32:
      return launch_typed<float>(a, ws, stream);
    case DType::kBFloat16:
      return launch_typed<__nv_bfloat16>(a, ws, stream);
    case DType::kFloat16:
      return launch_typed<__half>(a, ws, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
