#pragma once
// Block-wide MSB radix select over fp32 values in global memory (internal to kvscope_kernels):
// head_stats.cu (top-k mass, the 95% point) and exact_topk.cu (the exact top-k threshold).
//
// Values map to order-preserving unsigned keys (sign bit flipped for x >= 0, all bits for x < 0),
// and 4 passes of 8 bits narrow the key prefix: each pass builds 256-bin count and mass
// histograms (mass in fp64) of the values that share the prefix so far (kCopies sub-histograms against
// shared-atomic contention), merges them, and one thread walks the bins from the top.
#include <cstdint>

namespace kvscope::kernels::radix {

constexpr int kThreads = 1024;  // the block size the callers launch with
constexpr int kBins = 256;
constexpr int kCopies = 8;

struct Histograms {
  unsigned cnt[kCopies][kBins];
  double mass[kCopies][kBins];
  unsigned merged_cnt[kBins];
  double merged_mass[kBins];
  double red[3][kThreads / 32];
  unsigned prefix, mask;
  unsigned long long count_above;
  double mass_above;
  unsigned final_cnt;
};

/// Where a select ends: the threshold value and what lies strictly above it.
struct Selected {
  float value;
  unsigned long long count_above;  // entries > value
  double mass_above;               // their sum (meaningful for values >= 0)
  unsigned ties;                   // entries == value
};

__device__ __forceinline__ unsigned key_of(float x) {
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float value_of(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

/// by_mass = false: the `need`-th largest of row[0 .. n) (need >= 1). by_mass = true (values >= 0):
/// the value at which the descending prefix sum first reaches `need`. with_mass = false (only with
/// by_mass = false): counts alone, Selected::mass_above stays 0, and each warp adds one count per
/// distinct bin among its lanes (most values share a few bins in the first pass). The whole block
/// calls it (blockDim.x a multiple of 32); every thread gets the result.
__device__ inline Selected select(const float* row, int64_t n, bool by_mass, double need, Histograms& h,
                                  bool with_mass = true) {
  if (threadIdx.x == 0) {
    h.prefix = 0;
    h.mask = 0;
    h.count_above = 0;
    h.mass_above = 0.0;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kCopies * kBins; i += blockDim.x) {
      (&h.cnt[0][0])[i] = 0;
      (&h.mass[0][0])[i] = 0.0;
    }
    __syncthreads();
    const unsigned prefix = h.prefix, mask = h.mask;
    const int copy = (threadIdx.x >> 5) & (kCopies - 1);
    if (with_mass) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float x = row[j];
        const unsigned u = key_of(x);
        if ((u & mask) == prefix) {
          const unsigned b = (u >> shift) & (kBins - 1);
          atomicAdd(&h.cnt[copy][b], 1u);
          atomicAdd(&h.mass[copy][b], static_cast<double>(x));
        }
      }
    } else {  // warp-aggregated counts: the loop is uniform over each warp
      const int lane = threadIdx.x & 31;
      for (int64_t jw = threadIdx.x - lane; jw < n; jw += blockDim.x) {
        const int64_t j = jw + lane;
        unsigned b = kBins;  // no bin
        if (j < n) {
          const unsigned u = key_of(row[j]);
          if ((u & mask) == prefix) b = (u >> shift) & (kBins - 1);
        }
        const unsigned peers = __match_any_sync(0xffffffffu, b);
        if (b < kBins && lane == __ffs(peers) - 1) atomicAdd(&h.cnt[copy][b], static_cast<unsigned>(__popc(peers)));
      }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
      unsigned c = 0;
      double m = 0.0;
#pragma unroll
      for (int k = 0; k < kCopies; ++k) c += h.cnt[k][b], m += h.mass[k][b];
      h.merged_cnt[b] = c;
      h.merged_mass[b] = m;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long count_above = h.count_above;
      double mass_above = h.mass_above;
      int pick = -1, lowest = -1;
      for (int b = kBins - 1; b >= 0; --b) {
        const unsigned c = h.merged_cnt[b];
        if (c == 0) continue;
        lowest = b;
        const bool reached = by_mass ? mass_above + h.merged_mass[b] >= need : double(count_above + c) >= need;
        if (reached) {
          pick = b;
          break;
        }
        count_above += c;
        mass_above += h.merged_mass[b];
      }
      if (pick < 0 && lowest >= 0) {  // never reached (rounding): the smallest values, undo their sums
        pick = lowest;
        count_above -= h.merged_cnt[lowest];
        mass_above -= h.merged_mass[lowest];
      }
      if (pick < 0) pick = 0;
      h.count_above = count_above;
      h.mass_above = mass_above;
      h.final_cnt = h.merged_cnt[pick];
      h.prefix = prefix | (static_cast<unsigned>(pick) << shift);
      h.mask = mask | (static_cast<unsigned>(kBins - 1) << shift);
    }
    __syncthreads();
  }
  Selected s{value_of(h.prefix), h.count_above, h.mass_above, h.final_cnt};
  __syncthreads();  // h is rewritten by the next select
  return s;
}

}  // namespace kvscope::kernels::radix
