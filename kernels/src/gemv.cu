// Batch-1 GEMV (see gemv.h; 2..8 rows: gemv_rows.cu). One warp per row of W, 8 rows per 256-thread block; each lane
// streams 16-byte vectors of its row with cache-streaming loads (the weight is read once per
// token: keep it out of L1), four in flight, and dots them with the matching vector of x (x is
// tiny and shared by every warp: read-only cached loads). A warp shuffle sums the lanes.
// Launched as a programmatic dependent (pdl.cuh): the weights depend on no kernel, so before its
// wait a block loads its first weight vectors into registers and, for the rows within the first
// kL2PrefetchBytes of W, asks L2 for the rest of its rows. While the kernels before it are
// latency-bound (page selection, attention over a few rows, norms) the projection's weights are
// then already on their way. The QKV projection's RoPE + cache-append epilogue (gemv_rope_kernel)
// has each warp stream both rows of one rotation pair and store the rotated pair itself.
// RMSNorm without a launch (GemvArgs::norm_sumsq / next_norm_g): the producing projection (o, down)
// also stores g ⊙ y and one Σ y² per block (its warps meet at one barrier at their end); every
// warp of the consuming projection (QKV, gate/up, LM head) adds a row's partial sums, loaded with
// its x, and scales its product once. No per-weight work is added to either.
#include "dtype.cuh"
#include "gemv_rows.cuh"
#include "kvscope/kernels/gemv.h"
#include "pdl.cuh"

namespace kvscope::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;
using detail::kL2PrefetchBytes;
using detail::norm_scale;
constexpr int kLineBytes = 128;

/// A lane's share of the sum of one row's norm parts (GemvArgs::norm_sumsq): parts lane, lane + 32, ...
/// (four at a time where the row is 16-byte aligned).
__device__ __forceinline__ float norm_partial(const float* p, int64_t parts, int lane) {
  float s = 0.f;
  if ((parts & 3) == 0 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const float4* q = reinterpret_cast<const float4*>(p);
    for (int64_t i = lane; i < parts / 4; i += 32) {
      const float4 v = __ldg(q + i);
      s += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = lane; i < parts; i += 32) s += __ldg(p + i);
  }
  return s;
}

template <typename T>
__device__ __forceinline__ float dot16(const uint4& w, const uint4& x) {
  const T* a = reinterpret_cast<const T*>(&w);
  const T* b = reinterpret_cast<const T*>(&x);
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < static_cast<int>(16 / sizeof(T)); ++j) s = fmaf(dtype::to_f<T>(a[j]), dtype::to_f<T>(b[j]), s);
  return s;
}

/// A warp's dot products of x with R rows of W (row r: 16-byte vectors w[r][0 .. nvec)), each lane
/// taking vectors lane, lane + 32, ..., kUnroll of each row in flight, x through read-only cached
/// loads. In three parts, so that a kernel places its programmatic-dependent wait (and its own
/// loads) between them: the constructor loads the first kUnroll vectors of each row (weights only:
/// no kernel writes them, so before the wait), first() takes their products, rest() the others and
/// sums the lanes (every lane gets acc[r]).
template <typename T, int R>
struct RowDots {
  const uint4* w[R];
  int64_t nvec, i;
  bool full;
  uint4 wv[R][kUnroll];
  float acc[R];

