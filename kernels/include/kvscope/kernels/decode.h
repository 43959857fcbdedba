#pragma once
// Split-K ("flash-decoding") GQA attention for one decode token over a ragged per-KV-head cache.
// Raw device pointers, no torch headers. All pointers are device pointers unless noted.
//
// Layout (matches kvscope::LayerKv): K and V are flat row-major [rows, head_dim] buffers; KV head h
// owns rows offset[h] .. offset[h] + length[h] - 1 (dense variant) or, in the gather variant, the
// rows offset[h] + index[h * index_stride + j] for j < length[h]. Query head i reads KV head i / G.
//
// Math: o[i] = softmax(cap(scale * K_h q_i)) V_h, cap(x) = softcap * tanh(x / softcap) (Gemma 2's
// attn_logit_softcapping; identity when softcap is 0), with fp32 accumulation and an online softmax, in two
// passes: pass 1 runs one block per (KV head, split of its tokens, group of <= 8 query heads),
// streams K/V once with 16-byte cp.async loads through a per-thread shared-memory ring, and writes
// unnormalised fp32 partials to a workspace; pass 2 (a programmatic dependent launch) combines the
// splits; it is skipped when there is a single split. A head with length 0 gets o = 0.
// Requires sm_90 (cp.async, griddepcontrol); K/V reads are not bounds-checked against capacity.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct DecodeAttentionArgs {
  DType dtype = DType::kBFloat16;
  int n_head = 0;                   ///< query heads
  int n_head_kv = 0;                ///< KV heads; n_head == n_head_kv * group
  int group = 1;                    ///< G: query heads per KV head (any G >= 1)
  int head_dim = 0;                 ///< D: 64, 96, 128 or 256 (decode_attention_head_dim_supported)
  const void* q = nullptr;          ///< dtype, head i at q + i * q_stride (elements); rows 16-byte aligned
  int64_t q_stride = 0;             ///< elements between query heads (usually head_dim)
  const void* k = nullptr;          ///< dtype [rows, head_dim], contiguous, 16-byte aligned
  const void* v = nullptr;          ///< dtype [rows, head_dim], contiguous, 16-byte aligned
  const int64_t* offset = nullptr;  ///< int64 [n_head_kv]: first row of each KV head
  const int64_t* length = nullptr;  ///< int64 [n_head_kv]: live rows (dense) or index count (gather)
  /// Gather variant (sparse decode: RocketKV/Quest/top-k): int32 [n_head_kv, index_stride]; head h
  /// attends to rows offset[h] + index[h * index_stride + j], j < length[h]. nullptr: dense.
  /// Indices must lie in [0, capacity of head h); they need not be sorted or unique.
  const int32_t* index = nullptr;
  int64_t index_stride = 0;
  float scale = 0.f;    ///< softmax scale, usually 1/sqrt(D) (Gemma: query_pre_attn_scalar^-1/2)
  float softcap = 0.f;  ///< logit soft-capping (Gemma 2: 50); 0 = none
  void* o = nullptr;    ///< dtype [n_head, head_dim], contiguous; may not alias q
};

/// The head dimensions the kernels are built for: 64, 96 (Phi-3), 128, 256 (Gemma 2/3).
bool decode_attention_head_dim_supported(int head_dim);

/// How pass 1 is cut. Computed on the host from the longest and the total length.
struct DecodeAttentionPlan {
  int n_split = 1;             ///< splits of the longest head (partials per query head)
  int n_items = 1;             ///< pass-1 work items (grid.x): head h takes max(1, ceil(len_h / chunk))
  int64_t chunk = 0;           ///< tokens per split
  int head_chunk = 1;          ///< query heads served together per block (1, 2, 4 or 8)
  size_t workspace_bytes = 0;  ///< fp32 partials; 0 when n_split == 1
};

/// Plans a launch on the current device. max_len: the longest length[h]; total_len: the sum of
/// length[h] (0: max_len * n_head_kv); both host values, upper bounds are fine, smaller values are
/// not (tokens past the plan are dropped). n_split_override > 0 forces the split count of the
/// longest head (tests, tuning); 0 sizes the chunk so the work items of all heads fill one wave
/// (resident blocks per SM x SMs, read off the device and cached), so ragged heads (Ada-KV
/// budgets) get blocks in proportion to their length; at least 128 tokens per item.
DecodeAttentionPlan plan_decode_attention(DType dtype, int n_head, int n_head_kv, int head_dim, int64_t max_len,
                                          int64_t total_len = 0, int n_split_override = 0);

/// Runs both passes on `stream`. workspace: device memory of plan.workspace_bytes (may be null when
/// that is 0), 16-byte aligned. The plan must come from plan_decode_attention with the same heads,
/// head_dim and a max_len >= every length[h]. Returns cudaErrorInvalidValue on bad arguments
/// (unsupported head_dim, G mismatch, misaligned pointers), else the launch error.
cudaError_t decode_attention(const DecodeAttentionArgs& args, const DecodeAttentionPlan& plan, void* workspace,
                             cudaStream_t stream);

}  // namespace kvscope::kernels
