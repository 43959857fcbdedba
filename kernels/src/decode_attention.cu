// Split-K GQA decode attention over a ragged per-KV-head cache (see decode.h for the contract).
//
// Pass 1 (decode_split_kernel): grid (work items, head chunks), 4 warps a block. Work items are
// (KV head, split) pairs, each head taking ceil(len / chunk) of them (ragged heads balance). One
// block streams the tokens [split * chunk, min(len, (split + 1) * chunk)) of one KV head and serves the
// GT (<= 8) query heads of its head chunk from each K/V load. A token row is handled by
// LPT = D / 8 lanes, 8 elements each (one 16-byte word; two for fp32), so a warp covers
// TPW = 32 / LPT rows per step and U steps per pipeline stage. Each lane brings its own words in
// through a private cp.async ring in shared memory (S stages, S - 1 in flight: 48 KB of K/V per
// block), keeps a running max / sum / accumulator for its token slot (online softmax in log2 units,
// fp32, lazy rescaling), and the slots are merged through shuffles (within a warp) and shared
// memory (across warps) at the end.
// Pass 2 (combine_kernel): one warp per (query head, 32 dims) merges the splits' (max, sum, acc)
// partials. Both passes are programmatic dependent launches (pdl.cuh).
//
// Measured on an H200 (bench/bench_kernels, bf16, 32 query / 8 KV heads, D 128, CUDA-graph replay,
// median; device-to-device copy 4.26 TB/s read + write), over several runs: 4K tokens 11-12 us
// (latency-bound: ~8 us of launch, prologue, epilogue and combine), 32K 40-42 us (74-81% of the
// copy bandwidth), 128K 131-137 us (92-96%), ragged 128K (odd heads at 1/4) 89-93 us (85-89%).
// The loop issues ~90 instructions per token and warp (256 of the ~740 per stage are the FFMAs of
// q.k and p.v, 128 the shuffle reduction), so at 32K it is not far from compute-limited either.
//
// Sections, in order (search for the name):
//   constants                        kWarps, kThreads, kLog2e, kLazy, kMinChunk, kMaxDevices
//   "---- 8 elements of T"           Raw8, load8, zero8, to_float8, from_float
//   Params                           the arguments both passes read
//   merge_state, Shape               online-softmax state merge; pass-1 shape (lanes per row, stages)
//   cp_async16 ... cp_async_wait     the cp.async ring's PTX
//   ScanScratch, find_work_item      block -> (KV head, split) work item
//   decode_split_kernel              pass 1
//   combine_kernel                   pass 2
//   launchers                        configure_split_kernel, launch_typed / launch_gt / launch_d,
//                                    occupancy_d / occupancy_of, head_chunk_for, aligned16
//   public API                       plan_decode_attention, decode_attention
#include "device_props.cuh"
#include "kvscope/kernels/decode.h"
#include "pdl.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace kvscope::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLazy = 8.f;    // lazy-rescale threshold of the online softmax (log2 units)
constexpr int kMinChunk = 128;  // tokens per split at least (block prologue/epilogue amortised)
constexpr int kMaxDevices = 64;

// ---- 8 elements of T: one 16-byte load (two for fp32), converted to fp32 -------------------------
template <typename T>
struct Raw8 {
  uint4 a;
};
template <>
struct Raw8<float> {
  uint4 a, b;
};

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
    f[0] = __uint_as_float(r.a.x);
    f[1] = __uint_as_float(r.a.y);
    f[2] = __uint_as_float(r.a.z);
    f[3] = __uint_as_float(r.a.w);
    f[4] = __uint_as_float(r.b.x);
    f[5] = __uint_as_float(r.b.y);
    f[6] = __uint_as_float(r.b.z);
    f[7] = __uint_as_float(r.b.w);
  } else {
    unpack2(r.a.x, f[0], f[1], static_cast<T*>(nullptr));
    unpack2(r.a.y, f[2], f[3], static_cast<T*>(nullptr));
    unpack2(r.a.z, f[4], f[5], static_cast<T*>(nullptr));
    unpack2(r.a.w, f[6], f[7], static_cast<T*>(nullptr));
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

struct Params {
  const void* q;
  int64_t q_stride;
  const void* k;
  const void* v;
  const int64_t* offset;
  const int64_t* length;
  const int32_t* index;
  int64_t index_stride;
  float scale_log2;    // scale * log2(e)
  float softcap_log2;  // softcap * log2(e); 0: no soft-capping
  void* o;
  float* part_o;    // [n_head, n_split, D]
  float2* part_ml;  // [n_head, n_split]: (max in log2 units, sum)
  int group, n_hchunk, n_split, n_head_kv;
  int64_t chunk;
};

// Merges running (max, sum, acc) states a <- a (+) b, log2 domain.
template <int GT>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&acc)[8], float mo, float lo,
                                            const float (&acco)[8]) {
  const float mx = fmaxf(m, mo);
  const float mu = mx == -INFINITY ? 0.f : mx;
  const float a = exp2f(m - mu), b = exp2f(mo - mu);
  m = mx;
  l = l * a + lo * b;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = acc[j] * a + acco[j] * b;
}

