// The exact top-k oracle of a decode step (see exact_topk.h).
//
// scores: a thread per cache row (256 rows per block, one KV head per grid row): the row's D
//         elements in 16-byte loads, G dot products against the group's queries held in shared
//         memory as fp32, written to the workspace as [n_head_kv, G + 1, max_len] (row G: Σ_g).
// select: a 1024-thread block per (KV head, g): g < G selects query head g's top union_k and
//         flags their positions; g = G selects the top-k of Σ_g for the recall of the policy's rows.
#include <cmath>
#include <cstdint>

#include "dtype.cuh"
#include "kvscope/kernels/exact_topk.h"
#include "radix_select.cuh"

namespace kvscope::kernels {
namespace {

constexpr int kScoreThreads = 256;
constexpr int kMaxGroup = 16;
constexpr int kMaxDim = 256;

template <typename T>
__global__ void __launch_bounds__(kScoreThreads) scores_kernel(const ExactTopkArgs a, float* ws) {
  __shared__ float qs[kMaxGroup][kMaxDim];
  const int h = blockIdx.y, G = a.group, D = a.head_dim;
  const T* q = static_cast<const T*>(a.q) + static_cast<int64_t>(h) * G * D;
  for (int i = threadIdx.x; i < G * D; i += kScoreThreads) qs[i / D][i % D] = dtype::to_f<T>(q[i]);
  __syncthreads();
  const int64_t len = a.length[h];
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kScoreThreads + threadIdx.x;
  if (r >= len) return;
  const T* row = static_cast<const T*>(a.k) + (a.offset[h] + r) * D;
  float dot[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) dot[g] = 0.f;
  constexpr int kVec = 16 / sizeof(T);
  for (int c0 = 0; c0 < D; c0 += kVec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c0);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float x = dtype::to_f<T>(e[j]);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) dot[g] += qs[g][c0 + j] * x;
    }
  }
  float* out = ws + static_cast<int64_t>(h) * (G + 1) * a.max_len + r;
  float sum = 0.f;
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g)
    if (g < G) {
      out[g * a.max_len] = dot[g];
      sum += dot[g];
    }
  out[G * a.max_len] = sum;
}

__global__ void __launch_bounds__(radix::kThreads) select_kernel(const ExactTopkArgs a, const float* ws) {
  __shared__ radix::Histograms hist;
  __shared__ unsigned taken, above, ties;
  const int h = blockIdx.y, g = blockIdx.x, G = a.group;
  const int64_t len = a.length[h];
  const float* row = ws + (static_cast<int64_t>(h) * (G + 1) + g) * a.max_len;
  if (threadIdx.x == 0) taken = 0, above = 0, ties = 0;
  if (g < G) {  // the union record of query head g
    if (a.union_k <= 0 || !a.seen) return;
    const int64_t k = len < a.union_k ? len : a.union_k;
    if (k <= 0) return;
    const radix::Selected s = radix::select(row, len, false, static_cast<double>(k), hist, /*with_mass=*/false);
    const unsigned long long room = static_cast<unsigned long long>(k) - s.count_above;
    uint8_t* seen = a.seen + (static_cast<int64_t>(h) * G + g) * a.seen_stride;
    const int64_t* pos = a.pos + a.offset[h];
    for (int64_t r = threadIdx.x; r < len; r += blockDim.x) {
      const float x = row[r];
      const bool take = x > s.value || (x == s.value && atomicAdd(&taken, 1u) < room);
      if (take) {
        int64_t p = pos[r];
        p = p < 0 ? 0 : (p >= a.seen_stride ? a.seen_stride - 1 : p);
        seen[p] = 1;
      }
    }
    return;
  }
  // g == G: the recall of the policy's selection against the top-k of Σ_g q_g · k_r.
  if (!a.sel_count || !a.recall) return;
  uint32_t* exact = a.exact ? a.exact + static_cast<int64_t>(h) * a.exact_words : nullptr;
  if (exact)
    for (int64_t i = threadIdx.x; i < a.exact_words; i += blockDim.x) exact[i] = 0;
  int64_t k = a.sel_count[h];
  k = k > a.sel_stride ? a.sel_stride : k;
  if (k <= 0 || k >= len) {
    if (threadIdx.x == 0) a.recall[h] = NAN;
    return;
  }
  const radix::Selected s = radix::select(row, len, false, static_cast<double>(k), hist, /*with_mass=*/false);
  const unsigned long long room = static_cast<unsigned long long>(k) - s.count_above;
  const int32_t* sel = a.sel_index + static_cast<int64_t>(h) * a.sel_stride;
  unsigned my_above = 0, my_ties = 0;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const int32_t r = sel[i];
    if (r < 0 || r >= len) continue;
    const float x = row[r];
    my_above += x > s.value;
    my_ties += x == s.value;
  }
  if (my_above) atomicAdd(&above, my_above);
  if (my_ties) atomicAdd(&ties, my_ties);
  if (exact) {
    __syncthreads();  // the words are zeroed
    for (int64_t r = threadIdx.x; r < len; r += blockDim.x) {
      const float x = row[r];
      if (x > s.value || (x == s.value && atomicAdd(&taken, 1u) < room)) atomicOr(exact + r / 32, 1u << (r % 32));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long hits = above + (ties < room ? ties : room);
    a.recall[h] = static_cast<float>(static_cast<double>(hits) / static_cast<double>(k));
  }
}

template <typename T>
cudaError_t launch(const ExactTopkArgs& a, float* ws, cudaStream_t stream) {
  const int64_t blocks = (a.max_len + kScoreThreads - 1) / kScoreThreads;
  scores_kernel<T><<<dim3(static_cast<unsigned>(blocks), a.n_head_kv), kScoreThreads, 0, stream>>>(a, ws);
  select_kernel<<<dim3(a.group + 1, a.n_head_kv), radix::kThreads, 0, stream>>>(a, ws);
  return cudaGetLastError();
}

}  // namespace

size_t exact_topk_workspace_bytes(const ExactTopkArgs& a) {
  return sizeof(float) * static_cast<size_t>(a.n_head_kv) * static_cast<size_t>(a.group + 1) *
         static_cast<size_t>(a.max_len > 0 ? a.max_len : 0);
}

cudaError_t exact_topk(const ExactTopkArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n_head_kv < 1 || a.n_head_kv > 65535 || a.group < 1 || a.group > kMaxGroup || a.head_dim < 8 ||
      a.head_dim > kMaxDim || a.head_dim % 8 != 0 || a.max_len < 1 || !a.q || !a.k || !a.offset || !a.length ||
      !workspace || (a.max_len + kScoreThreads - 1) / kScoreThreads > 2147483647 ||
      reinterpret_cast<uintptr_t>(a.k) % 16 != 0 || (a.union_k > 0 && a.seen && (!a.pos || a.seen_stride < 1)) ||
      (a.recall && a.sel_count && (!a.sel_index || a.sel_stride < 1)) ||
      (a.exact && a.exact_words < (a.max_len + 31) / 32))
    return cudaErrorInvalidValue;
  float* ws = static_cast<float*>(workspace);
  switch (a.dtype) {
    case DType::kBFloat16:
      return launch<__nv_bfloat16>(a, ws, stream);
    case DType::kFloat16:
      return launch<__half>(a, ws, stream);
    case DType::kFloat32:
      return launch<float>(a, ws, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvscope::kernels
