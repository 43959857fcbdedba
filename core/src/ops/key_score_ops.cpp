// LibTorch adapters over kernels/key_scores (see key_score_ops.h), and the LibTorch references.
// Everything CUDA sits behind KVSCOPE_HAVE_CUDA_KERNELS: <ATen/cuda/CUDAContext.h> exists only in
// a CUDA LibTorch.
#include "ops/key_score_ops.h"
#include "ops/no_kernels.h"

#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/ATen.h>

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kvscope/kernels/key_scores.h"
#include "ops/cuda_util.h"
#endif

namespace kvscope::ops {

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

using namespace detail;

at::Tensor keydiff_scores(const at::Tensor& keys_in, bool normalized_anchor) {
  const char* op = "keydiff_scores";
  check_same(op, {&keys_in});
  if (keys_in.dim() != 3) bad("keydiff_scores: keys must be [n_head_kv, n_tok, head_dim]");
  const int64_t Hkv = keys_in.size(0), n = keys_in.size(1), D = keys_in.size(2);
  if (D < 1 || D > 256) bad("keydiff_scores: head_dim must be in 1..256");
  if (Hkv > 65535) bad("keydiff_scores: at most 65535 KV heads");
  const kk::DType dtype = kernel_dtype(keys_in, op);
  const at::Tensor keys = keys_in.stride(2) == 1 || D == 1 ? keys_in : keys_in.contiguous();
  const c10::cuda::CUDAGuard guard(keys.device());
  at::Tensor scores = at::empty({Hkv, n}, keys.options().dtype(at::kFloat));
  if (Hkv == 0 || n == 0) return scores;
  kk::KeyDiffArgs a;
  a.dtype = dtype;
  a.n_head_kv = static_cast<int>(Hkv);
  a.n_tok = n;
  a.head_dim = static_cast<int>(D);
  a.keys = keys.data_ptr();
  a.head_stride = keys.stride(0);
  a.row_stride = keys.stride(1);
  a.normalized_anchor = normalized_anchor;
  a.scores = scores.data_ptr<float>();
  const at::Tensor ws =
      at::empty({static_cast<int64_t>(kk::keydiff_workspace_bytes(a))}, keys.options().dtype(at::kByte));
  check_cuda(kk::keydiff_scores(a, ws.data_ptr(), at::cuda::getCurrentCUDAStream()), op);
  return scores;
}

SparkPruned spark_prune_fixed(const at::Tensor& k_in, const at::Tensor& a_in, int64_t kept, bool key_sign_refill) {
  const char* op = "spark_prune_fixed";
  check_same(op, {&k_in});
  if (k_in.dim() != 2) bad("spark_prune_fixed: k must be [n, head_dim]");
  const int64_t n = k_in.size(0), D = k_in.size(1);
  if (D < 1 || D > 256) bad("spark_prune_fixed: head_dim must be in 1..256");
  if (!a_in.defined() || a_in.scalar_type() != at::kFloat || a_in.device() != k_in.device() || a_in.numel() != D)
    bad("spark_prune_fixed: a must be fp32 [head_dim] on k's device");
  if (kept < 0 || kept > D) bad("spark_prune_fixed: kept must be in [0, head_dim]");
  const kk::DType dtype = kernel_dtype(k_in, op);
  const at::Tensor k = k_in.stride(1) == 1 || D == 1 ? k_in : k_in.contiguous();
  const at::Tensor a = a_in.reshape({D}).contiguous();
  const c10::cuda::CUDAGuard guard(k.device());
  SparkPruned out;
  out.mask = at::empty({n, D}, k.options().dtype(at::kBool));
  out.masked_k = at::empty({n, D}, k.options());
  out.pruned_sum = at::empty({n}, k.options().dtype(at::kFloat));
  if (n == 0) return out;
  kk::SparkPruneArgs args;
  args.dtype = dtype;
  args.n_tok = n;
  args.head_dim = static_cast<int>(D);
  args.kept = static_cast<int>(kept);
  args.k = k.data_ptr();
  args.k_stride = k.stride(0);
  args.a = a.data_ptr<float>();
  args.key_sign_refill = key_sign_refill;
  args.mask = out.mask.data_ptr<bool>();
  args.masked_k = out.masked_k.data_ptr();
  args.pruned_sum = out.pruned_sum.data_ptr<float>();
  check_cuda(kk::spark_prune_fixed(args, at::cuda::getCurrentCUDAStream()), op);
  return out;
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

using detail::unavailable;

at::Tensor keydiff_scores(const at::Tensor&, bool) { unavailable("keydiff_scores"); }
SparkPruned spark_prune_fixed(const at::Tensor&, const at::Tensor&, int64_t, bool) { unavailable("spark_prune_fixed"); }

#endif

// ---- references (always compiled) ------------------------------------------------------------------

namespace ref {

at::Tensor keydiff_scores(const at::Tensor& keys, bool normalized_anchor, at::ScalarType compute) {
  if (!keys.defined() || keys.dim() != 3) throw std::invalid_argument("ref::keydiff_scores: keys must be [Hkv, n, D]");
  // The ops of keydiff.cpp, in `compute`.
  const at::Tensor k = keys.to(compute);  // [Hkv, n, D]
  const at::Tensor a = normalized_anchor ? k / k.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-12) : k;
  const at::Tensor anchor = a.mean(1, /*keepdim=*/true).expand_as(k);       // [Hkv, n, D]
  return at::cosine_similarity(k, anchor, -1, 1e-8).neg_().to(at::kFloat);  // [Hkv, n]
}

SparkPruned spark_prune_fixed(const at::Tensor& k, const at::Tensor& a, int64_t kept, bool key_sign_refill,
                              at::ScalarType compute) {
  if (!k.defined() || k.dim() != 2) throw std::invalid_argument("ref::spark_prune_fixed: k must be [n, D]");
  const int64_t n = k.size(0), D = k.size(1);
  if (!a.defined() || a.numel() != D) throw std::invalid_argument("ref::spark_prune_fixed: a must have D elements");
  if (kept < 0 || kept > D) throw std::invalid_argument("ref::spark_prune_fixed: kept must be in [0, D]");
  if (compute != at::kFloat && compute != k.scalar_type())
    throw std::invalid_argument("ref::spark_prune_fixed: compute must be fp32 or k's dtype");
  // spark.cpp on_prefill (mode=fixed), line by line.
  const at::Tensor ah = a.reshape({D}).to(k.device(), at::kFloat);
  const at::Tensor sal = k.to(at::kFloat).abs().mul_(ah);  // w [n, D]
  at::Tensor mask = at::zeros(sal.sizes(), sal.options().dtype(at::kBool));
  if (kept >= D)
    mask.fill_(true);
  else if (kept > 0 && n > 0)
    mask.scatter_(1, std::get<1>(sal.topk(kept, -1)), true);
  SparkPruned out;
  out.mask = mask;
  out.pruned_sum = sal.masked_fill(mask, 0.0f).sum(-1);  // [n]
  const at::Tensor kc = k.to(compute);
  at::Tensor masked = kc.mul(mask.to(compute));
  if (key_sign_refill) {
    const at::Tensor n_pruned = (~mask).sum(-1, true).to(at::kFloat);                 // [n, 1]
    const at::Tensor mu = out.pruned_sum.unsqueeze(1) / n_pruned.clamp_min(1.0f);     // [n, 1]
    const at::Tensor inv_a = at::where(ah > 0, ah.reciprocal(), at::zeros_like(ah));  // [D]
    const at::Tensor refill = k.to(at::kFloat).sign().mul_(mu).mul_(inv_a).masked_fill_(mask, 0.0f);
    masked = masked.add(refill.to(compute));
  }
  out.masked_k = masked.to(at::kFloat);
  return out;
}

}  // namespace ref
}  // namespace kvscope::ops