// Row width in lanes' 8-element words, padded to a power of two (D 96 runs as 128 with the last 4
// lanes of a row idle: their loads read nothing and their q is zero).
template <int D>
constexpr int kPaddedDim = D <= 64    ? 64
                           : D <= 128 ? 128
                                      : 256;

// Pass-1 shape of one instance: lanes per token row, rows per warp load, loads in flight.
template <typename T, int D, int GT>
struct Shape {
  static constexpr int DP = kPaddedDim<D>;
  static constexpr int LPT = DP / 8;                // lanes per token row (8 elements each)
  static constexpr int TPW = 32 / LPT;              // token rows per warp step
  static constexpr int W = sizeof(T) == 4 ? 2 : 1;  // 16-byte words per lane per row
  // Rows per lane per pipeline stage: fewer for many heads (q and acc take 16 GT floats a lane).
  static constexpr int U0 = (GT >= 8 ? 2 : 4) / W;
  static constexpr int U = U0 > 0 ? U0 : 1;
  static constexpr int kStep = TPW * U;  // tokens per warp per stage
  // Stages of the per-thread cp.async pipeline: 512 bytes of K/V a thread, (S - 1) / S in flight.
  static constexpr int S = 512 / (U * W * 2 * 16);
  static constexpr size_t kSmemBytes = static_cast<size_t>(S) * U * 2 * W * kThreads * 16;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // src-size 0 writes zeros without reading (masked rows past the split's end).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Shared-memory scratch of find_work_item. It lives after the K/V ring in the dynamic allocation: a
// static __shared__ variable would shift the ring off its 128-byte alignment, and every 16-byte ring
// access would then take two shared-memory wavefronts instead of one (measured: the dense kernel
// 25% slower at 128K).
struct ScanScratch {
  int64_t len, base;
  int warp_items[kWarps];
  int hk, split;
};
constexpr size_t kScanScratch = sizeof(ScanScratch);

/// Dynamic shared memory of a pass-1 block: the K/V ring, then the scan's scratch.
template <typename T, int D, int GT>
constexpr size_t kSplitSmem = Shape<T, D, GT>::kSmemBytes + kScanScratch;

// Maps blockIdx.x to its work item: the KV head hk whose items [first, first + ns) hold it, the
// split index within the head, the head's length and first cache row; hk = -1 past the last item.
// The block scans the heads' item counts together, kThreads heads per round: one memory round trip
// and two barriers per round, where a serial walk over the heads paid a load latency per head
// (~9 us of the launch at 64 KV heads, a batch of 8 sequences). Block-uniform: every thread calls
// it and gets the same result. Needs n_head_kv >= 1 (the launcher checks).
__device__ __forceinline__ void find_work_item(const Params& p, ScanScratch& sc, int& hk, int& split, int64_t& len,
                                               int64_t& base_row) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int item = static_cast<int>(blockIdx.x);
  if (threadIdx.x == 0) sc.hk = -1;  // ordered before any winner's write by the first barrier
  int first_of_round = 0;            // items of the heads before this round
  for (int r0 = 0; r0 < p.n_head_kv; r0 += kThreads) {
    const int h = r0 + static_cast<int>(threadIdx.x);
    int64_t lh = 0, oh = 0;
    int ns = 0;
    if (h < p.n_head_kv) {
      lh = p.length[h];
      oh = p.offset[h];
      ns = lh > p.chunk ? static_cast<int>((lh + p.chunk - 1) / p.chunk) : 1;
    }
    int incl = ns;  // inclusive scan of the item counts within the warp
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += y;
    }
    if (lane == 31) sc.warp_items[warp] = incl;
    __syncthreads();
    int first = first_of_round + incl - ns, round_items = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      first += w < warp ? sc.warp_items[w] : 0;
      round_items += sc.warp_items[w];
    }
    if (ns > 0 && item >= first && item < first + ns) {  // exactly one thread of all rounds
      sc.hk = h;
      sc.split = item - first;
      sc.len = lh;
      sc.base = oh;
    }
    first_of_round += round_items;
    __syncthreads();  // warp_items is rewritten by the next round; the result is final after the last
  }
  hk = sc.hk;
  split = hk < 0 ? 0 : sc.split;
  len = hk < 0 ? 0 : sc.len;
  base_row = hk < 0 ? 0 : sc.base;
}

