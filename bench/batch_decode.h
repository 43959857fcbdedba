#pragma once
// Batched decode timing shared by bench_engine and bench_pipeline: B sequences per step through one
// DecodeGraph over a cache of B x n_head_kv heads (sequence b owns heads b * n_head_kv .. (b + 1) *
// n_head_kv - 1; see DeviceDecodeState). Every sequence's heads hold the given numbers of random
// K/V entries: decode speed depends on the lengths, not on the values.
#include <cstdint>
#include <vector>

#include "kvscope/core/engine.h"

namespace kvscope::bench {

struct BatchDecode {
  double tokens_per_s = 0;       ///< batch x steps / wall time (all sequences' tokens)
  double kv_bytes_per_step = 0;  ///< K/V bytes the attention reads per step, all sequences (mean over steps)
};

/// lengths: [layer][kv head] live entries of one sequence (ragged allowed). Times `steps` graph
/// replays after 3 warm-up steps. `policy`: an optional configured decode-time policy whose side
/// stores prepare_graph builds from the cache alone (page summaries: Quest, RocketKV's HSA); the
/// bytes are then the ones it reports per step. Throws std::runtime_error without a CUDA build and
/// device, or when the policy cannot run in a graph over the batch.
BatchDecode time_batched_decode(const Engine& engine, const std::vector<std::vector<int64_t>>& lengths, int64_t batch,
                                int64_t steps, DecodeAttentionPolicy* policy = nullptr);

}  // namespace kvscope::bench
