// Capture's per-head summary statistics (see head_stats.h).
//
// attention_stats: three blocks of 1024 threads per row. Pass 0 sums a, a·log a and the sink mass.
// Then three radix selects (radix_select.cuh): the k-th largest value for k = ceil(1% n) and
// ceil(5% n) (by count) and the value where the descending prefix mass reaches 95% (by mass). The
// row stays in L2 across the passes.
//
// key_stats: a warp per key row (lane l holds channels l, l + 32, ...), the row norm by shuffles,
// per-lane partial sums for the block's rows, a shared reduction over warps, one global atomic per
// (head, statistic, channel) per block.
#include <cfloat>
#include <cstdint>

#include "dtype.cuh"
#include "kvscope/kernels/head_stats.h"
#include "radix_select.cuh"

namespace kvscope::kernels {
namespace {

using radix::Histograms;
using radix::kThreads;
using radix::Selected;

__device__ double block_sum(double v, int slot, Histograms& h) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) h.red[slot][threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += h.red[slot][w];
  return total;
}

// Grid (rows, 3): every block sums its row (fp64), then block y = 0 writes entropy, sink share and
// the top-1% mass, y = 1 the top-5% mass, y = 2 the 95% point: three selects in parallel.
__global__ void __launch_bounds__(kThreads) attention_stats_kernel(const AttentionStatsArgs a) {
  __shared__ Histograms h;
  const float* row = a.a + static_cast<int64_t>(blockIdx.x) * a.a_stride;
  const int64_t n = a.n;
  const int part = blockIdx.y;
  double sum = 0.0, alog = 0.0, sink = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float x = row[j];
    sum += x;
    if (part == 0) {
      if (x > 0.f) alog += static_cast<double>(x) * logf(x);
      if (j < a.sink) sink += x;
    }
  }
  sum = block_sum(sum, 0, h);
  if (part == 0) {
    alog = block_sum(alog, 1, h);
    sink = block_sum(sink, 2, h);
  }
  __syncthreads();
  float* out = a.out + static_cast<int64_t>(blockIdx.x) * kAttentionStats;
  if (!(sum > 0.0)) {
    if (threadIdx.x == 0 && part == 0) out[0] = 0.f, out[1] = 0.f, out[2] = 0.f, out[3] = 1.f, out[4] = 0.f;
    return;
  }
  if (part < 2) {
    const double frac = part == 0 ? 0.01 : 0.05;
    int64_t k = static_cast<int64_t>(ceil(frac * static_cast<double>(n)));
    k = k < 1 ? 1 : (k > n ? n : k);
    const Selected s = radix::select(row, n, false, static_cast<double>(k), h);
    const double mass = s.mass_above + (static_cast<double>(k) - static_cast<double>(s.count_above)) * s.value;
    if (threadIdx.x == 0) {
      out[1 + part] = static_cast<float>(mass / sum);
      if (part == 0) {
        out[0] = static_cast<float>(log(sum) - alog / sum);
        out[4] = static_cast<float>(sink / sum);
      }
    }
    return;
  }
  const double target = 0.95 * sum;
  const Selected s = radix::select(row, n, true, target, h);
  double m;
  if (s.value > 0.f) {
    double extra = ceil((target - s.mass_above) / static_cast<double>(s.value));
    extra = extra < 1.0 ? 1.0 : (extra > double(s.ties) ? double(s.ties) : extra);
    m = static_cast<double>(s.count_above) + extra;
  } else {
    m = static_cast<double>(n);  // the mass never reaches 95% before the zeros
  }
  if (m > static_cast<double>(n)) m = static_cast<double>(n);
  if (threadIdx.x == 0) out[3] = static_cast<float>(m / static_cast<double>(n));
}

constexpr int kKeyWarps = 8;
constexpr int kKeyRowsPerBlock = 512;
constexpr int kMaxPerLane = 8;  // D <= 256