  __device__ __forceinline__ RowDots(const uint4* const (&rows)[R], int64_t n_vec, int lane)
      : nvec(n_vec), i(lane), full(lane + (kUnroll - 1) * 32 < n_vec) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r] = rows[r];
      acc[r] = 0.f;
    }
    if (full) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r][u] = __ldcs(w[r] + i + u * 32);
    }
  }
  /// Asks L2 for the rest of every row (row_bytes each), past the vectors loaded already.
  __device__ __forceinline__ void prefetch_rest(int64_t row_bytes, int lane) const {
    for (int64_t b = (kUnroll * 32 * 16 / kLineBytes + lane) * kLineBytes; b < row_bytes; b += 32 * kLineBytes)
#pragma unroll
      for (int r = 0; r < R; ++r) prefetch_l2(reinterpret_cast<const char*>(w[r]) + b);
  }
  __device__ __forceinline__ void first(const uint4* x) {
    if (!full) return;
    uint4 xv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) xv[u] = __ldg(x + i + u * 32);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += dot16<T>(wv[r][u], xv[u]);
    i += kUnroll * 32;
  }
  __device__ __forceinline__ void rest(const uint4* x) {
    for (; i + (kUnroll - 1) * 32 < nvec; i += kUnroll * 32) {
      uint4 xv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r][u] = __ldcs(w[r] + i + u * 32);
        xv[u] = __ldg(x + i + u * 32);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += dot16<T>(wv[r][u], xv[u]);
    }
    for (; i < nvec; i += 32) {
      const uint4 xv = __ldg(x + i);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += dot16<T>(__ldcs(w[r] + i), xv);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  }
};

/// RoPE + append (GemvEpilogue::kRopeAppend): the rows of W between a rotation pair's base row
/// and its partner: head_dim / 2 (rotate-half: channels j, j + D/2) or 1 (adjacent pairs: 2j, 2j + 1).
__device__ __forceinline__ int64_t pair_stride(const GemvArgs& a) {
  return a.rope.mode == RopeMode::kRotateHalf ? a.rope.head_dim / 2 : 1;
}

/// The pair warp slot i (0 .. n/2 - 1 in launch order) takes: rotated so that the K and V heads'
/// pairs come first, and the warps that count themselves in an append ticket run in the first wave.
__device__ __forceinline__ int64_t pair_index(const GemvArgs& a, int64_t i) {
  const int64_t pairs = a.n / 2, q_pairs = static_cast<int64_t>(a.rope.n_head) * (a.rope.head_dim / 2);
  return i + q_pairs < pairs ? i + q_pairs : i + q_pairs - pairs;
}

/// The base row of W of pair c for stride S (its partner: + S).
__device__ __forceinline__ int64_t pair_base_row(int64_t c, int64_t S) { return (c / S) * 2 * S + c % S; }

/// KV head of W whose K or V rows hold base_row, or -1 for a query head.
__device__ __forceinline__ int64_t rope_kv_head(const GemvArgs& a, int64_t base_row) {
  const int64_t head = base_row / a.rope.head_dim;
  return head < a.rope.n_head ? -1 : (head - a.rope.n_head) % a.rope.n_head_kv;
}

/// cos / sin of pair (base_row, + S)'s angle for q and k heads (1, 0 for v heads).
template <typename T>
__device__ __forceinline__ float2 rope_angle(const GemvArgs& a, int64_t base_row) {
  const GemvRopeAppend& r = a.rope;
  if (base_row / r.head_dim >= r.n_head + r.n_head_kv) return make_float2(1.f, 0.f);
  const int d = static_cast<int>(base_row % r.head_dim), j = r.mode == RopeMode::kRotateHalf ? d : d / 2;
  return make_float2(dtype::to_f<T>(static_cast<const T*>(r.cos)[j]), dtype::to_f<T>(static_cast<const T*>(r.sin)[j]));
}

/// Stores pair (base_row, base_row + S): x0, x1 are its outputs as the plain GEMV rounds them
/// (acc + bias, rounded to T); q and k pairs are rotated by angle (cos, sin) as rope.h's kernel does,
/// k and v pairs also go to their cache row. y: the plain [n] layout (one row of x).
template <typename T>
__device__ __forceinline__ void rope_store_pair(const GemvArgs& a, int64_t base_row, float x0, float x1, float2 angle,
                                                int64_t key_row, int64_t value_row) {
  const GemvRopeAppend& r = a.rope;
  const int64_t head = base_row / r.head_dim, S = pair_stride(a);
  const int d = static_cast<int>(base_row % r.head_dim);
  const float y0 = x0 * angle.x - x1 * angle.y, y1 = x1 * angle.x + x0 * angle.y;  // v: angle (1, 0)
  const T t0 = dtype::from_f<T>(y0), t1 = dtype::from_f<T>(y1);
  static_cast<T*>(a.y)[base_row] = t0;
  static_cast<T*>(a.y)[base_row + S] = t1;
  if (head >= r.n_head) {
    const bool is_k = head < r.n_head + r.n_head_kv;
    T* cache = static_cast<T*>(is_k ? r.k_cache : r.v_cache) + (is_k ? key_row : value_row) * r.head_dim;
    cache[d] = t0;
    cache[d + S] = t1;
  }
}