// Pass 1. Each lane streams exactly the 16-byte words it consumes through a private cp.async ring
// in shared memory (layout [stage][u][k|v][word][thread]: conflict-free), so no barrier is needed
// inside the loop and S - 1 stages of loads stay in flight while the lane computes on one.
template <typename T, int D, int GT, bool kGather>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const Params p) {
  using Sh = Shape<T, D, GT>;
  constexpr int LPT = Sh::LPT, TPW = Sh::TPW, W = Sh::W, U = Sh::U, S = Sh::S, kStep = Sh::kStep;
  extern __shared__ uint4 s_pipe[];
  pdl_trigger();
  pdl_wait();

  // Work item blockIdx.x -> (KV head, split): head h owns max(1, ceil(length[h] / chunk))
  // consecutive items, so ragged heads get work in proportion to their length (one wave in all).
  const int hc = blockIdx.y;
  int hk, split;
  int64_t len, base_row;
  find_work_item(p, *reinterpret_cast<ScanScratch*>(reinterpret_cast<char*>(s_pipe) + Sh::kSmemBytes), hk, split, len,
                 base_row);
  if (hk < 0 || split >= p.n_split) return;  // past the work (or a length above the planned max)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slot = lane / LPT, sub = lane % LPT;
  const bool lane_live = sub * 8 < D;                              // false only for the padding lanes of D 96
  const int h0 = hk * p.group + hc * GT;                           // first query head of the block
  const int nh = p.group - hc * GT < GT ? p.group - hc * GT : GT;  // valid heads in the chunk

  // q is loaded now and converted after the first K/V loads are issued: the latencies overlap.
  const T* qp = static_cast<const T*>(p.q);
  Raw8<T> qr[GT];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (g < nh && lane_live)
      qr[g] = load8(qp + (h0 + g) * p.q_stride + sub * 8);
    else
      zero8(qr[g]);
  }
  const int64_t t_begin = split * p.chunk;
  // Empty split of a shorter head: the combine pass skips it. With a single split the block still
  // runs (it writes the zeros of an empty head).
  if (t_begin >= len && p.n_split > 1) return;
  const int64_t t_end = len < t_begin + p.chunk ? len : t_begin + p.chunk;

  float m[GT], l[GT], acc[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.f;
  }

  const T* kp = static_cast<const T*>(p.k) + base_row * D + sub * 8;
  const T* vp = static_cast<const T*>(p.v) + base_row * D + sub * 8;
  const int32_t* ip = kGather ? p.index + hk * p.index_stride : nullptr;

  // This warp's stages: tokens [t0, t0 + kStep) with t0 = warp_begin + i * stride. Every warp runs
  // the block's iteration count (tokens past t_end are masked), so the loop and its shuffles are
  // block-uniform.
  const int64_t warp_begin = t_begin + warp * kStep, stride = kWarps * kStep;
  const int n_iter = t_end > t_begin ? static_cast<int>((t_end - t_begin + stride - 1) / stride) : 0;
  auto buf = [&](int stage, int u, int kv, int w) -> uint4* {
    return &s_pipe[(((stage * U + u) * 2 + kv) * W + w) * kThreads + threadIdx.x];
  };
  auto issue = [&](int it) {
    const int stage = it % S;
    const int64_t t0 = warp_begin + it * stride;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t t = t0 + u * TPW + slot;
      const bool ok = t < t_end && lane_live;
      const int64_t row = t >= t_end ? 0 : kGather ? static_cast<int64_t>(__ldg(ip + t)) : t;
#pragma unroll
      for (int w = 0; w < W; ++w) {
        cp_async16(buf(stage, u, 0, w), kp + row * D + w * (16 / sizeof(T)), ok);
        cp_async16(buf(stage, u, 1, w), vp + row * D + w * (16 / sizeof(T)), ok);
      }
    }
  };
