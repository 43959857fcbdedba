#pragma once
// The exact top-k oracle of a decode step, per layer, on the GPU (RocketKV §3 / Fig. 2: what an
// exact top-k attention would read; docs/methods.md "Exact-TopK"). A K-only pass: the logits
// q_g · k_r of every live cache row r of each KV head h (no softmax, no values, no scale: ranks
// only), then radix selects (radix_select.cuh) for
//   * the union record: per query head g, the top `union_k` rows by q_g · k_r; their token
//     positions are flagged in seen[h * G + g, pos[r]] (RocketKV Fig. 2's distinct-token count);
//   * the recall of a selection policy's rows (HSA, Quest): with s_r = Σ_g q_g · k_r and k = the
//     rows the policy selected for head h, recall = |selected ∩ top-k(s)| / k; NaN when nothing
//     was selected or k >= the live rows (a dense step). Ties at the threshold count as hits up to
//     k (the best case of an arbitrary tie order);
//   * optionally the exact set itself as a bitmask over rows (for the timeline's pinned heads).
// Two launches, no host reads: graph-capturable (lengths come from the device).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct ExactTopkArgs {
  DType dtype = DType::kBFloat16;  ///< of q and k
  int n_head_kv = 0;
  int group = 1;                    ///< G query heads per KV head (<= 16)
  int head_dim = 0;                 ///< D <= 256
  int64_t max_len = 0;              ///< host bound of every length[h] (e.g. the capacity per head)
  const void* q = nullptr;          ///< [n_head_kv * G, D] post-RoPE queries, rows of D contiguous
  const void* k = nullptr;          ///< cache keys, head h's row r at k + (offset[h] + r) * D
  const int64_t* offset = nullptr;  ///< device [n_head_kv]
  const int64_t* length = nullptr;  ///< device [n_head_kv]: live rows
  /// Union record (optional): `union_k` > 0, pos device int64 [rows] (true positions), seen device
  /// uint8 [n_head_kv * G, seen_stride] (positions >= seen_stride land on the last column).
  int union_k = 0;
  const int64_t* pos = nullptr;
  uint8_t* seen = nullptr;
  int64_t seen_stride = 0;
  /// Recall (optional): the policy's rows of head h at sel_index[h * sel_stride + i], i <
  /// sel_count[h] (int32 rows within the head; int64 count), and recall device fp32 [n_head_kv].
  const int32_t* sel_index = nullptr;
  const int64_t* sel_count = nullptr;
  int64_t sel_stride = 0;
  float* recall = nullptr;
  /// The exact set (optional, with recall): bits over rows, head h's row r at bit r % 32 of
  /// exact[h * exact_words + r / 32]; exact_words >= ceil(max_len / 32). Zeroed here first.
  uint32_t* exact = nullptr;
  int64_t exact_words = 0;
};

/// fp32 scratch exact_topk needs: n_head_kv * (G + 1) * max_len floats.
size_t exact_topk_workspace_bytes(const ExactTopkArgs& a);

/// Two launches (scores, selects) on `stream`. Returns cudaErrorInvalidValue on bad arguments.
cudaError_t exact_topk(const ExactTopkArgs& a, void* workspace, cudaStream_t stream);

}  // namespace kvscope::kernels
