#pragma once
// Prefill-side key scorers of two policies, fused: KeyDiff's anchor cosine score and SPARK's
// per-entry channel saliency, top-T mask and key-sign recovery. Raw device pointers, no torch
// headers. All pointers are device pointers; element strides are in elements of the storage dtype.
//
// Shapes use Hkv (KV heads), n (entries of a head), D (head_dim, 1..256). Keys are read in their
// storage dtype (fp32 / bf16 / fp16); every sum is accumulated in fp32.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

/// KeyDiff (Park et al. 2025, arXiv 2504.15364, Eq. 8; docs/methods.md §2.2): per KV head h
///   μ_h        = mean_j k_{h,j} / max(||k_{h,j}||, 1e-12)   (normalized_anchor, kvpress's F.normalize)
///              = mean_j k_{h,j}                              (raw anchor, the paper's unnormalised keys)
///   score[h,j] = -cos(k_{h,j}, μ_h),  cos(x, y) = x·y / (max(||x||, 1e-8) · max(||y||, 1e-8))
/// (torch.nn.functional.cosine_similarity with eps 1e-8, LibTorch >= 1.13 semantics).
struct KeyDiffArgs {
  DType dtype = DType::kBFloat16;
  int n_head_kv = 0;  ///< Hkv >= 0
  int64_t n_tok = 0;  ///< n >= 0 (entries per head; 0: nothing to do)
  int head_dim = 0;   ///< D, 1..256
  /// dtype [Hkv, n, D]: element (h, j, c) at keys[h * head_stride + j * row_stride + c] (unit inner
  /// stride). Vector loads when D % (elements per lane) == 0 and pointer and strides are aligned.
  const void* keys = nullptr;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  bool normalized_anchor = true;
  float* scores = nullptr;  ///< out fp32 [Hkv, n], contiguous
};

/// Bytes of fp32 scratch keydiff_scores needs (per-block partial sums, the anchors and their norms);
/// 0 when there is nothing to score. Depends on Hkv, n and D only.
size_t keydiff_workspace_bytes(const KeyDiffArgs& a);

/// Three launches on `stream`: (1) blocks of (head, chunk of rows), one warp per row, write per-block
/// fp32 sums of the (normalised) keys; (2) one block per head reduces them in a fixed order into μ_h
/// and ||μ_h|| (deterministic: no atomics); (3) one warp per row computes the cosine with μ_h. K is
/// read twice. workspace: keydiff_workspace_bytes(a) bytes of device memory, 16-byte aligned.
/// Returns cudaErrorInvalidValue on bad arguments (D outside 1..256, negative sizes, null pointers),
/// else the launch error.
cudaError_t keydiff_scores(const KeyDiffArgs& a, void* workspace, cudaStream_t stream);

/// SPARK fixed-mode channel pruning of one KV head (Liao et al. 2025, §4.2-4.3, eq. 7 and App. A.2
/// eq. 11; docs/methods.md §4), per entry t of the head's retained keys k [n, D]:
///   w[t,j]        = a_j · |k_tj|                                   saliency, fp32 (eq. 7)
///   mask[t,j]     = j among the `kept` largest w[t,:]             ties at the threshold: lower channel first
///   pruned_sum[t] = Σ_{j pruned} w[t,j]                           = (D - kept) · μ[t]
///   masked_k[t,j] = k_tj                                           (kept channels)
///                 = ±0 (k_tj · 0)                                  (pruned, no refill)
///                 = (sign(k_tj) · μ[t] · inv_a_j).to(dtype)       (pruned, key_sign_refill)
/// with μ[t] = pruned_sum[t] / max(D - kept, 1) and inv_a_j = a_j > 0 ? 1 / a_j : 0, each step
/// IEEE-rounded in fp32 and the refill rounded once to the storage dtype: the arithmetic of
/// spark.cpp's LibTorch path (k ⊙ m in dtype, plus refill.to(dtype), in dtype). Only pruned_sum's
/// summation order differs from LibTorch. Denormal fp32 saliencies / refills may flush to zero
/// (the kernels build with --use_fast_math).
struct SparkPruneArgs {
  DType dtype = DType::kBFloat16;
  int64_t n_tok = 0;        ///< n >= 0 (0: nothing to do)
  int head_dim = 0;         ///< D, 1..256
  int kept = 0;             ///< T: channels kept per entry, clamped to [0, D]
  const void* k = nullptr;  ///< dtype [n, D], entry t at k + t * k_stride, unit inner stride
  int64_t k_stride = 0;
  const float* a = nullptr;      ///< fp32 [D]: the group-aggregated query magnitude (>= 0)
  bool key_sign_refill = false;  ///< recovery=degenerate with sign=key
  bool* mask = nullptr;          ///< out bool [n, D], contiguous
  void* masked_k = nullptr;      ///< out dtype [n, D], contiguous
  float* pruned_sum = nullptr;   ///< out fp32 [n]
};

/// One warp per entry: the T-th largest saliency is found by a 31-step bitwise search over the
/// float bits of w (non-negative, so their order is the bits' order; NaN ranks above +inf, as
/// at::topk does), then ties at the threshold are filled in channel order. One launch on `stream`.
/// Returns cudaErrorInvalidValue on bad arguments, else the launch error.
cudaError_t spark_prune_fixed(const SparkPruneArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels
