#pragma once
// Page-summary kernels for query-aware sparse decode (RocketKV's HSA, Quest): keep the per-page
// key min/max of a ragged per-KV-head cache up to date, score pages against the decode query and
// select the rows to attend. The rows then go to the gather variant of decode_attention (decode.h),
// whose per-head count is the `count` written here. Raw device pointers, no torch headers.
//
// Layout: K is the flat row-major [rows, head_dim] cache (kvscope::LayerKv::k); KV head h owns rows
// offset[h] .. offset[h] + length[h] - 1 in storage order. Page P of head h covers its entries
// P*page .. min((P+1)*page, length[h]) - 1 (the last page may be partial). Summaries: kmin / kmax
// dtype [n_head_kv, page_capacity, head_dim]: element-wise min / max of the keys of each page.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

/// How pages are scored and how many rows are kept.
enum class PageScore : int {
  /// RocketKV HSA (Behnam et al. 2025 §3.4 Alg. 1): i1 = top-k1 channels of Σ_g|q_g|; per channel
  /// the group sign picks Kmax or Kmin; ŝ_{g,P} = q_g[i1]·K̂_P[i1]; token weights π_{g,i} =
  /// softmax_i(ŝ_{g,page(i)} / sqrt(D·Σ|q_g[i1]|/Σ|q_g|)) (SparQ temperature); keep the top-`keep`
  /// tokens of Σ_g π_{g,i} (ties: lower storage index first, so whole pages in page order and the
  /// first entries of the last page taken). A head with length <= keep attends densely.
  kHsa = 0,
  /// Quest (Tang et al. 2024 §3.2-3.3, group-accumulated as in RocketKV App. A.3): U_P = Σ_g Σ_j
  /// max(q_{g,j}·Kmax_{P,j}, q_{g,j}·Kmin_{P,j}); keep all rows of the top-`keep` pages (ties: lower
  /// page first). A head with ceil(length / page) <= keep attends densely.
  kQuest = 1,
};

struct PageSelectArgs {
  DType dtype = DType::kBFloat16;
  PageScore mode = PageScore::kHsa;
  int n_head_kv = 0;
  int group = 1;     ///< G query heads per KV head, 1..16
  int head_dim = 0;  ///< D <= 256
  int page = 1;
  int k1 = 0;               ///< HSA: channels of the approximation, 1..D (ignored by Quest)
  int64_t keep = 0;         ///< HSA: tokens (k2); Quest: pages
  const void* q = nullptr;  ///< dtype [n_head, D], head i at q + i * q_stride
  int64_t q_stride = 0;
  void* kmin = nullptr;  ///< dtype [n_head_kv, page_capacity, D] (written only by the fused upkeep)
  void* kmax = nullptr;
  int64_t page_capacity = 0;
  const int64_t* length = nullptr;  ///< int64 [n_head_kv]
  int64_t max_pages = 0;            ///< host upper bound of ceil(length[h] / page)
  /// Optional page upkeep (the decode-append case): with k and offset set, the summaries of the page
  /// holding entry length[h] - 1 of every head are first recomputed from K (dtype [rows, D], head h
  /// at rows offset[h] ..), exactly (min / max of the dtype values), and written to kmin / kmax.
  const void* k = nullptr;
  const int64_t* offset = nullptr;  ///< int64 [n_head_kv]
  /// Optional, with k: a layer whose first entries hold compact keys (channel pruning stacked under
  /// the selection, kvscope::LayerKv::compact). k_first: int64 [n_head_kv], the first entry of head
  /// h whose key is row offset[h] + r of k (entries below it have no row of k); the upkeep reads
  /// rows from max(page start, k_first[h]) and takes the min / max of the page's compact entries
  /// from edge_min / edge_max (dtype [n_head_kv, D]: those of the entries from the start of the
  /// page holding k_first[h] up to k_first[h] - 1). Needs length[h] > k_first[h] (a decode entry).
  const int64_t* k_first = nullptr;
  const void* edge_min = nullptr;
  const void* edge_max = nullptr;
  int32_t* index = nullptr;  ///< out int32 [n_head_kv, index_stride]: selected entries, ascending
  int64_t index_stride = 0;  ///< >= rows any head can emit (HSA: keep; Quest: keep * page)
  int64_t* count = nullptr;  ///< out int64 [n_head_kv]: rows written per head
};

/// fp32 scratch the selection needs (scores of every page of every head and group member).
size_t page_select_workspace_bytes(const PageSelectArgs& a);

/// Scores pages and writes index/count on `stream`: one launch of a thread-block cluster of 8 blocks
/// per KV head (sm_90; 4 or 2 where n_head_kv x 8 blocks would not fit the SMs in one wave).
/// workspace: page_select_workspace_bytes bytes of device memory (read only when a block's share of
/// a head's scores exceeds its shared-memory staging). Returns cudaErrorInvalidValue on bad
/// arguments, else the launch error.
cudaError_t page_select(const PageSelectArgs& a, void* workspace, cudaStream_t stream);

}  // namespace kvscope::kernels
