// SnapKV window voting on tensor cores and the pooling / GQA reduction (see snapkv_scores.h).
//
// Every block holds all R = G * w window queries of its KV head in shared memory (rows padded to
// 64, pitch D + 8 elements) and walks its chunk of kChunkCols key columns in tiles of 64 keys:
// a 64 x 64 logit tile is 16 wmma 16x16x16 fragments, two per warp, accumulated in fp32 over D and
// stored to shared memory, where the softmax bookkeeping happens in fp32.
//   vote_stats: per window row, max and Σ exp over the chunk's columns (causal mask inside the
//               window: row i sees keys j <= n - w + i); 4 threads per row, merged by shuffles.
//   vote_merge: merges the chunks' (max, Σ) per row into (max, 1 / Σ).
//   vote_sum:   recomputes the tiles over the columns j < n - w (all_columns: j < n, causal),
//               turns logits into probabilities and sums them over the w rows of each query head (runs of rows of one
//               head are summed in registers, one shared atomic add per run), then divides by w.
#include <mma.h>

#include "dtype.cuh"
#include "kvscope/kernels/snapkv_scores.h"

namespace kvscope::kernels {
namespace {

using namespace nvcuda;

constexpr int kTile = 64;        // keys per tile, and window rows per row tile
constexpr int kThreads = 256;    // 8 warps: 16 fragments of a 64 x 64 tile, two per warp
constexpr int kChunkCols = 512;  // key columns per block (a multiple of kTile)
constexpr int kLdS = kTile + 4;  // fp32 pitch of the logit tile
constexpr int kMaxDim = 256;
constexpr int kMaxGroup = 64;
constexpr size_t kSmemBudget = 200 * 1024;

__host__ __device__ constexpr int pitch(int D) { return D + 8; }  // 16-byte rows, staggered banks

size_t tiles_smem(int rows_pad, int D) {
  return static_cast<size_t>(rows_pad + kTile) * pitch(D) * 2 + static_cast<size_t>(kTile) * kLdS * 4;
}
size_t sum_extra_smem(int rows_pad, int G) {
  return static_cast<size_t>(rows_pad) * 2 * 4 + static_cast<size_t>(G) * kTile * 4;
}

__device__ __forceinline__ void softmax_merge(float& m, float& z, float m2, float z2) {
  const float M = fmaxf(m, m2);
  z = (m == -INFINITY ? 0.f : z * __expf(m - M)) + (m2 == -INFINITY ? 0.f : z2 * __expf(m2 - M));
  m = M;
}

/// All R window rows of KV head h into Qs [rows_pad, pitch] (row r = g * w + i), zero past R.
template <typename T>
__device__ void load_queries(const WindowVoteArgs& a, int h, int rows_pad, T* Qs) {
  const int D = a.head_dim, vecs = D / 8, R = a.group * a.window;
  const T* q = static_cast<const T*>(a.q);
  for (int idx = threadIdx.x; idx < rows_pad * vecs; idx += kThreads) {
    const int r = idx / vecs, c = (idx % vecs) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < R) {
      const int g = r / a.window, i = r % a.window;
      v = *reinterpret_cast<const uint4*>(q + i * a.q_row_stride + static_cast<int64_t>(h * a.group + g) * D + c);
    }
    *reinterpret_cast<uint4*>(Qs + r * pitch(D) + c) = v;
  }
}

/// Keys j0 .. j0 + 63 of head h into Ks [64, pitch], zero at j >= j_end.
template <typename T>
__device__ void load_keys(const WindowVoteArgs& a, int h, int64_t j0, int64_t j_end, T* Ks) {
  const int D = a.head_dim, vecs = D / 8;
  const T* k = static_cast<const T*>(a.k) + h * a.k_head_stride;
  for (int idx = threadIdx.x; idx < kTile * vecs; idx += kThreads) {
    const int r = idx / vecs, c = (idx % vecs) * 8;
    const int64_t j = j0 + r;
    const uint4 v = j < j_end ? *reinterpret_cast<const uint4*>(k + j * D + c) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(Ks + r * pitch(D) + c) = v;
  }
}

/// S[64, kLdS] = Q rows [64, D] (row-major, pitch) · Kᵀ (K tile [64, D] read as column-major B).
template <typename T>
__device__ void logit_tile(const T* Qrows, const T* Ks, int D, float* S) {
  const int warp = threadIdx.x >> 5, ld = pitch(D);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.f);
  wmma::fill_fragment(acc[1], 0.f);
  for (int k0 = 0; k0 < D; k0 += 16) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int f = warp + 8 * t, rb = f >> 2, cb = f & 3;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, Qrows + rb * 16 * ld + k0, ld);
      wmma::load_matrix_sync(fb, Ks + cb * 16 * ld + k0, ld);
      wmma::mma_sync(acc[t], fa, fb, acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int f = warp + 8 * t, rb = f >> 2, cb = f & 3;
    wmma::store_matrix_sync(S + rb * 16 * kLdS + cb * 16, acc[t], kLdS, wmma::mem_row_major);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    vote_stats_kernel(const WindowVoteArgs a, int rows_pad, int n_chunks, float* pm, float* pz) {
  extern __shared__ uint4 smem[];
  const int D = a.head_dim, h = blockIdx.x, chunk = blockIdx.y, R = a.group * a.window;
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + rows_pad * pitch(D);
  float* S = reinterpret_cast<float*>(Ks + kTile * pitch(D));
  const int64_t c0 = static_cast<int64_t>(chunk) * kChunkCols, c1 = min(a.n, c0 + kChunkCols);
  load_queries(a, h, rows_pad, Qs);
  const int row = threadIdx.x >> 2, quarter = threadIdx.x & 3;
  for (int rt = 0; rt < rows_pad; rt += kTile) {
    const int r = rt + row;
    const int64_t pos = a.n - a.window + (r < R ? r % a.window : 0);  // key position of window row r
    float m = -INFINITY, z = 0.f;
    for (int64_t kt = c0; kt < c1; kt += kTile) {
      __syncthreads();  // the previous tile's K and S are no longer read
      load_keys(a, h, kt, c1, Ks);
      __syncthreads();
      logit_tile(Qs + rt * pitch(D), Ks, D, S);
      __syncthreads();
      if (r < R) {
#pragma unroll 4
        for (int cc = 0; cc < 16; ++cc) {
          const int col = quarter * 16 + cc;
          const int64_t j = kt + col;
          if (j < c1 && j <= pos) softmax_merge(m, z, S[row * kLdS + col] * a.scale, 1.f);
        }
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1)
      softmax_merge(m, z, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, z, off));
    if (quarter == 0 && r < R) {
      const int64_t o = (static_cast<int64_t>(h) * n_chunks + chunk) * R + r;
      pm[o] = m;
      pz[o] = z;
    }
  }
}

__global__ void vote_merge_kernel(int R, int n_chunks, const float* pm, const float* pz, float* stat_m,
                                  float* stat_inv) {
  const int h = blockIdx.x;
  for (int r = threadIdx.x; r < R; r += blockDim.x) {
    float m = -INFINITY, z = 0.f;
    for (int c = 0; c < n_chunks; ++c) {
      const int64_t o = (static_cast<int64_t>(h) * n_chunks + c) * R + r;
      softmax_merge(m, z, pm[o], pz[o]);
    }
    stat_m[h * R + r] = m;
    stat_inv[h * R + r] = z > 0.f ? 1.f / z : 0.f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    vote_sum_kernel(const WindowVoteArgs a, int rows_pad, const float* stat_m, const float* stat_inv) {
  extern __shared__ uint4 smem[];
  const int D = a.head_dim, h = blockIdx.x, G = a.group, w = a.window, R = G * w;
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + rows_pad * pitch(D);
  float* S = reinterpret_cast<float*>(Ks + kTile * pitch(D));
  float* sm_m = S + kTile * kLdS;
  float* sm_inv = sm_m + rows_pad;
  float* colsum = sm_inv + rows_pad;  // [G][64]
  const int64_t len = a.all_columns ? a.n : a.n - w;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kChunkCols, c1 = min(len, c0 + kChunkCols);
  load_queries(a, h, rows_pad, Qs);
  for (int r = threadIdx.x; r < rows_pad; r += kThreads) {
    sm_m[r] = r < R ? stat_m[h * R + r] : 0.f;
    sm_inv[r] = r < R ? stat_inv[h * R + r] : 0.f;  // padded rows add exp(0) * 0
  }
  const int col = threadIdx.x & (kTile - 1), part = threadIdx.x >> 6;  // 4 parts of 16 rows
  const float inv_w = 1.f / static_cast<float>(w);
  for (int64_t kt = c0; kt < c1; kt += kTile) {
    __syncthreads();  // the previous tile's K, S and column sums are done with
    load_keys(a, h, kt, c1, Ks);
    for (int i = threadIdx.x; i < G * kTile; i += kThreads) colsum[i] = 0.f;
    __syncthreads();
    for (int rt = 0; rt < rows_pad && rt < R; rt += kTile) {
      logit_tile(Qs + rt * pitch(D), Ks, D, S);
      __syncthreads();
      const int r0 = rt + part * 16, r1 = min(r0 + 16, R);
      // Columns inside the window (all_columns): row r sees key j only when j <= n - w + r % w.
      const int64_t past_first = kt + col - (a.n - w);  // >= 0 for a window column
      if (r0 < r1) {
        int g = r0 / w;
        int g_end = (g + 1) * w;  // first row of the next query head
        float acc = 0.f;
        for (int r = r0; r < r1; ++r) {
          if (r >= g_end) {
            atomicAdd(&colsum[g * kTile + col], acc);
            acc = 0.f;
            g = r / w;
            g_end = (g + 1) * w;
          }
          if (past_first < 0 || past_first <= r % w)
            acc += __expf(S[(r - rt) * kLdS + col] * a.scale - sm_m[r]) * sm_inv[r];
        }
        atomicAdd(&colsum[g * kTile + col], acc);
      }
      __syncthreads();  // S is rewritten by the next row tile
    }
    for (int i = threadIdx.x; i < G * kTile; i += kThreads) {
      const int g = i / kTile, c = i % kTile;
      if (kt + c < c1) a.out[(static_cast<int64_t>(h) * G + g) * len + kt + c] = colsum[i] * inv_w;
    }
  }
}

__global__ void pool_groups_kernel(const PoolGroupsArgs a) {
  const int h = blockIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= a.len) return;
  const int half = a.kernel / 2;
  float out = 0.f;
  for (int g = 0; g < a.group; ++g) {
    const float* row = a.in + (static_cast<int64_t>(h) * a.group + g) * a.len;
    float v = a.max_pool ? -INFINITY : 0.f;
    for (int d = -half; d <= half; ++d) {
      const int64_t t = j + d;
      if (t < 0 || t >= a.len) continue;
      v = a.max_pool ? fmaxf(v, row[t]) : v + row[t];
    }
    if (!a.max_pool) v /= static_cast<float>(a.kernel);
    if (g == 0)
      out = v;
    else if (a.reduce == GroupReduce::kMax)
      out = fmaxf(out, v);
    else
      out += v;
  }
  if (a.reduce == GroupReduce::kMean) out /= static_cast<float>(a.group);
  a.out[h * a.out_stride + j] = out;
}

template <typename T>
cudaError_t launch_vote(const WindowVoteArgs& a, int rows_pad, float* ws, cudaStream_t stream) {
  const int R = a.group * a.window;
  const int n_chunks = static_cast<int>((a.n + kChunkCols - 1) / kChunkCols);
  const int64_t len = a.all_columns ? a.n : a.n - a.window;
  const int sum_chunks = static_cast<int>((len + kChunkCols - 1) / kChunkCols);
  float* pm = ws;
  float* pz = pm + static_cast<size_t>(a.n_head_kv) * n_chunks * R;
  float* stat_m = pz + static_cast<size_t>(a.n_head_kv) * n_chunks * R;
  float* stat_inv = stat_m + static_cast<size_t>(a.n_head_kv) * R;
  const size_t s1 = tiles_smem(rows_pad, a.head_dim), s3 = s1 + sum_extra_smem(rows_pad, a.group);
  cudaError_t err =
      cudaFuncSetAttribute(vote_stats_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(s1));
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(vote_sum_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(s3));
  if (err != cudaSuccess) return err;
  vote_stats_kernel<T><<<dim3(a.n_head_kv, n_chunks), kThreads, s1, stream>>>(a, rows_pad, n_chunks, pm, pz);
  vote_merge_kernel<<<a.n_head_kv, 256, 0, stream>>>(R, n_chunks, pm, pz, stat_m, stat_inv);
  vote_sum_kernel<T><<<dim3(a.n_head_kv, sum_chunks), kThreads, s3, stream>>>(a, rows_pad, stat_m, stat_inv);
  return cudaGetLastError();
}

int rows_padded(const WindowVoteArgs& a) { return (a.group * a.window + kTile - 1) / kTile * kTile; }

}  // namespace

int window_vote_max_rows(int head_dim) {
  if (head_dim <= 0 || head_dim > kMaxDim) return 0;
  const size_t fixed = tiles_smem(0, head_dim) + sum_extra_smem(0, kMaxGroup);
  const size_t per_row = static_cast<size_t>(pitch(head_dim)) * 2 + 2 * 4;
  return static_cast<int>((kSmemBudget - fixed) / per_row) / kTile * kTile;
}

size_t window_vote_workspace_bytes(const WindowVoteArgs& a) {
  const size_t R = static_cast<size_t>(a.group) * static_cast<size_t>(a.window);
  const size_t n_chunks = static_cast<size_t>((a.n + kChunkCols - 1) / kChunkCols);
  return (2 * n_chunks + 2) * static_cast<size_t>(a.n_head_kv) * R * sizeof(float);
}

cudaError_t window_vote(const WindowVoteArgs& a, void* workspace, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.n_head_kv > 65535 || a.group < 1 || a.group > kMaxGroup || a.head_dim <= 0 ||
      a.head_dim % 16 != 0 || a.head_dim > kMaxDim || a.window < 1 || a.n <= a.window || !a.q || !a.k || !a.out ||
      !workspace || static_cast<int64_t>(a.group) * a.window > window_vote_max_rows(a.head_dim) ||
      a.q_row_stride % 8 != 0 || a.k_head_stride % 8 != 0 || (a.n + kChunkCols - 1) / kChunkCols > 65535 ||
      reinterpret_cast<uintptr_t>(a.q) % 16 != 0 || reinterpret_cast<uintptr_t>(a.k) % 16 != 0)
    return cudaErrorInvalidValue;
  float* ws = static_cast<float*>(workspace);
  switch (a.dtype) {
    case DType::kBFloat16:
      return launch_vote<__nv_bfloat16>(a, rows_padded(a), ws, stream);
    case DType::kFloat16:
      return launch_vote<__half>(a, rows_padded(a), ws, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t pool_groups(const PoolGroupsArgs& a, cudaStream_t stream) {
  if (a.n_head_kv <= 0 || a.n_head_kv > 65535 || a.group < 1 || a.len < 0 || a.kernel < 1 || a.kernel % 2 == 0 ||
      !a.in || !a.out || a.out_stride < a.len)
    return cudaErrorInvalidValue;
  if (a.len == 0) return cudaSuccess;
  const int threads = 256;
  const dim3 grid(static_cast<unsigned>((a.len + threads - 1) / threads), a.n_head_kv);
  pool_groups_kernel<<<grid, threads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace kvscope::kernels
