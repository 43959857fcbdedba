#pragma once
// LibTorch adapters over the prefill-side key scorers (kernels/key_scores.h): KeyDiff's anchor
// cosine score and SPARK's fixed-mode channel pruning, plus their fp32 LibTorch references
// (namespace ref, device-agnostic, always compiled). Internal to kvscope_core (and its tests).
//
// The kernel adapters exist only in builds with KVSCOPE_HAVE_CUDA_KERNELS; elsewhere they throw
// std::runtime_error. Contract: tensors on one CUDA device, keys fp32 / bf16 / fp16; kernels run
// on at::cuda::getCurrentCUDAStream(). Errors: std::invalid_argument for bad shapes, dtypes or
// devices; std::runtime_error for a failed launch (with the CUDA error string).
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace kvscope::ops {

/// KeyDiff scores (Park et al. 2025, arXiv 2504.15364, Eq. 8; docs/methods.md §2.2):
///   μ_h = mean_j k_{h,j} / max(||k_{h,j}||, 1e-12) (normalized_anchor) or mean_j k_{h,j} (raw),
///   score[h,j] = -cos(k_{h,j}, μ_h), cos(x, y) = x·y / (max(||x||, 1e-8) · max(||y||, 1e-8)).
/// keys: [Hkv, n, D] on CUDA, fp32 / bf16 / fp16, unit inner stride, any head and row stride (e.g.
/// KvCache::keys(layer)); D in 1..256; n >= 0. Returns fp32 [Hkv, n] (contiguous) on keys' device.
/// fp32 accumulation; deterministic (no atomics).
at::Tensor keydiff_scores(const at::Tensor& keys, bool normalized_anchor);

/// SPARK fixed-mode pruning of one KV head's retained keys (kernels/key_scores.h gives the formulas).
struct SparkPruned {
  at::Tensor mask;        ///< bool [n, D]: true = channel kept
  at::Tensor masked_k;    ///< [n, D] in k's dtype (fp32 for the references): k̂ = k ⊙ mask (+ refill)
  at::Tensor pruned_sum;  ///< fp32 [n]: Σ_{j pruned} a_j |k_tj|  (= (D - kept) · μ_pruned[t])
};

/// SPARK (Liao et al. 2025, §4.2-4.3 eq. 7, App. A.2 eq. 11), mode=fixed, on CUDA: per entry the
/// `kept` channels of largest a_j·|k_tj| (ties at the threshold: lower channel first), the pruned
/// saliency sum and k̂ (key_sign_refill: recovery=degenerate with sign=key, pruned channels refilled
/// with sign(k_tj)·μ[t]/a_j rounded to the dtype; else zeroed). k: [n, D] on CUDA, fp32 / bf16 /
/// fp16, unit inner stride, any row stride (KvCache::head_keys); a: fp32 [D] (>= 0) on k's device;
/// D in 1..256; 0 <= kept <= D. Outputs are contiguous on k's device.
SparkPruned spark_prune_fixed(const at::Tensor& k, const at::Tensor& a, int64_t kept, bool key_sign_refill);

namespace ref {

/// KeyDiff scores with LibTorch ops (keydiff.cpp's CPU path): `compute` at::kFloat upcasts the keys
/// (the reference, and exactly what the KeyDiff policy computes); the keys' dtype instead runs the
/// same ops in that dtype (the baseline a 16-bit LibTorch path would give). keys: [Hkv, n, D] on
/// any device. Returns fp32 [Hkv, n].
at::Tensor keydiff_scores(const at::Tensor& keys, bool normalized_anchor, at::ScalarType compute = at::kFloat);

/// SPARK fixed-mode pruning with LibTorch ops (at::topk + scatter for the mask, as spark.cpp).
/// k: [n, D] any dtype, any device; a: fp32 [D]. w, the mask and pruned_sum are fp32 either way.
/// `compute` at::kFloat: masked_k = k ⊙ m + refill all in fp32 (the reference); the keys' dtype:
/// spark.cpp's arithmetic (k ⊙ m in the dtype plus the refill rounded to the dtype, added in the
/// dtype). masked_k is returned as fp32. Throws std::invalid_argument for other `compute` values,
/// bad shapes or kept outside [0, D].
SparkPruned spark_prune_fixed(const at::Tensor& k, const at::Tensor& a, int64_t kept, bool key_sign_refill,
                              at::ScalarType compute = at::kFloat);

}  // namespace ref
}  // namespace kvscope::ops