// kSwiGlu (GemvEpilogue::kSwiGlu): block b's warps 0..3 take gate rows 4b .. 4b + 3, warps 4..7
// the matching up rows I + 4b ..; the block's 4 outputs are silu(gate) * up. kNormOut
// (GemvArgs::next_norm_g): plain, dtype outputs; the block's warps meet at one barrier at the end.
template <typename T, bool kF32Out, bool kSwiGlu, bool kNormOut = false>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvArgs a) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kOut = kSwiGlu ? kWarps / 2 : kWarps;  // outputs per block
  __shared__ float s_dot[kWarps];  // SwiGLU: the gate / up values; with next_norm_g: the outputs' squares
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  pdl_trigger();
  const int64_t inter = a.n / 2, col = static_cast<int64_t>(blockIdx.x) * kOut + warp % kOut;
  const int64_t row = !kSwiGlu ? col : warp < kOut ? col : inter + col;   // the warp's row of W
  const int64_t rank = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // rows of W before it in block order
  if constexpr (!kSwiGlu && !kNormOut) {
    if (row >= a.n) return;
  }
  const bool live = kSwiGlu ? col < inter : row < a.n;  // SwiGLU / kNormOut: a block's warps all reach its barrier
  const int64_t nvec = live ? a.k / V : 0;
  const uint4* w = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + row * a.k);
  RowDots<T, 1> dots({w}, nvec, lane);
  const int64_t row_bytes = a.k * static_cast<int64_t>(sizeof(T));
  if (live && (rank + 1) * row_bytes <= kL2PrefetchBytes) dots.prefetch_rest(row_bytes, lane);
  pdl_wait();
  const float norm_share = a.norm_sumsq ? norm_partial(a.norm_sumsq, a.norm_parts, lane) : 0.f;  // with x
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  dots.first(x);
  dots.rest(x);
  float acc = dots.acc[0];
  if (a.norm_sumsq) acc *= norm_scale(norm_share, a.k, a.norm_eps);
  if (live && a.b) acc += dtype::to_f<T>(static_cast<const T*>(a.b)[row]);
  if constexpr (kSwiGlu) {
    if (lane == 0) s_dot[warp] = dtype::round_to<T>(acc);  // the gate / up value a dtype tensor would hold
    __syncthreads();
    if (threadIdx.x < kOut && blockIdx.x * kOut + threadIdx.x < inter)
      static_cast<T*>(a.y)[blockIdx.x * kOut + threadIdx.x] = dtype::from_f<T>(
          a.epilogue == GemvEpilogue::kGeGlu ? dtype::geglu(s_dot[threadIdx.x], s_dot[threadIdx.x + kOut])
                                             : dtype::swiglu(s_dot[threadIdx.x], s_dot[threadIdx.x + kOut]));
  } else {
    if constexpr (kNormOut) {  // y, g ⊙ y and the block's Σ y² (GemvArgs::next_norm_g)
      const float v = live ? dtype::round_to<T>(acc) : 0.f;
      if (lane == 0 && live) {
        static_cast<T*>(a.y)[row] = dtype::from_f<T>(v);
        static_cast<T*>(a.next_norm_gx)[row] =
            dtype::from_f<T>(dtype::to_f<T>(static_cast<const T*>(a.next_norm_g)[row]) * v);
      }
      if (lane == 0) s_dot[warp] = v * v;
      __syncthreads();
      if (threadIdx.x == 0) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += s_dot[w];
        a.next_norm_sumsq[blockIdx.x] = sum;
      }
      return;
    }
    if (lane != 0) return;
    if constexpr (kF32Out)
      static_cast<float*>(a.y)[row] = acc;
    else
      static_cast<T*>(a.y)[row] = dtype::from_f<T>(acc);
  }
}

