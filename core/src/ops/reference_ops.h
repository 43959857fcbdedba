#pragma once
// Plain LibTorch versions of the ops the CUDA kernels implement (ops/cuda_ops.h), for tests and
// CPU runs. Device-agnostic (run wherever the inputs live) and always compiled.
//
// Each takes `compute`: at::kFloat (default) upcasts every input and computes in fp32, the
// reference; the input dtype instead computes the way the engine's LibTorch path does in that
// dtype (the baseline the kernels must match). Results are always fp32.
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "kvscope/core/model_config.h"

namespace kvscope::ops::ref {

/// Ragged GQA decode attention: for query head i (KV head h = i / group),
///   o[i] = softmax(scale * K_h q_i) V_h,  K_h = k[offset[h] .. offset[h] + length[h]).
/// q: [n_head, D]; k, v: [rows, D]; scale <= 0 means 1/sqrt(D). A head of length 0 gives zeros.
/// In a 16-bit compute dtype: scores in dtype, softmax in fp32, probabilities cast, P V in dtype
/// (as gqa_attention / HF eager). Returns fp32 [n_head, D].
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& offset, const std::vector<int64_t>& length, int64_t group,
                            double scale = 0.0, at::ScalarType compute = at::kFloat);

/// Index-gather variant: KV head h uses rows offset[h] + index[h][j], j < count[h].
/// index: int32/int64 [n_head_kv, S] on any device.
at::Tensor decode_attention_gather(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::vector<int64_t>& offset, const at::Tensor& index,
                                   const std::vector<int64_t>& count, int64_t group, double scale = 0.0,
                                   at::ScalarType compute = at::kFloat);

/// RMSNorm: fp32 compute gives w * x * rsqrt(mean(x^2) + eps) all in fp32; a 16-bit dtype gives
/// HF's order (normalise in fp32, cast, multiply by w in dtype). x: [..., hidden]; w: [hidden].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::ScalarType compute = at::kFloat);

/// RoPE of x [..., D] by the angles whose cos/sin are given ([D/2], any dtype), in either layout
/// (kRotateHalf: halves; kAdjacentPairs: (2j, 2j+1) pairs).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeLayout layout,
                at::ScalarType compute = at::kFloat);

/// SwiGLU: gate_up [..., 2I] (gate first) -> silu(gate) * up [..., I].
at::Tensor silu_mul(const at::Tensor& gate_up, at::ScalarType compute = at::kFloat);

/// Page min/max of one KV head's keys k_h [n, D]: {kmin, kmax} [ceil(n / page), D] (fp32), the
/// element-wise min / max over each page of `page` consecutive entries (the last may be partial).
std::pair<at::Tensor, at::Tensor> page_minmax(const at::Tensor& k_h, int64_t page);

/// The rows HSA (RocketKV §3.4 Alg. 1) or Quest (§3.2, group-accumulated) select for one KV head,
/// computed token by token in fp32 as the policies' LibTorch path does (page_select.h gives the
/// formulas): q_g [G, D] the group's queries; kmin / kmax [n_pages, D]; n live entries. keep: HSA
/// tokens k2 / Quest pages. Ties: lower storage index first. Returns the selected entries, int64,
/// ascending (all n when the head attends densely).
at::Tensor page_select_rows(bool hsa, const at::Tensor& q_g, const at::Tensor& kmin, const at::Tensor& kmax, int64_t n,
                            int64_t page, int64_t k1, int64_t keep);

}  // namespace kvscope::ops::ref
