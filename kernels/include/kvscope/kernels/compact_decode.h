#pragma once
// Split-K GQA attention for one decode token over a layer whose keys are partly stored compactly
// (key-channel pruning: SPARK, Liao et al. 2025 §4.2-4.3 and App. A.2; ThinK, Xu et al. 2024 §3),
// reading the compact layout directly and recovering the pruned channels on the fly.
// Raw device pointers, no torch headers. All pointers are device pointers.
//
// Layout (matches kvscope::LayerKv with CompactKeys, kvscope/core/compact_keys.h): KV head h has
// length[h] live entries. Entries r < n_compact[h] are compact: bit j of entry r's kept row
// (kept[h] + r * kept_row_bytes; bit j % 8 of byte j / 8) says channel j is stored, its value at
// values[h][r * stride + rank], rank = kept channels below j; a pruned channel recovers as
//   k̃_rj = ±scale[h][r] · inv_a[h][j]   (sign bit p of entry r's row sign[h] + r * sign_bytes set
//                                         = negative, p = pruned channels below j), rounded to dtype
//   k̃_rj = 0                             (sign[h] == 0)
// Entries r >= n_compact[h] are dense keys at row k_offset[h] + r of k. Values are dense at row
// offset[h] + r of v, except, with v_kept set, those of the compact entries: stored the same way
// (v_kept rows, v_values at r * v_stride + rank), their pruned channels read as 0 (SPARK App. D).
//
// Math: o[i] = softmax(scale · K̂_h q_i) V_h with K̂ the recovered keys, fp32 accumulation, online
// softmax; query head i reads KV head i / group. Pass 1: one block (4 warps) per (split, KV head),
// a warp U entries at a time, each lane D/32 channels (j = lane + 32 c); pass 2 merges the splits.
#include <cuda_runtime_api.h>
#include <cstddef>
#include <cstdint>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct CompactDecodeArgs {
  DType dtype = DType::kBFloat16;
  int n_head = 0;           ///< query heads
  int n_head_kv = 0;        ///< KV heads; n_head == n_head_kv * group
  int group = 1;            ///< G, 1..8
  int head_dim = 0;         ///< D: 64, 96, 128 or 256
  const void* q = nullptr;  ///< dtype, head i at q + i * q_stride (elements)
  int64_t q_stride = 0;
  const void* k = nullptr;            ///< dtype [rows, D]: the dense keys
  const int64_t* k_offset = nullptr;  ///< int64 [n_head_kv]: key row of entry r is k_offset[h] + r
  const void* v = nullptr;            ///< dtype [rows, D]
  const int64_t* offset = nullptr;    ///< int64 [n_head_kv]: value row of entry r is offset[h] + r
  const int64_t* length = nullptr;    ///< int64 [n_head_kv]: live entries
  // Per KV head (int64 [n_head_kv] each; the pointers as int64 device addresses):
  const int64_t* n_compact = nullptr;  ///< compact entries (the first ones)
  const int64_t* kept = nullptr;       ///< uint8 rows of ceil(D/8) kept-channel bits
  const int64_t* values = nullptr;     ///< dtype [n_compact * stride]
  const int64_t* sign = nullptr;       ///< uint8 rows of sign_bytes; 0 (or a null array): k̃ = 0
  const int64_t* scale = nullptr;      ///< fp32 [n_compact]
  const int64_t* inv_a = nullptr;      ///< fp32 [D]
  const int64_t* v_kept = nullptr;     ///< null (values dense) or uint8 rows of ceil(D/8) kept value channels
  const int64_t* v_values = nullptr;   ///< dtype [n_compact * v_stride]
  int64_t kept_row_bytes = 0;          ///< D / 8, or 0: one kept row for every entry of a head (ThinK)
  int64_t stride = 0;                  ///< kept channels per entry (the same for every entry and head)
  int64_t sign_bytes = 0;              ///< bytes per sign row
  int64_t v_stride = 0;                ///< kept value channels per entry (with v_kept)
  float softmax_scale = 0.f;           ///< usually 1 / sqrt(D)
  void* o = nullptr;                   ///< dtype [n_head, D], contiguous
  // Optional selection (a decode-time selection stacked over the compact keys, e.g. Quest's pages):
  // head h attends only to entries index[h * index_stride + i], i < min(count[h], index_stride)
  // (each < length[h]), in place of all of them.
  const int32_t* index = nullptr;  ///< int32 [n_head_kv, index_stride], or null: every live entry
  int64_t index_stride = 0;
  const int64_t* count = nullptr;   ///< int64 [n_head_kv] (with index)
  int64_t* compact_read = nullptr;  ///< optional out int64 [n_head_kv]: compact entries head h attended
};

/// How pass 1 is cut: n_split splits of chunk entries per KV head.
struct CompactDecodePlan {
  int n_split = 1;
  int64_t chunk = 0;
  size_t workspace_bytes = 0;  ///< fp32 partials, n_head * n_split * (D + 2), then int32 [n_head_kv, n_split]
};

/// True for the head dimensions the kernel is built for (64, 96, 128, 256).
bool compact_decode_head_dim_supported(int head_dim);
/// Plans a launch for lengths (with an index: counts) up to max_len (a host upper bound; entries
/// past it are dropped).
CompactDecodePlan plan_compact_decode(int n_head, int n_head_kv, int head_dim, int64_t max_len);
/// Runs both passes on `stream`; workspace: plan.workspace_bytes of device memory. Returns
/// cudaErrorInvalidValue on bad arguments (head_dim, group, null pointers), else the launch error.
cudaError_t compact_decode_attention(const CompactDecodeArgs& args, const CompactDecodePlan& plan, void* workspace,
                                     cudaStream_t stream);

}  // namespace kvscope::kernels
