#pragma once
// SnapKV observation-window scoring on tensor cores (Li et al. 2024, arXiv 2404.14469, §4.1 voting
// and §4.2 pooling, in kvpress's form; core/src/policies/snapkv.cpp has the formula). Raw device
// pointers, no torch headers.
//
//   A[h,g,i,j] = softmax_j( q_{g,i} · k_{h,j} · scale ),  j <= n - w + i (causal inside the window)
//   s[h,g,j]   = (1/w) Σ_i A[h,g,i,j]                       for j < n - w          (window_vote)
//   score[h,j] = reduce_g pool_j(s[h,g,:])                   for j < n - w          (pool_groups)
//
// window_vote never materialises A: pass 1 computes Q·Kᵀ tiles (bf16/fp16 wmma, fp32 accumulate)
// for the softmax row statistics (max, Σ exp) per column chunk, a small kernel merges the chunks,
// and pass 2 recomputes the tiles and sums the normalised probabilities of each column over the
// window rows of every query head. Memory: K is read twice; the fp32 work space is
// window_vote_workspace_bytes. Only the columns j < n - w are scored (the window is always kept).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct WindowVoteArgs {
  DType dtype = DType::kBFloat16;  ///< bf16 or fp16 (tensor cores); fp32 is refused
  int n_head_kv = 0;
  int group = 1;      ///< G query heads per KV head
  int head_dim = 0;   ///< D: a multiple of 16, <= 256
  int64_t n = 0;      ///< keys per KV head
  int window = 0;     ///< w: the last w queries (key positions n - w .. n - 1), 1 <= w < n
  float scale = 0.f;  ///< logit scale (1 / sqrt(D) for SnapKV / kvpress)
  /// Window queries: dtype, query head H = h * G + g, window row i at q + i * q_row_stride + H * D
  /// (rows of D contiguous).
  const void* q = nullptr;
  int64_t q_row_stride = 0;
  /// Keys: dtype, KV head h, entry j at k + h * k_head_stride + j * D (rows of D contiguous).
  const void* k = nullptr;
  int64_t k_head_stride = 0;
  /// Also vote on the window's own columns j = n - w .. n - 1 (row i counts only j <= n - w + i):
  /// out is then [n_head_kv, G, n] and each (h, g) row sums to 1 (capture's window attention).
  bool all_columns = false;
  float* out = nullptr;  ///< fp32 [n_head_kv, G, n - w] (all_columns: [n_head_kv, G, n]): s[h,g,j]
};

/// Largest G * w the kernels hold in shared memory for head_dim D (all window queries of a KV group
/// stay resident); callers fall back to another path beyond it.
int window_vote_max_rows(int head_dim);

/// fp32 scratch window_vote needs.
size_t window_vote_workspace_bytes(const WindowVoteArgs& a);

/// s[h,g,j] as above, three launches on `stream`. Returns cudaErrorInvalidValue on bad arguments
/// (fp32, D not a multiple of 16 or > 256, G * w > window_vote_max_rows(D), w >= n, null pointers).
cudaError_t window_vote(const WindowVoteArgs& a, void* workspace, cudaStream_t stream);

/// How the G query heads of a KV group are combined (SnapKV issue #22, Ada-KV §3.5).
enum class GroupReduce : int { kMean = 0, kSum = 1, kMax = 2 };

struct PoolGroupsArgs {
  int n_head_kv = 0;
  int group = 1;
  int64_t len = 0;        ///< columns per (h, g) row of `in` (n - w)
  int kernel = 1;         ///< odd pooling width, stride 1, padding kernel / 2
  bool max_pool = false;  ///< false: average with the zero padding counted (avg_pool1d's
                          ///< count_include_pad); true: max over the in-range positions
  GroupReduce reduce = GroupReduce::kMean;
  const float* in = nullptr;  ///< fp32 [n_head_kv, G, len]
  float* out = nullptr;       ///< fp32, row h at out + h * out_stride, len values
  int64_t out_stride = 0;
};

/// score[h,j] = reduce_g pool(in[h,g,:])[j] (SnapKV §4.2 pooling, then the GQA reduction).
cudaError_t pool_groups(const PoolGroupsArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels
