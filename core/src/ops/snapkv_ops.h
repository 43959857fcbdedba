#pragma once
// LibTorch adapters over the SnapKV window-voting kernels (kernels/snapkv_scores.h): observation-
// window attention voted per key, pooled along tokens and reduced over the GQA group, without
// materialising the [G, w, n] attention. Internal to kvscope_core (and its tests). The bodies exist
// only with KVSCOPE_HAVE_CUDA_KERNELS; elsewhere window_vote throws std::runtime_error and
// snapkv_window_scores returns an undefined tensor.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kvscope::ops {

/// How the G query heads of a KV group are combined (SnapKV issue #22, Ada-KV §3.5).
enum class GroupReduce { kMean, kSum, kMax };

/// s[h,g,j] = (1/w) Σ_i softmax_j(q_{g,i}·k_j / sqrt(D)) over the causal window rows (SnapKV §4.1,
/// kvpress's mean), for the columns j < n - w (all_columns: every column j < n, the window's own
/// under the causal mask, so each (h, g) row sums to 1: capture's window attention). window_queries: [w, n_head, D]
/// (the last w queries of the prompt, at key positions n - w .. n - 1); keys: [n_head_kv, n, D]; both bf16 or fp16 on
/// one CUDA device, D a multiple of 16 (<= 256), 1 <= w < n, n_head = G * n_head_kv with G * w <=
/// the kernel's resident-row limit. Returns fp32 [n_head_kv, G, n - w] ([n_head_kv, G, n]). Errors:
/// std::invalid_argument for shapes / dtypes / devices the kernels refuse, std::runtime_error for a
/// failed launch.
at::Tensor window_vote(const at::Tensor& window_queries, const at::Tensor& keys, bool all_columns = false);

/// Whether window_vote takes these inputs (CUDA kernels built, shapes and dtypes it accepts).
bool window_vote_supported(const at::Tensor& window_queries, const at::Tensor& keys);

/// SnapKV §4.1-4.2 scores of the columns j < n - w: pool_kernel-wide pooling (odd; avg counts the
/// zero padding as avg_pool1d does, max as max_pool1d) of each query head's vote, then `reduce` over
/// the group. Returns fp32 [n_head_kv, n - w], or an undefined tensor when the fused kernels cannot
/// take these inputs (no CUDA kernels in this build, CPU tensors, fp32, an unsupported shape): the
/// caller then uses its LibTorch path.
at::Tensor snapkv_window_scores(const at::Tensor& window_queries, const at::Tensor& keys, int64_t pool_kernel,
                                bool max_pool, GroupReduce reduce);

}  // namespace kvscope::ops