#pragma unroll
  for (int it = 0; it < S - 1; ++it) {
    if (it < n_iter) issue(it);
    cp_async_commit();  // empty groups keep the group count uniform
  }
  float q[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    to_float8(qr[g], q[g]);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[g][j] *= p.scale_log2;
  }

  for (int it = 0; it < n_iter; ++it) {
    cp_async_wait<S - 2>();  // stage `it` has landed (this thread's own words)
    Raw8<T> kr[U], vr[U];
    const int stage = it % S;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      kr[u].a = *buf(stage, u, 0, 0);
      vr[u].a = *buf(stage, u, 1, 0);
      if constexpr (W == 2) {
        kr[u].b = *buf(stage, u, 0, 1);
        vr[u].b = *buf(stage, u, 1, 1);
      }
    }
    // Refill the stage read one iteration ago (by this thread, already consumed).
    if (it + S - 1 < n_iter) issue(it + S - 1);
    cp_async_commit();

    const int64_t t0 = warp_begin + it * stride;
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
    // Soft-capping (Gemma 2): cap * tanh(x / cap) of the scaled logit x, here in log2 units.
    if (p.softcap_log2 > 0.f) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int g = 0; g < GT; ++g) s[u][g] = p.softcap_log2 * tanhf(s[u][g] / p.softcap_log2);
    }

    // Online softmax with lazy rescaling: the running max m only moves (and acc / l are rescaled)
    // when some score of the warp exceeds it by more than kLazy (log2 units); otherwise the weights
    // exp2(s - m) stay <= 2^kLazy, exact in fp32. After the first tokens rescales are rare.
    if (t0 + kStep > t_end) {  // a stage past the split's end: mask its rows
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (t0 + u * TPW + slot >= t_end)
#pragma unroll
          for (int g = 0; g < GT; ++g) s[u][g] = -INFINITY;
    }
    bool grow = false;
    float mx[GT];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      mx[g] = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx[g] = fmaxf(mx[g], s[u][g]);
      grow |= mx[g] > m[g] + kLazy;  // also true for the first scores (m = -inf)
    }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        const float corr = exp2f(m[g] - (mx[g] == -INFINITY ? 0.f : mx[g]));
        m[g] = mx[g];
        l[g] *= corr;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[g][j] *= corr;
      }
    }
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      const float mu = m[g] == -INFINITY ? 0.f : m[g];
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
  cp_async_wait<0>();

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
  // Merge the warps through shared memory (reusing the pipeline ring: everything has landed).
  __syncthreads();
  constexpr int DP = Sh::DP;
  float(*s_acc)[GT][DP] = reinterpret_cast<float(*)[GT][DP]>(s_pipe);
  float2(*s_ml)[GT] = reinterpret_cast<float2(*)[GT]>(reinterpret_cast<float*>(s_pipe) + kWarps * GT * DP);
  static_assert(kWarps * GT * DP * sizeof(float) + kWarps * GT * sizeof(float2) <= Sh::kSmemBytes, "merge buffer");
  if (slot == 0) {
#pragma unroll
    for (int g = 0; g < GT; ++g) {
#pragma unroll
      for (int j = 0; j < 8; ++j) s_acc[warp][g][sub * 8 + j] = acc[g][j];
      if (sub == 0) s_ml[warp][g] = make_float2(m[g], l[g]);
    }
  }
  __syncthreads();

  // Thread e handles element (g, d) = (e / D, e % D).
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

