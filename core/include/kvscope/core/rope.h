#pragma once
// Rotary position embedding (RoPE): Su et al. 2021, "RoFormer", eq. 34; scaling per ModelConfig
// (RopeScaling), computed as transformers' modeling_rope_utils.py (5.x) and its rotary embeddings do.
//
// Which frequencies a forward uses. HF's rotary embedding takes seq_len = max(position_ids) + 1 of
// each forward (one block: a prefill chunk or a decode step) and, for the two types that depend on
// it, updates its frequencies before computing cos/sin (`dynamic_rope_update`):
//   - longrope: short factors while seq_len <= original_max_position_embeddings, long factors above;
//     stateless.
//   - dynamic: the plain frequencies until seq_len exceeds max_position_embeddings; then they are
//     recomputed for every new maximum seq_len (the base grows), kept while later forwards stay at
//     or below that maximum, and reset to the plain ones only by a forward with seq_len <
//     max_position_embeddings. That state lives in the rotary module, across sequences; here it is
//     an int64 the caller keeps (rope_forward_seq_len), e.g. one per KV cache, which equals HF for
//     a freshly loaded model.
// Every other type (and Gemma 3's local layers) has fixed frequencies. Keys are cached post-RoPE,
// so a cached key keeps the frequencies of the forward that wrote it, as in HF; a chunked prefill
// that crosses a threshold therefore rotates its first chunks as HF would run them chunk by chunk.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "kvscope/core/model_config.h"

namespace kvscope {

/// Inverse frequencies and the factor cos/sin are multiplied by (HF `inv_freq`, `attention_scaling`).
struct RopeFrequencies {
  at::Tensor inv_freq;             ///< fp32 [rope_dim/2] on CPU
  double attention_scaling = 1.0;  ///< yarn, longrope: RopeScaling::attention_scaling(); else 1
};

/// The frequencies of layer `layer` (>= 0; -1 = the model's) for a forward whose largest position
/// is seq_len - 1, after rope_forward_seq_len (dynamic). seq_len <= 0 = unknown: the regime at or
/// below the original context (what HF computes at init: longrope's short factors, dynamic's plain
/// frequencies). Inverse frequencies theta^(-2i/R), i < R/2, R = config.rope_dim(), in fp32 with HF's
/// operation order: linear: / factor; llama3: `_compute_llama3_parameters`; dynamic: seq_len >
/// max_position_embeddings: base * (factor * seq_len / max_position_embeddings - (factor - 1))^(R /
/// (R - 2)), computed in fp32 as HF's forward does; yarn: `_compute_yarn_parameters`; longrope: 1 /
/// (factor_i * theta^(2i/R)). Gemma 3's sliding layers: their own base, no scaling.
RopeFrequencies rope_frequencies(const ModelConfig& config, int64_t layer, int64_t seq_len);

/// rope_frequencies(config, layer, 0).inv_freq: the frequencies when seq_len is unknown (for the
/// callers that predate seq_len-dependent types; without the attention scaling).
at::Tensor rope_inv_freq(const ModelConfig& config, int64_t layer = -1);

/// How layer `layer`'s frequencies depend on seq_len, for caching tables. Pure.
struct RopeSeqDependence {
  enum class Kind {
    kNone,       ///< fixed: one table for every forward
    kLongShort,  ///< longrope: one set while seq_len <= threshold, another above
    kDynamic,    ///< dynamic: fixed while the effective seq_len <= threshold, else one per effective seq_len
  } kind = Kind::kNone;
  /// kLongShort: original_max_position_embeddings; kDynamic: max_position_embeddings; kNone: 0.
  int64_t threshold = 0;
};
RopeSeqDependence rope_seq_dependence(const ModelConfig& config, int64_t layer = -1);

/// The seq_len to pass to rope_frequencies for a forward whose largest position is seq_len - 1.
/// dynamic: applies HF's `dynamic_frequency_update` to `cached` (its max_seq_len_cached; 0 = fresh
/// = max_position_embeddings) and returns the new value: grows to seq_len when seq_len > cached,
/// resets to max_position_embeddings when seq_len < max_position_embeddings < cached, else keeps
/// it. Every other type: returns seq_len and leaves `cached` alone.
int64_t rope_forward_seq_len(const ModelConfig& config, int64_t& cached, int64_t seq_len);

/// cos/sin of the rotation angles of a block of positions, shared by every layer and head.
struct RopeTable {
  at::Tensor cos, sin;  // dtype [T, 1, head_dim/2]
};

/// Angles positions x inv_freq computed in fp32, cos/sin multiplied by attention_scaling in fp32,
/// then cast to `dtype` (as HF does). positions: int64 [T]; inv_freq: fp32 [rope_dim/2], both on
/// the same device.
RopeTable rope_table(const at::Tensor& positions, const at::Tensor& inv_freq, c10::ScalarType dtype,
                     double attention_scaling = 1.0);

/// Rotates x: [T, n_heads, head_dim] (dtype of the table) by the table's angles; with a table of
/// fewer than head_dim/2 angles only the first 2 x that many channels (partial rotary). Returns a
/// new tensor.
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, RopeLayout layout);

/// Convenience: rope_table + apply_rope.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq, RopeLayout layout);

}  // namespace kvscope