// kRopeAppend: warp w of block b takes both rows of pair pair_index(8b + w), its
// base row and partner, kUnroll vectors of each in flight per lane, and stores the rotated pair
// (and its cache row) itself. No block barrier: a warp leaves when its pair is stored, as the
// plain GEMV's do (a block barrier to meet the partner row in another warp cost the decode step
// about a point: bench_pipeline, docs/performance.md). Each K / V warp counts itself in its head's
// append ticket (head_dim warps a head); the last advances the length.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32) gemv_rope_kernel(const GemvArgs a) {
  constexpr int V = 16 / sizeof(T);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  pdl_trigger();
  const int64_t S = pair_stride(a), slot = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t base = pair_base_row(pair_index(a, slot), S), nvec = a.k / V;
  const uint4* w0 = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + base * a.k);
  const uint4* w1 = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + (base + S) * a.k);
  RowDots<T, 2> dots({w0, w1}, nvec, lane);
  const int64_t row_bytes = a.k * static_cast<int64_t>(sizeof(T));
  if ((slot + 1) * 2 * row_bytes <= kL2PrefetchBytes) dots.prefetch_rest(row_bytes, lane);
  pdl_wait();
  const float norm_share = a.norm_sumsq ? norm_partial(a.norm_sumsq, a.norm_parts, lane) : 0.f;  // with x
  const GemvRopeAppend& r = a.rope;
  const int64_t kv = rope_kv_head(a, base);
  float2 angle = make_float2(1.f, 0.f);
  int64_t len = 0, cache_row = 0, key_row = 0, value_row = 0, position = 0;
  if (lane == 0) {  // in flight during the products
    angle = rope_angle<T>(a, base);
    if (kv >= 0) {
      len = r.length[kv];
      position = r.position_dev ? *r.position_dev : r.position;
      cache_row = r.offset[kv] + (r.ring > 0 ? position % r.ring : len);  // a sliding layer's ring
      key_row = r.k_offset ? r.k_offset[kv] + len : cache_row;
      value_row = r.v_offset ? r.v_offset[kv] + len : cache_row;
    }
  }
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  dots.first(x);
  // The warp's append ticket, once its length has arrived (the add's operand depends on it, so a
  // later store by the head's last warp cannot reach that read); the result is used at the end.
  unsigned long long ticket = 0;
  if (lane == 0 && kv >= 0) ticket = atomicAdd(r.tickets + kv, 1ull + (static_cast<unsigned long long>(len) >> 63));
  dots.rest(x);
  float acc0 = dots.acc[0], acc1 = dots.acc[1];
  if (a.norm_sumsq) {
    const float scale = norm_scale(norm_share, a.k, a.norm_eps);
    acc0 *= scale;
    acc1 *= scale;
  }
  if (lane != 0) return;
  if (a.b) {
    acc0 += dtype::to_f<T>(static_cast<const T*>(a.b)[base]);
    acc1 += dtype::to_f<T>(static_cast<const T*>(a.b)[base + S]);
  }
  // Rounded to dtype first: the values the unfused projection's output would hold.
  rope_store_pair<T>(a, base, dtype::round_to<T>(acc0), dtype::round_to<T>(acc1), angle, key_row, value_row);
  if (kv < 0 || ticket != static_cast<unsigned long long>(r.head_dim) - 1) return;
  r.tickets[kv] = 0;  // the head's last K / V warp: every other one has read the length
  if (r.pos) r.pos[cache_row] = position;
  r.length[kv] = r.ring > 0 && len + 1 > r.ring ? r.ring : len + 1;
}

