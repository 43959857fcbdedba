// Eviction while decoding at its cap (see evict.h). One block per KV head: the block finds the
// head's argmin over its n scores (strided loads, then warp and block reductions), then shifts the
// rows after it down by one in chunks: every thread loads its 16-byte pieces of the chunk's rows
// r + 1 into registers, the block synchronises, then stores them at row r. A chunk reads only rows
// past what the previous chunk wrote, so one barrier a chunk keeps the in-place move ordered.
#include "kvscope/kernels/evict.h"

#include <cmath>

namespace kvscope::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kVecs = 8;  // 16-byte pieces per thread and tensor in one chunk

/// (x, i) comes before (y, j) in at::argmin's order: NaN first, then smaller, then the lower index.
__device__ __forceinline__ bool before(float x, int64_t i, float y, int64_t j) {
  const bool xn = isnan(x), yn = isnan(y);
  if (xn != yn) return xn;
  if (xn || x == y) return i < j;
  return x < y;
}

__global__ void __launch_bounds__(kThreads) drop_lowest_kernel(const DropLowestArgs a, int64_t row_vecs) {
  const int h = blockIdx.x, tid = threadIdx.x;
  const float* s = a.scores + static_cast<int64_t>(h) * a.n;
  const int64_t candidates = a.candidates > 0 ? a.candidates : a.n;
  float best = INFINITY;
  int64_t bi = a.n;  // sentinel: loses to every real entry
  for (int64_t i = tid; i < candidates; i += kThreads)
    if (before(s[i], i, best, bi)) best = s[i], bi = i;
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_down_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_down_sync(0xffffffffu, bi, o);
    if (before(ob, oi, best, bi)) best = ob, bi = oi;
  }
  __shared__ float wb[kThreads / 32];
  __shared__ int64_t wi[kThreads / 32];
  __shared__ int64_t drop_sh;
  if ((tid & 31) == 0) wb[tid / 32] = best, wi[tid / 32] = bi;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (before(wb[w], wi[w], best, bi)) best = wb[w], bi = wi[w];
    drop_sh = bi;
  }
  __syncthreads();
  const int64_t drop = drop_sh, last = a.n - 1;  // rows drop + 1 .. last move to drop .. last - 1
  const int64_t base = static_cast<int64_t>(h) * a.capacity;
  uint4* k = static_cast<uint4*>(a.k) + base * row_vecs;
  uint4* v = static_cast<uint4*>(a.v) + base * row_vecs;
  int64_t* pos = a.pos + base;
  float* along = a.alongside ? a.alongside + static_cast<int64_t>(h) * a.alongside_stride : nullptr;
  const int64_t chunk = kThreads * kVecs / row_vecs;  // rows per chunk
  for (int64_t r0 = drop; r0 < last; r0 += chunk) {
    const int64_t rows = min(chunk, last - r0), pieces = rows * row_vecs;
    uint4 kr[kVecs], vr[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t p = tid + static_cast<int64_t>(j) * kThreads;
      if (p < pieces) {
        const int64_t src = (r0 + 1) * row_vecs + p;
        kr[j] = k[src];
        vr[j] = v[src];
      }
    }
    const int64_t pr = tid < rows ? pos[r0 + 1 + tid] : 0;
    const float ar = along && tid < rows ? along[r0 + 1 + tid] : 0.f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t p = tid + static_cast<int64_t>(j) * kThreads;
      if (p < pieces) {
        k[r0 * row_vecs + p] = kr[j];
        v[r0 * row_vecs + p] = vr[j];
      }
    }
    if (tid < rows) {
      pos[r0 + tid] = pr;
      if (along) along[r0 + tid] = ar;
    }
  }
  if (tid == 0) {
    if (a.length) a.length[h] -= 1;
    if (a.dropped) a.dropped[h] = drop;
  }
}

}  // namespace

bool drop_lowest_supported(DType dtype, int head_dim) {
  // A chunk (kThreads * kVecs pieces) must hold at least one row and at most kThreads rows (one
  // position per thread).
  const int64_t row_bytes = static_cast<int64_t>(head_dim) * static_cast<int64_t>(dtype_size(dtype));
  return head_dim > 0 && row_bytes % 16 == 0 && row_bytes / 16 >= kVecs && row_bytes / 16 <= kThreads * kVecs;
}

cudaError_t drop_lowest(const DropLowestArgs& a, cudaStream_t stream) {
  const int64_t row_bytes = static_cast<int64_t>(a.head_dim) * static_cast<int64_t>(dtype_size(a.dtype));
  if (a.n_head_kv <= 0 || !drop_lowest_supported(a.dtype, a.head_dim) || a.n < 1 || a.n > a.capacity || !a.scores ||
      !a.k || !a.v || !a.pos || a.candidates < 0 || a.candidates > a.n || (a.alongside && a.alongside_stride < a.n))
    return cudaErrorInvalidValue;
  drop_lowest_kernel<<<a.n_head_kv, kThreads, 0, stream>>>(a, row_bytes / 16);
  return cudaGetLastError();
}

}  // namespace kvscope::kernels
