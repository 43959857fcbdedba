#pragma once
// LibTorch adapters over kernels/head_stats (capture's per-head summary statistics on the GPU).
// Internal to kvscope_core (and its tests). The bodies exist only with KVSCOPE_HAVE_CUDA_KERNELS;
// elsewhere they throw std::runtime_error and capture_stats_supported is false.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kvscope::ops {

/// Whether attention_stats / key_stats run for tensors on this tensor's device (a CUDA tensor in a
/// build with the kernels).
bool capture_stats_supported(const at::Tensor& on);

/// Per row of a (fp32 [rows, n] on CUDA, values >= 0, any scale, rows <= 65535, n >= 1): fp32
/// [rows, 5] = entropy (nats), mass on the top 1% and 5% of tokens, fraction of tokens for 95% of
/// the mass, mass on the first `sink` tokens, all of a / Σa (kernels/head_stats.h has the formulas).
/// Errors: std::invalid_argument for other shapes / dtypes / devices, std::runtime_error for a
/// failed launch.
at::Tensor attention_stats(const at::Tensor& a, int64_t sink);

/// keys [n_head_kv, n, D] (bf16, fp16 or fp32 on CUDA, rows of D contiguous, D <= 256): fp32
/// [n_head_kv, 3, D] = Σ_t k_t/‖k_t‖, Σ_t |k_t|, Σ_t k_t² per channel. Errors as attention_stats.
at::Tensor key_stats(const at::Tensor& keys);

/// The two principal axes of each covariance cov fp32 [heads, D, D] (CUDA, symmetric, D <= 1024):
/// fp32 [heads, D, 2], column 0 the first axis, each sign fixed by its largest component
/// (kernels/head_stats.h principal_axes: subspace iteration + Rayleigh-Ritz). Errors as above.
at::Tensor principal_axes(const at::Tensor& cov, int64_t iterations = 64);

/// One layer's exact top-k oracle of a decode step (kernels/exact_topk.h), enqueued without any
/// host read (graph-capturable). Shapes: q [n_head_kv * G, D] (the cache dtype), keys [rows, D]
/// (a layer's storage, rows of D contiguous), pos int64 [rows], offset / length int64 [n_head_kv]
/// on the device, max_len >= every length. Optional parts (undefined tensors skip them):
///   seen uint8 [n_head_kv * G, P]: flags the positions of each query head's top `union_k`;
///   sel_index int32 [n_head_kv, S] + sel_count int64 [n_head_kv] + recall fp32 [n_head_kv]: the
///     recall of the selected rows against the top-count of Σ_g q_g · k;
///   exact int32 [n_head_kv, >= ceil(max_len / 32)]: that top-k as row bits.
/// workspace: uint8 of at least exact_topk_workspace_bytes(n_head_kv, G, max_len).
/// Errors: std::invalid_argument for shapes / dtypes / devices, std::runtime_error for a launch.
void exact_topk(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& pos, const at::Tensor& offset,
                const at::Tensor& length, int64_t max_len, int64_t union_k, const at::Tensor& seen,
                const at::Tensor& sel_index, const at::Tensor& sel_count, const at::Tensor& recall,
                const at::Tensor& exact, const at::Tensor& workspace);
int64_t exact_topk_workspace_bytes(int64_t n_head_kv, int64_t group, int64_t max_len);

}  // namespace kvscope::ops