template <typename T>
cudaError_t launch(const GemvArgs& a, cudaStream_t stream) {
  // kWarps rows of W per block (with swiglu: kWarps / 2 gate rows and their up rows, n even).
  const unsigned blocks = static_cast<unsigned>((a.n + kWarps - 1) / kWarps);
  switch (a.epilogue) {
    case GemvEpilogue::kSwiGlu:
    case GemvEpilogue::kGeGlu:
      return launch_pdl(gemv_kernel<T, false, true>, blocks, kWarps * 32, 0, stream, a);
    case GemvEpilogue::kRopeAppend:  // one warp per pair: n / 2 / kWarps blocks (n / 2 % 8 == 0)
      return launch_pdl(gemv_rope_kernel<T>, static_cast<unsigned>(a.n / 2 / kWarps), kWarps * 32, 0, stream, a);
    case GemvEpilogue::kPlain:
      break;
  }
  if (a.next_norm_g) return launch_pdl(gemv_kernel<T, false, false, true>, blocks, kWarps * 32, 0, stream, a);
  return a.y_fp32 ? launch_pdl(gemv_kernel<T, true, false>, blocks, kWarps * 32, 0, stream, a)
                  : launch_pdl(gemv_kernel<T, false, false>, blocks, kWarps * 32, 0, stream, a);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// The epilogue's own conditions (gemv.h: GemvEpilogue).
bool epilogue_supported(const GemvArgs& a) {
  switch (a.epilogue) {
    case GemvEpilogue::kPlain:
      return true;
    case GemvEpilogue::kSwiGlu:
    case GemvEpilogue::kGeGlu:
      return a.n % 2 == 0 && a.y_split[0] == 0 && a.y_split[1] == 0 && !a.y_fp32;
    case GemvEpilogue::kRopeAppend: {
      const GemvRopeAppend& r = a.rope;
      const int64_t D = r.head_dim;
      return a.m == 1 && r.n_head > 0 && r.n_head_kv > 0 && D > 0 && D % 16 == 0 && !a.y_fp32 &&
             (r.mode == RopeMode::kRotateHalf || r.mode == RopeMode::kAdjacentPairs) &&
             a.n == (r.n_head + 2 * static_cast<int64_t>(r.n_head_kv)) * D && a.y_split[0] == r.n_head * D &&
             a.y_split[1] == (r.n_head + static_cast<int64_t>(r.n_head_kv)) * D && r.cos && r.sin && r.k_cache &&
             r.v_cache && r.offset && r.length && r.tickets && r.ring >= 0;
    }
  }
  return false;
}

/// The folded RMSNorms' conditions (GemvArgs::norm_sumsq, next_norm_g).
bool norms_supported(const GemvArgs& a) {
  const bool in =
      !a.norm_sumsq || (a.norm_parts > 0 && (a.m == 1 || a.norm_parts <= kGemvMaxNormParts) && a.norm_eps >= 0.f);
  const bool out = !a.next_norm_g || (a.epilogue == GemvEpilogue::kPlain && !a.y_fp32 && a.y_split[0] == 0 &&
                                      a.y_split[1] == 0 && a.next_norm_gx && a.next_norm_sumsq);
  return in && out;
}

}  // namespace

int64_t gemv_norm_parts(int64_t m, int64_t n) {
  return m == 1 ? (n + kWarps - 1) / kWarps : (n + detail::kTileRows - 1) / detail::kTileRows;
}

bool gemv_supported(const GemvArgs& a) {
  const int64_t item = static_cast<int64_t>(dtype_size(a.dtype));
  return a.m >= 1 && a.m <= 8 && (a.m == 1 || a.dtype != DType::kFloat32) && a.b_stride >= 0 && a.n > 0 &&
         0 <= a.y_split[0] && a.y_split[0] <= a.y_split[1] && a.y_split[1] <= a.n && epilogue_supported(a) &&
         norms_supported(a) && a.k > 0 && a.k <= 32768 && (a.k * item) % 16 == 0 && a.w && a.x && a.y &&
         aligned16(a.w) && aligned16(a.x) && (a.n + kWarps - 1) / kWarps <= 0x7fffffff;
}

cudaError_t gemv(const GemvArgs& a, cudaStream_t stream) {
  if (!gemv_supported(a)) return cudaErrorInvalidValue;
  if (a.m > 1) return detail::gemv_rows(a, stream);
  switch (a.dtype) {
    case DType::kFloat32:
      return launch<float>(a, stream);
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(a, stream);
    case DType::kFloat16:
      return launch<__half>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