// Pass 2: grid (n_head, D / 32), one warp a block: merges the splits of one query head for 32
// of its dimensions. Dynamic shared memory: n_split floats (the split weights).
template <typename T, int D>
__global__ void __launch_bounds__(32) combine_kernel(const Params p) {
  extern __shared__ float s_w[];
  pdl_trigger();
  pdl_wait();  // pass 1's results
  const int h = blockIdx.x, lane = threadIdx.x, d = blockIdx.y * 32 + lane;
  const int64_t len = p.length[h / p.group];
  const int64_t n_nonempty = (len + p.chunk - 1) / p.chunk;
  const int n_valid = len <= 0 ? 0 : static_cast<int>(n_nonempty < p.n_split ? n_nonempty : p.n_split);
  T* out = static_cast<T*>(p.o) + static_cast<int64_t>(h) * D;
  if (n_valid == 0) {
    out[d] = from_float<T>(0.f);
    return;
  }
  const float2* ml = p.part_ml + static_cast<int64_t>(h) * p.n_split;
  float mx = -INFINITY;
  for (int s = lane; s < n_valid; s += 32) mx = fmaxf(mx, ml[s].x);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  const float mu = mx == -INFINITY ? 0.f : mx;
  float lsum = 0.f;
  for (int s = lane; s < n_valid; s += 32) {
    const float2 v = ml[s];
    const float w = exp2f(v.x - mu);
    s_w[s] = w;
    lsum += v.y * w;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
  __syncwarp();
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
  out[d] = from_float<T>(lsum > 0.f ? o / lsum : 0.f);
}

/// Per-device, per-instance setup: raises the dynamic shared-memory limit of the pass-1 kernel
/// (once) and returns its resident blocks per SM.
template <typename T, int D, int GT, bool kGather>
int configure_split_kernel() {
  static std::atomic<int> occupancy[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) dev = 0;
  int occ = occupancy[dev].load(std::memory_order_relaxed);
  if (occ > 0) return occ;
  const auto kern = decode_split_kernel<T, D, GT, kGather>;
  const int smem = static_cast<int>(kSplitSmem<T, D, GT>);
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, kThreads, smem) != cudaSuccess || occ < 1) occ = 1;
  occupancy[dev].store(occ, std::memory_order_relaxed);
  return occ;
}

template <typename T, int D, int GT>
cudaError_t launch_typed(const Params& p, int n_head, int n_items, cudaStream_t stream) {
  const dim3 grid(n_items, p.n_hchunk);
  constexpr size_t smem = kSplitSmem<T, D, GT>;
  cudaError_t err;
  if (p.index) {
    configure_split_kernel<T, D, GT, true>();
    err = launch_pdl(decode_split_kernel<T, D, GT, true>, grid, kThreads, smem, stream, p);
  } else {
    configure_split_kernel<T, D, GT, false>();
    err = launch_pdl(decode_split_kernel<T, D, GT, false>, grid, kThreads, smem, stream, p);
  }
  if (err != cudaSuccess || p.n_split == 1) return err;
  return launch_pdl(combine_kernel<T, D>, dim3(n_head, D / 32), 32, p.n_split * sizeof(float), stream, p);
}

