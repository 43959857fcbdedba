#pragma once
// The one place that knows LibTorch version differences (Debian 1.13 CPU here; PyTorch 2.x CUDA on
// the GPU machine). Internal to kvscope_core.
#include <optional>

#include <ATen/ATen.h>
#include <torch/version.h>

#define KVSCOPE_TORCH_HAS_SDPA (TORCH_VERSION_MAJOR >= 2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5))

namespace kvscope::compat {

/// Fused causal self-attention with grouped KV heads where the LibTorch has it (>= 2.5:
/// scaled_dot_product_attention with enable_gqa, FlashAttention on CUDA); nullopt otherwise.
/// q [1, n_head, T, D], k/v [1, n_head_kv, T, D]; returns [1, n_head, T, D].
inline std::optional<at::Tensor> fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        double scale) {
#if KVSCOPE_TORCH_HAS_SDPA
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true, scale,
                                          /*enable_gqa=*/true);
#else
  (void)q;
  (void)k;
  (void)v;
  (void)scale;
  return std::nullopt;
#endif
}

}  // namespace kvscope::compat
