#pragma once
// Rotary position embedding (RoPE): Su et al. 2021, "RoFormer", eq. 34; scaling per ModelConfig.
#include <ATen/core/Tensor.h>

#include "kvscope/core/model_config.h"

namespace kvscope {

/// Inverse frequencies theta^(-2i/R), i < R/2 with R = config.rope_dim() (partial rotary), fp32
/// [R/2] on CPU, with rope_scaling applied (linear: / factor; llama3: HF
/// `_compute_llama3_parameters`). `layer` >= 0 picks that layer's base (Gemma 3's sliding layers:
/// their own base, no scaling); -1 = the model's.
at::Tensor rope_inv_freq(const ModelConfig& config, int64_t layer = -1);

/// cos/sin of the rotation angles of a block of positions, shared by every layer and head.
struct RopeTable {
  at::Tensor cos, sin;  // dtype [T, 1, head_dim/2]
};

/// Angles positions x inv_freq computed in fp32, cos/sin cast to `dtype` (as HF does).
/// positions: int64 [T]; inv_freq: fp32 [head_dim/2], both on the same device.
RopeTable rope_table(const at::Tensor& positions, const at::Tensor& inv_freq, c10::ScalarType dtype);

/// Rotates x: [T, n_heads, head_dim] (dtype of the table) by the table's angles; with a table of
/// fewer than head_dim/2 angles only the first 2 x that many channels (partial rotary). Returns a
/// new tensor.
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, RopeLayout layout);

/// Convenience: rope_table + apply_rope.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq, RopeLayout layout);

}  // namespace kvscope