template <typename T, int D>
cudaError_t launch_gt(const Params& p, int gt, int n_head, int n_items, cudaStream_t stream) {
  switch (gt) {
    case 1:
      return launch_typed<T, D, 1>(p, n_head, n_items, stream);
    case 2:
      return launch_typed<T, D, 2>(p, n_head, n_items, stream);
    case 4:
      return launch_typed<T, D, 4>(p, n_head, n_items, stream);
    case 8:
      return launch_typed<T, D, 8>(p, n_head, n_items, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_d(const Params& p, int d, int gt, int n_head, int n_items, cudaStream_t stream) {
  switch (d) {
    case 64:
      return launch_gt<T, 64>(p, gt, n_head, n_items, stream);
    case 96:
      return launch_gt<T, 96>(p, gt, n_head, n_items, stream);
    case 128:
      return launch_gt<T, 128>(p, gt, n_head, n_items, stream);
    case 256:
      return launch_gt<T, 256>(p, gt, n_head, n_items, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

/// Resident pass-1 blocks per SM of the dense instance for (dtype, D, GT); 0 if unsupported.
template <typename T>
int occupancy_d(int d, int gt) {
  auto pick = [&](auto dc) -> int {
    constexpr int DD = decltype(dc)::value;
    switch (gt) {
      case 1:
        return configure_split_kernel<T, DD, 1, false>();
      case 2:
        return configure_split_kernel<T, DD, 2, false>();
      case 4:
        return configure_split_kernel<T, DD, 4, false>();
      case 8:
        return configure_split_kernel<T, DD, 8, false>();
      default:
        return 0;
    }
  };
  switch (d) {
    case 64:
      return pick(std::integral_constant<int, 64>{});
    case 96:
      return pick(std::integral_constant<int, 96>{});
    case 128:
      return pick(std::integral_constant<int, 128>{});
    case 256:
      return pick(std::integral_constant<int, 256>{});
    default:
      return 0;
  }
}

int occupancy_of(DType dtype, int d, int gt) {
  switch (dtype) {
    case DType::kFloat32:
      return occupancy_d<float>(d, gt);
    case DType::kBFloat16:
      return occupancy_d<__nv_bfloat16>(d, gt);
    case DType::kFloat16:
      return occupancy_d<__half>(d, gt);
  }
  return 0;
}

int head_chunk_for(int group) {
  int gt = 1;
  while (gt < group && gt < 8) gt *= 2;
  return gt;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool decode_attention_head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

DecodeAttentionPlan plan_decode_attention(DType dtype, int n_head, int n_head_kv, int head_dim, int64_t max_len,
                                          int64_t total_len, int n_split_override) {
  DecodeAttentionPlan plan;
  if (n_head <= 0 || n_head_kv <= 0 || !decode_attention_head_dim_supported(head_dim)) return plan;
  const int group = std::max(1, n_head / n_head_kv);
  plan.head_chunk = head_chunk_for(group);
  const int n_hchunk = (group + plan.head_chunk - 1) / plan.head_chunk;
  max_len = std::max<int64_t>(max_len, 1);
  const int64_t total = total_len > 0 ? std::max(total_len, max_len) : max_len * n_head_kv;
  if (n_split_override <= 0) {
    // One full wave: work items x head chunks <= resident blocks per SM x SMs. Head h takes
    // <= len_h / chunk + 1 items, so total / chunk + n_head_kv items must fit; at least kMinChunk
    // tokens per item (half that where kMinChunk-token items would give fewer than 1.5 blocks per
    // SM: compressed caches of a few hundred entries per head; docs/performance.md), the chunk
    // rounded to whole block steps.
    const int occ = std::max(1, occupancy_of(dtype, head_dim, plan.head_chunk));
    const int64_t items = static_cast<int64_t>(occ) * detail::sm_count() / n_hchunk - n_head_kv;
    int64_t chunk = items > 0 ? (total + items - 1) / items : max_len;
    const int64_t min_chunk = 2 * total * n_hchunk / kMinChunk >= 3 * detail::sm_count() ? kMinChunk : kMinChunk / 2;
    chunk = std::max<int64_t>(min_chunk, chunk);
    const int rows_per_warp = 32 / ((head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256) / 8);  // Shape::TPW
    const int64_t step = kWarps * rows_per_warp * 4;  // tokens per block step (bf16/fp16, GT <= 4)
    plan.chunk = (chunk + step - 1) / step * step;
  } else {
    const int64_t ns = std::min<int64_t>(n_split_override, max_len);
    plan.chunk = (max_len + ns - 1) / ns;
  }
  plan.n_split = static_cast<int>((max_len + plan.chunk - 1) / plan.chunk);
  plan.n_items = static_cast<int>(std::min<int64_t>((total + plan.chunk - 1) / plan.chunk + n_head_kv, INT32_MAX));
  if (plan.n_split > 1) {
    const size_t rows = static_cast<size_t>(n_head) * plan.n_split;
    plan.workspace_bytes = rows * head_dim * sizeof(float) + rows * sizeof(float2);
  }
  return plan;
}

cudaError_t decode_attention(const DecodeAttentionArgs& a, const DecodeAttentionPlan& plan, void* workspace,
                             cudaStream_t stream) {
  if (a.n_head <= 0 || a.n_head_kv <= 0 || a.group <= 0 || a.n_head != a.n_head_kv * a.group)
    return cudaErrorInvalidValue;
  if (!decode_attention_head_dim_supported(a.head_dim) || !(a.softcap >= 0.f)) return cudaErrorInvalidValue;
  if (plan.n_split < 1 || plan.chunk < 1 || plan.n_items < 1 || plan.head_chunk != head_chunk_for(a.group))
    return cudaErrorInvalidValue;
  if (!a.q || !a.k || !a.v || !a.o || !a.offset || !a.length) return cudaErrorInvalidValue;
  const size_t es = dtype_size(a.dtype);
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || (a.q_stride * es) % 16 != 0)
    return cudaErrorInvalidValue;
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
  p.softcap_log2 = a.softcap * kLog2e;
  p.o = a.o;
  p.group = a.group;
  p.n_head_kv = a.n_head_kv;
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
    case DType::kFloat32:
      return launch_d<float>(p, a.head_dim, plan.head_chunk, a.n_head, plan.n_items, stream);
    case DType::kBFloat16:
      return launch_d<__nv_bfloat16>(p, a.head_dim, plan.head_chunk, a.n_head, plan.n_items, stream);
    case DType::kFloat16:
      return launch_d<__half>(p, a.head_dim, plan.head_chunk, a.n_head, plan.n_items, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