template <typename T>
__global__ void __launch_bounds__(kKeyWarps * 32) key_stats_kernel(const KeyStatsArgs a) {
  __shared__ float part[kKeyWarps][3][kMaxPerLane * 32];
  const int D = a.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = blockIdx.y;
  const T* base = static_cast<const T*>(a.k) + static_cast<int64_t>(h) * a.k_head_stride;
  float s1[kMaxPerLane], s2[kMaxPerLane], s3[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) s1[i] = s2[i] = s3[i] = 0.f;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kKeyRowsPerBlock;
  const int64_t t1 = t0 + kKeyRowsPerBlock < a.n ? t0 + kKeyRowsPerBlock : a.n;
  for (int64_t t = t0 + warp; t < t1; t += kKeyWarps) {
    const T* r = base + t * D;
    float x[kMaxPerLane];
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int c = lane + 32 * i;
      x[i] = c < D ? dtype::to_f<T>(r[c]) : 0.f;
      sq += x[i] * x[i];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
    const float inv = 1.f / fmaxf(sqrtf(sq), 1e-12f);
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      s1[i] += x[i] * inv;
      s2[i] += fabsf(x[i]);
      s3[i] += x[i] * x[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    part[warp][0][lane + 32 * i] = s1[i];
    part[warp][1][lane + 32 * i] = s2[i];
    part[warp][2][lane + 32 * i] = s3[i];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 3 * D; i += blockDim.x) {
    const int stat = i / D, c = i % D;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kKeyWarps; ++w) v += part[w][stat][c];
    atomicAdd(a.out + (static_cast<int64_t>(h) * 3 + stat) * D + c, v);
  }
}

constexpr int kAxesThreads = 256;
constexpr int kMaxAxesDim = 1024;

/// Block-wide sum of two values per thread into every thread.
__device__ float2 block_sum2(float a, float b, float2* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
  __syncthreads();  // red is free
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = make_float2(a, b);
  __syncthreads();
  float2 t = make_float2(0.f, 0.f);
  for (int w = 0; w < kAxesThreads / 32; ++w) t.x += red[w].x, t.y += red[w].y;
  return t;
}

__global__ void __launch_bounds__(kAxesThreads) principal_axes_kernel(const PrincipalAxesArgs a) {
  __shared__ float v1[kMaxAxesDim], v2[kMaxAxesDim], w1[kMaxAxesDim], w2[kMaxAxesDim];
  __shared__ float2 red[kAxesThreads / 32];
  const int D = a.dim;
  const float* C = a.cov + static_cast<int64_t>(blockIdx.x) * D * D;
  for (int j = threadIdx.x; j < D; j += kAxesThreads) {  // a start with weight on every axis
    v1[j] = 1.f + 0.001f * j;
    v2[j] = (j & 1) ? 1.f : -1.f;
  }
  __syncthreads();
  // w = C v for both vectors: thread j reads column j (C is symmetric: row i, column j coalesced).
  auto apply = [&]() {
    for (int j = threadIdx.x; j < D; j += kAxesThreads) {
      float s1 = 0.f, s2 = 0.f;
      for (int i = 0; i < D; ++i) {
        const float c = C[static_cast<int64_t>(i) * D + j];
        s1 += c * v1[i];
        s2 += c * v2[i];
      }
      w1[j] = s1;
      w2[j] = s2;
    }
    __syncthreads();
  };
  // v1 = w1 / |w1|, v2 = (w2 - (v1·w2) v1) / |..|
  auto orthonormalise = [&]() {
    float p = 0.f, q = 0.f;
    for (int j = threadIdx.x; j < D; j += kAxesThreads) p += w1[j] * w1[j], q += w1[j] * w2[j];
    const float2 t = block_sum2(p, q, red);
    const float n1 = sqrtf(fmaxf(t.x, 1e-30f)), d = t.y / fmaxf(t.x, 1e-30f);
    float r = 0.f;
    for (int j = threadIdx.x; j < D; j += kAxesThreads) {
      v1[j] = w1[j] / n1;
      const float u = w2[j] - d * w1[j];
      v2[j] = u;
      r += u * u;
    }
    const float n2 = sqrtf(fmaxf(block_sum2(r, 0.f, red).x, 1e-30f));
    for (int j = threadIdx.x; j < D; j += kAxesThreads) v2[j] /= n2;
    __syncthreads();
  };
  for (int it = 0; it < a.iterations; ++it) {
    apply();
    orthonormalise();
  }
  // Rayleigh-Ritz: T = Vᵀ C V (2 x 2), rotate V onto T's eigenvectors, larger eigenvalue first.
  apply();
  float t11 = 0.f, t12 = 0.f, t22 = 0.f;
  {
    float p = 0.f, q = 0.f;
    for (int j = threadIdx.x; j < D; j += kAxesThreads) p += v1[j] * w1[j], q += v1[j] * w2[j];
    const float2 t = block_sum2(p, q, red);
    t11 = t.x;
    t12 = t.y;
    float r = 0.f;
    for (int j = threadIdx.x; j < D; j += kAxesThreads) r += v2[j] * w2[j];
    t22 = block_sum2(r, 0.f, red).x;
  }
  // Eigenvector of [[t11, t12], [t12, t22]] for the larger eigenvalue: angle θ with tan 2θ = 2 t12 / (t11 - t22).
  const float theta = 0.5f * atan2f(2.f * t12, t11 - t22);
  const float c = cosf(theta), s = sinf(theta);
  float m1 = 0.f, m2 = 0.f, a1 = 0.f, a2 = 0.f;
  for (int j = threadIdx.x; j < D; j += kAxesThreads) {
    const float x1 = c * v1[j] + s * v2[j], x2 = -s * v1[j] + c * v2[j];
    w1[j] = x1;
    w2[j] = x2;
  }
  __syncthreads();
  // Sign: the largest-magnitude component positive (found by one thread; D <= 1024).
  if (threadIdx.x == 0) {
    for (int j = 0; j < D; ++j) {
      if (fabsf(w1[j]) > a1) a1 = fabsf(w1[j]), m1 = w1[j];
      if (fabsf(w2[j]) > a2) a2 = fabsf(w2[j]), m2 = w2[j];
    }
    red[0] = make_float2(m1 < 0.f ? -1.f : 1.f, m2 < 0.f ? -1.f : 1.f);
  }
  __syncthreads();
  const float2 sign = red[0];
  float* out = a.axes + static_cast<int64_t>(blockIdx.x) * D * 2;
  for (int j = threadIdx.x; j < D; j += kAxesThreads) {
    out[2 * j] = sign.x * w1[j];
    out[2 * j + 1] = sign.y * w2[j];
  }
}

}  // namespace

