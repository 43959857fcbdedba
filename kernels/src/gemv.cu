// Batch-1 GEMV (see gemv.h; 2..8 rows: gemv_rows.cu). One warp per row of W, 8 rows per 256-thread block; each lane
// streams 16-byte vectors of its row with cache-streaming loads (the weight is read once per
// token: keep it out of L1), four in flight, and dots them with the matching vector of x (x is
// tiny and shared by every warp: read-only cached loads). A warp shuffle sums the lanes.
// Launched as a programmatic dependent (pdl.cuh): the weights depend on no kernel, so before its
// wait a block loads its first weight vectors into registers and, for the rows within the first
// kL2PrefetchBytes of W, asks L2 for the rest of its rows. While the kernels before it are
// latency-bound (page selection, attention over a few rows, norms) the projection's weights are
// then already on their way.
#include "dtype.cuh"
#include "gemv_rows.cuh"
#include "kvscope/kernels/gemv.h"
#include "pdl.cuh"

namespace kvscope::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;
using detail::kL2PrefetchBytes;
constexpr int kLineBytes = 128;

template <typename T>
__device__ __forceinline__ float dot16(const uint4& w, const uint4& x) {
  const T* a = reinterpret_cast<const T*>(&w);
  const T* b = reinterpret_cast<const T*>(&x);
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < static_cast<int>(16 / sizeof(T)); ++j) s = fmaf(dtype::to_f<T>(a[j]), dtype::to_f<T>(b[j]), s);
  return s;
}

// kSwiGlu (GemvArgs::swiglu): block b's warps 0..3 take gate rows 4b .. 4b + 3, warps 4..7 the
// matching up rows I + 4b ..; the block's 4 outputs are silu(gate) * up.
template <typename T, bool kF32Out, bool kSwiGlu>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvArgs a) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kOut = kSwiGlu ? kWarps / 2 : kWarps;  // outputs per block
  __shared__ float s_dot[kSwiGlu ? kWarps : 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  pdl_trigger();
  const int64_t inter = a.n / 2, col = static_cast<int64_t>(blockIdx.x) * kOut + warp % kOut;
  const int64_t row = !kSwiGlu ? col : warp < kOut ? col : inter + col;  // the warp's row of W
  const int64_t rank = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // rows of W before it in block order
  if constexpr (!kSwiGlu) {
    if (row >= a.n) return;
  }
  const bool live = !kSwiGlu || col < inter;  // a SwiGLU block's warps all reach its barrier
  const int64_t nvec = live ? a.k / V : 0;
  const uint4* w = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + row * a.k);
  // Before the wait: weights only (no kernel writes them).
  uint4 wv[kUnroll];
  int64_t i = lane;
  const bool full = i + (kUnroll - 1) * 32 < nvec;
  if (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w + i + u * 32);
  }
  const int64_t row_bytes = a.k * static_cast<int64_t>(sizeof(T));
  if (live && (rank + 1) * row_bytes <= kL2PrefetchBytes)
    for (int64_t b = (kUnroll * 32 * 16 / kLineBytes + lane) * kLineBytes; b < row_bytes; b += 32 * kLineBytes)
      prefetch_l2(reinterpret_cast<const char*>(w) + b);
  pdl_wait();
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  float acc = 0.f;
  if (full) {
    uint4 xv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) xv[u] = __ldg(x + i + u * 32);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += dot16<T>(wv[u], xv[u]);
    i += kUnroll * 32;
  }
  for (; i + (kUnroll - 1) * 32 < nvec; i += kUnroll * 32) {
    uint4 xv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      wv[u] = __ldcs(w + i + u * 32);
      xv[u] = __ldg(x + i + u * 32);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += dot16<T>(wv[u], xv[u]);
  }
  for (; i < nvec; i += 32) acc += dot16<T>(__ldcs(w + i), __ldg(x + i));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (live && a.b) acc += dtype::to_f<T>(static_cast<const T*>(a.b)[row]);
  if constexpr (kSwiGlu) {
    if (lane == 0) s_dot[warp] = dtype::round_to<T>(acc);  // the gate / up value a dtype tensor would hold
    __syncthreads();
    if (threadIdx.x < kOut && blockIdx.x * kOut + threadIdx.x < inter)
      static_cast<T*>(a.y)[blockIdx.x * kOut + threadIdx.x] =
          dtype::from_f<T>(dtype::swiglu(s_dot[threadIdx.x], s_dot[threadIdx.x + kOut]));
  } else {
    if (lane != 0) return;
    if constexpr (kF32Out) static_cast<float*>(a.y)[row] = acc;
    else static_cast<T*>(a.y)[row] = dtype::from_f<T>(acc);
  }
}

template <typename T>
cudaError_t launch(const GemvArgs& a, cudaStream_t stream) {
  // kWarps rows of W per block (with swiglu: kWarps / 2 gate rows and their up rows, n even).
  const unsigned blocks = static_cast<unsigned>((a.n + kWarps - 1) / kWarps);
  if (a.swiglu) return launch_pdl(gemv_kernel<T, false, true>, blocks, kWarps * 32, 0, stream, a);
  return a.y_fp32 ? launch_pdl(gemv_kernel<T, true, false>, blocks, kWarps * 32, 0, stream, a)
                  : launch_pdl(gemv_kernel<T, false, false>, blocks, kWarps * 32, 0, stream, a);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_supported(const GemvArgs& a) {
  const int64_t item = static_cast<int64_t>(dtype_size(a.dtype));
  return a.m >= 1 && a.m <= 8 && (a.m == 1 || a.dtype != DType::kFloat32) && a.b_stride >= 0 && a.n > 0 &&
         0 <= a.y_split[0] && a.y_split[0] <= a.y_split[1] && a.y_split[1] <= a.n &&
         (!a.swiglu || (a.n % 2 == 0 && a.y_split[0] == 0 && a.y_split[1] == 0 && !a.y_fp32)) &&
         a.k > 0 && a.k <= 32768 && (a.k * item) % 16 == 0 && a.w && a.x && a.y && aligned16(a.w) && aligned16(a.x) &&
         (a.n + kWarps - 1) / kWarps <= 0x7fffffff;
}

cudaError_t gemv(const GemvArgs& a, cudaStream_t stream) {
  if (!gemv_supported(a)) return cudaErrorInvalidValue;
  if (a.m > 1) return detail::gemv_rows(a, stream);
  switch (a.dtype) {
    case DType::kFloat32: return launch<float>(a, stream);
    case DType::kBFloat16: return launch<__nv_bfloat16>(a, stream);
    case DType::kFloat16: return launch<__half>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
