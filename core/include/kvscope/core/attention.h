#pragma once
// Attention over a KV cache with grouped-query heads (GQA). LibTorch implementations that run on
// CPU and CUDA; the CUDA kernels in kernels/ replace the hot paths when built.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kvscope {

/// What a layer's attention does beyond softmax(q·k / sqrt(D)) (ModelConfig family features).
struct AttentionShape {
  double scale = 0;    ///< logit scale; 0 = 1/sqrt(D) (Gemma: query_pre_attn_scalar^-0.5)
  double softcap = 0;  ///< logits = softcap * tanh(logits / softcap) before the mask (Gemma 2); 0 = none
  int64_t window = 0;  ///< sliding window: a query sees the keys of its last `window` positions; 0 = all
  bool plain() const { return scale == 0 && softcap == 0 && window == 0; }
};

/// Causal GQA attention of T new queries over N >= T cached keys whose last T entries are the
/// queries' own tokens (bottom-right aligned causal mask; earlier entries are all visible, or, with
/// a window, those within `window` positions: keys must be contiguous positions, as an
/// uncompressed cache holds them). q: [T, n_head, D]; k, v: [n_head_kv, N, D] (any strides);
/// n_head % n_head_kv == 0. Query head h reads KV head h / G. Scores in the input dtype, softmax in
/// fp32 (as HF eager). Returns [T, n_head * D] in q's dtype. Processes queries in blocks so the score
/// buffer stays under ~256 MiB (never a full n_tok x n_tok matrix on long prompts).
/// With q_positions (int64 [T]) and k_positions (int64 [N]) the mask comes from the positions
/// instead (key j visible to query t iff k_pos[j] <= q_pos[t] and, with a window,
/// k_pos[j] > q_pos[t] - window): keys in any order, e.g. a sliding-window layer's ring.
at::Tensor gqa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const AttentionShape& shape = {}, const at::Tensor& q_positions = {},
                         const at::Tensor& k_positions = {});

/// Same, for the whole-prompt case N == T, using the LibTorch fused kernel when available
/// (PyTorch >= 2.5: scaled_dot_product_attention with enable_gqa; plain shapes only) and
/// gqa_attention otherwise.
at::Tensor gqa_causal_self_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const AttentionShape& shape = {});

}  // namespace kvscope