cudaError_t attention_stats(const AttentionStatsArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.rows > 65535 || a.n < 1 || a.a_stride < a.n || !a.a || !a.out || a.sink < 0)
    return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  attention_stats_kernel<<<dim3(a.rows, 3), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t key_stats(const KeyStatsArgs& a, cudaStream_t stream) {
  if (a.n_head_kv < 0 || a.n_head_kv > 65535 || a.head_dim < 1 || a.head_dim > 32 * kMaxPerLane || a.n < 0 || !a.out ||
      (a.n > 0 && !a.k) || (a.n_head_kv > 1 && a.k_head_stride < a.n * a.head_dim))
    return cudaErrorInvalidValue;
  cudaError_t err =
      cudaMemsetAsync(a.out, 0, sizeof(float) * 3 * static_cast<size_t>(a.n_head_kv) * a.head_dim, stream);
  if (err != cudaSuccess || a.n == 0 || a.n_head_kv == 0) return err;
  const int64_t blocks = (a.n + kKeyRowsPerBlock - 1) / kKeyRowsPerBlock;
  if (blocks > 2147483647) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks), a.n_head_kv);
  switch (a.dtype) {
    case DType::kBFloat16:
      key_stats_kernel<__nv_bfloat16><<<grid, kKeyWarps * 32, 0, stream>>>(a);
      break;
    case DType::kFloat16:
      key_stats_kernel<__half><<<grid, kKeyWarps * 32, 0, stream>>>(a);
      break;
    case DType::kFloat32:
      key_stats_kernel<float><<<grid, kKeyWarps * 32, 0, stream>>>(a);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t principal_axes(const PrincipalAxesArgs& a, cudaStream_t stream) {
  if (a.heads < 0 || a.heads > 65535 || a.dim < 2 || a.dim > kMaxAxesDim || a.iterations < 0 || !a.cov || !a.axes)
    return cudaErrorInvalidValue;
  if (a.heads == 0) return cudaSuccess;
  principal_axes_kernel<<<a.heads, kAxesThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace kvscope::kernels
