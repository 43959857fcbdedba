#pragma once
// Rotary position embedding (RoPE): Su et al. 2021, "RoFormer", eq. 34; scaling per ModelConfig.
#include <ATen/core/Tensor.h>

#include "kvscope/core/model_config.h"

namespace kvscope {

/// Inverse frequencies theta^(-2i/D), i < D/2, fp32 [head_dim/2] on CPU, with rope_scaling applied
/// (linear: / factor; llama3: HF `_compute_llama3_parameters`).
at::Tensor rope_inv_freq(const ModelConfig& config);

/// cos/sin of the rotation angles of a block of positions, shared by every layer and head.
struct RopeTable {
  at::Tensor cos, sin;  // dtype [T, 1, head_dim/2]
};

/// Angles positions x inv_freq computed in fp32, cos/sin cast to `dtype` (as HF does).
/// positions: int64 [T]; inv_freq: fp32 [head_dim/2], both on the same device.
RopeTable rope_table(const at::Tensor& positions, const at::Tensor& inv_freq, c10::ScalarType dtype);

/// Rotates x: [T, n_heads, head_dim] (dtype of the table) by the table's angles. Returns a new tensor.
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, RopeLayout layout);

/// Convenience: rope_table + apply_rope.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq, RopeLayout layout);

}  // namespace kvscope
