#pragma once
// Per-head summary statistics of capture (core/capture.h) on the GPU, beside the fused SnapKV
// window-voting kernels that give the window attention (snapkv_scores.h, all_columns). Raw device
// pointers, no torch headers; fp32 references in tests/core/test_cuda_head_stats.cpp.
//
//   attention_stats, per row a (a head's window-mean attention over n tokens, a >= 0, any scale):
//     p_j = a_j / Σ a
//     entropy        H = -Σ p_j log p_j = log Σa - Σ a_j log a_j / Σa   (nats; Ada-KV Fig. 1 idea)
//     mass_top1pct   Σ of the k largest p_j, k = max(1, ceil(0.01 n))     (Ada-KV §3.4)
//     mass_top5pct   the same with k = max(1, ceil(0.05 n))
//     tokens95_frac  m / n, m the fewest largest p_j whose sum reaches 0.95 (Ada-KV Fig. 12)
//     sink_share     Σ_{j < sink} p_j                                      (StreamingLLM §3)
//   The k-th largest value and the 95% point are found by an MSB radix select over the fp32 bit
//   patterns (order-preserving for a >= 0): 4 passes of 8 bits with count and mass histograms in
//   shared memory, so no sort and no [n] copy. Ties at the threshold count as in a sorted prefix.
//
//   key_stats, per KV head over its n keys k_t (rows of D): fp32 sums per channel j
//     Σ_t k_tj / ‖k_t‖   (mean normalised key: KeyDiff Eq. 8's anchor, cos_mean = ‖mean‖)
//     Σ_t |k_tj|,  Σ_t k_tj²   (SPARK §4.2 channel saliency CV: sqrt(E[k²] - E[|k|]²) / E[|k|])
//   One pass over the keys, a warp per key row.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

/// Columns of attention_stats' output, in this order.
inline constexpr int kAttentionStats = 5;

struct AttentionStatsArgs {
  int rows = 0;              ///< heads (<= 65535)
  int64_t n = 0;             ///< tokens per row (>= 1)
  const float* a = nullptr;  ///< fp32, row r at a + r * a_stride, n values >= 0
  int64_t a_stride = 0;      ///< >= n
  int sink = 4;              ///< sink tokens for sink_share (clamped to n)
  float* out = nullptr;      ///< fp32 [rows, kAttentionStats]
};

/// One block per row, one launch on `stream`. Returns cudaErrorInvalidValue on bad arguments.
/// A row summing to 0 gives entropy 0, masses 0, tokens95_frac 1, sink_share 0.
cudaError_t attention_stats(const AttentionStatsArgs& a, cudaStream_t stream);

struct KeyStatsArgs {
  DType dtype = DType::kBFloat16;  ///< bf16, fp16 or fp32
  int n_head_kv = 0;
  int head_dim = 0;         ///< D <= 256
  int64_t n = 0;            ///< keys per KV head (0: the sums are 0)
  const void* k = nullptr;  ///< KV head h, key t at k + h * k_head_stride + t * D (elements)
  int64_t k_head_stride = 0;
  float* out = nullptr;  ///< fp32 [n_head_kv, 3, D]: Σ k/‖k‖ (‖k‖ clamped to 1e-12), Σ|k|, Σk²
};

/// Zeroes `out` and accumulates the sums (atomics across blocks: the last bits vary run to run).
/// Returns cudaErrorInvalidValue on bad arguments.
cudaError_t key_stats(const KeyStatsArgs& a, cudaStream_t stream);

/// The two principal axes of each head's key covariance (KeyDiff Fig. 3's 2-D key map), without a
/// host round trip: subspace iteration V <- orth(C V) (`iterations` times, two vectors, Gram-
/// Schmidt), then Rayleigh-Ritz on span(V) (the 2 x 2 eigenproblem solved in closed form), so the
/// axes come out ordered by eigenvalue. Converges as (λ3 / λ2)^iterations. Each axis's sign is
/// fixed so that its largest-magnitude component is positive.
struct PrincipalAxesArgs {
  int heads = 0;
  int dim = 0;  ///< D <= 1024
  int iterations = 64;
  const float* cov = nullptr;  ///< fp32 [heads, D, D], symmetric
  float* axes = nullptr;       ///< fp32 [heads, D, 2]: column 0 the first axis, column 1 the second
};

/// One block per head. Returns cudaErrorInvalidValue on bad arguments.
cudaError_t principal_axes(const PrincipalAxesArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels
