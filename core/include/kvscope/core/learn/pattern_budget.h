#pragma once
// Budget accounting for learned head patterns, and the two ways a learned pattern is fitted to a
// budget: DuoAttention's gate threshold and HS-SFT's monotone rescaling of per-layer windows.
//
// Budget (this file's one definition, documented in docs/head-patterns.md "Learning a pattern"):
// the fraction of the full KV cache's bytes a pattern keeps on a prompt of N = reference_length
// tokens,
//     kept_fraction = sum_{layer l, KV head h} kept(l, h) / (n_layer * n_head_kv * N),
//     kept = N for a dense head, min(N, sink + window) for a streaming head.
// Every cache entry of every KV head costs the same 2 * head_dim * dtype bytes (K and V), so the
// entry fraction is the byte fraction (HS-SFT's "% of full-context KV over all heads", docs/methods.md
// §6.4; dense heads count at full length).
#include <cstdint>
#include <vector>

#include "kvscope/core/head_pattern.h"

namespace kvscope::learn {

/// kept_fraction above, in [0, 1]. Throws InputError for reference_length < 1 or an empty pattern.
double kept_fraction(const HeadPattern& pattern, int64_t reference_length);

/// DuoAttention (Xiao et al. 2024) §3.2, deployment: the KV heads with the largest gates stay dense
/// (retrieval heads), as many as `budget` allows at `reference_length`; every other head streams
/// with `sink` + `window`. gates: [n_layer][n_head_kv]; ties go to the earlier (layer, head).
/// Throws InputError when even the all-streaming pattern exceeds the budget (naming sink, window,
/// reference length and the fraction they need).
HeadPattern threshold_gates(const std::vector<std::vector<double>>& gates, double budget, int64_t reference_length,
                            int64_t sink, int64_t window);

/// HS-SFT §2.3 / Algorithm 1 line 1: the dense heads, a fraction `dense_fraction` of the KV heads
/// (docs/methods.md §5.3: alpha). Per layer floor(alpha * n_head_kv) heads with the largest gates; the
/// remaining round(alpha * n_layer * n_head_kv) - n_layer * floor(alpha * n_head_kv) heads go to the
/// largest gates left over the whole model (models with few KV heads per layer, where the paper's
/// per-layer fraction would round to zero). Returns [n_layer][n_head_kv], true = dense.
std::vector<std::vector<bool>> choose_dense_heads(const std::vector<std::vector<double>>& gates, double dense_fraction);

/// HS-SFT Appendix A.3 inference: the streaming heads of layer l get window
/// max(1, floor(s * learned_windows[l])), with one factor s > 0 for the whole model chosen as the
/// largest that keeps kept_fraction <= budget (the paper states monotone rescaling but not the
/// rule; docs/methods.md §5.9). Dense heads keep everything. Throws InputError when the dense heads plus
/// sinks and windows of 1 already exceed the budget.
HeadPattern rescale_windows(const std::vector<std::vector<bool>>& dense, const std::vector<int64_t>& learned_windows,
                            int64_t sink, double budget, int64_t reference_length);

}  // namespace kvscope::learn
