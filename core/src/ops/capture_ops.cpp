// LibTorch adapters over kernels/head_stats (see capture_ops.h).
#include "ops/capture_ops.h"
#include "ops/no_kernels.h"

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kvscope/kernels/exact_topk.h"
#include "kvscope/kernels/head_stats.h"
#include "ops/cuda_util.h"
#endif

namespace kvscope::ops {

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

bool capture_stats_supported(const at::Tensor& on) { return on.defined() && on.is_cuda(); }

at::Tensor attention_stats(const at::Tensor& a, int64_t sink) {
  if (!a.defined() || !a.is_cuda() || a.dim() != 2 || a.scalar_type() != at::kFloat)
    detail::bad("attention_stats: a must be fp32 [rows, n] on a CUDA device");
  if (a.size(0) > 65535 || a.size(1) < 1) detail::bad("attention_stats: need rows <= 65535 and n >= 1");
  const at::Tensor x = a.stride(1) == 1 ? a : a.contiguous();
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({x.size(0), kk::kAttentionStats}, x.options());
  kk::AttentionStatsArgs args;
  args.rows = static_cast<int>(x.size(0));
  args.n = x.size(1);
  args.a = x.data_ptr<float>();
  args.a_stride = x.size(0) > 1 ? x.stride(0) : x.size(1);
  args.sink = static_cast<int>(std::clamp<int64_t>(sink, 0, 1 << 30));
  args.out = out.data_ptr<float>();
  detail::check_cuda(kk::attention_stats(args, at::cuda::getCurrentCUDAStream()), "attention_stats");
  return out;
}

at::Tensor key_stats(const at::Tensor& keys) {
  if (!keys.defined() || !keys.is_cuda() || keys.dim() != 3)
    detail::bad("key_stats: keys must be [n_head_kv, n, D] on a CUDA device");
  const int64_t Hkv = keys.size(0), n = keys.size(1), D = keys.size(2);
  if (D < 1 || D > 256 || Hkv > 65535) detail::bad("key_stats: need 1 <= D <= 256 and n_head_kv <= 65535");
  const at::Tensor k = keys.stride(2) == 1 && keys.stride(1) == D ? keys : keys.contiguous();
  const c10::cuda::CUDAGuard guard(k.device());
  at::Tensor out = at::empty({Hkv, 3, D}, k.options().dtype(at::kFloat));
  kk::KeyStatsArgs args;
  args.dtype = detail::kernel_dtype(k, "key_stats");
  args.n_head_kv = static_cast<int>(Hkv);
  args.head_dim = static_cast<int>(D);
  args.n = n;
  args.k = k.data_ptr();
  args.k_head_stride = Hkv > 1 ? k.stride(0) : n * D;
  args.out = out.data_ptr<float>();
  detail::check_cuda(kk::key_stats(args, at::cuda::getCurrentCUDAStream()), "key_stats");
  return out;
}

at::Tensor principal_axes(const at::Tensor& cov, int64_t iterations) {
  if (!cov.defined() || !cov.is_cuda() || cov.scalar_type() != at::kFloat || cov.dim() != 3 ||
      cov.size(1) != cov.size(2) || cov.size(1) < 2 || cov.size(1) > 1024 || cov.size(0) > 65535)
    detail::bad("principal_axes: cov must be fp32 [heads, D, D] on a CUDA device, 2 <= D <= 1024");
  const at::Tensor c = cov.contiguous();
  const c10::cuda::CUDAGuard guard(c.device());
  at::Tensor out = at::empty({c.size(0), c.size(1), 2}, c.options());
  kk::PrincipalAxesArgs a;
  a.heads = static_cast<int>(c.size(0));
  a.dim = static_cast<int>(c.size(1));
  a.iterations = static_cast<int>(std::clamp<int64_t>(iterations, 0, 100000));
  a.cov = c.data_ptr<float>();
  a.axes = out.data_ptr<float>();
  detail::check_cuda(kk::principal_axes(a, at::cuda::getCurrentCUDAStream()), "principal_axes");
  return out;
}

int64_t exact_topk_workspace_bytes(int64_t n_head_kv, int64_t group, int64_t max_len) {
  kk::ExactTopkArgs a;
  a.n_head_kv = static_cast<int>(n_head_kv);
  a.group = static_cast<int>(group);
  a.max_len = max_len;
  return static_cast<int64_t>(kk::exact_topk_workspace_bytes(a));
}

void exact_topk(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& pos, const at::Tensor& offset,
                const at::Tensor& length, int64_t max_len, int64_t union_k, const at::Tensor& seen,
                const at::Tensor& sel_index, const at::Tensor& sel_count, const at::Tensor& recall,
                const at::Tensor& exact, const at::Tensor& workspace) {
  detail::check_same("exact_topk", {&q, &keys});
  if (q.dim() != 2 || keys.dim() != 2 || keys.size(1) != q.size(1) || !keys.is_contiguous())
    detail::bad("exact_topk: q must be [n_head, D] and keys [rows, D] contiguous");
  const int64_t Hkv = offset.numel(), H = q.size(0);
  if (Hkv < 1 || H % Hkv != 0 || length.numel() != Hkv || offset.scalar_type() != at::kLong ||
      length.scalar_type() != at::kLong || !offset.is_cuda() || !length.is_cuda())
    detail::bad("exact_topk: offset / length must be int64 [n_head_kv] on the device, n_head a multiple");
  const at::Tensor qc = q.is_contiguous() ? q : q.contiguous();
  kk::ExactTopkArgs a;
  a.dtype = detail::kernel_dtype(q, "exact_topk");
  a.n_head_kv = static_cast<int>(Hkv);
  a.group = static_cast<int>(H / Hkv);
  a.head_dim = static_cast<int>(q.size(1));
  a.max_len = max_len;
  a.q = qc.data_ptr();
  a.k = keys.data_ptr();
  a.offset = offset.data_ptr<int64_t>();
  a.length = length.data_ptr<int64_t>();
  if (seen.defined() && union_k > 0) {
    if (seen.scalar_type() != at::kByte && seen.scalar_type() != at::kBool)
      detail::bad("exact_topk: seen must be uint8");
    if (seen.dim() != 2 || seen.size(0) != H || !seen.is_contiguous() || pos.scalar_type() != at::kLong)
      detail::bad("exact_topk: seen must be [n_head, P] contiguous and pos int64");
    a.union_k = static_cast<int>(std::min<int64_t>(union_k, 1 << 30));
    a.pos = pos.data_ptr<int64_t>();
    a.seen = static_cast<uint8_t*>(seen.data_ptr());
    a.seen_stride = seen.size(1);
  }
  if (sel_index.defined() && sel_count.defined() && recall.defined()) {
    if (sel_index.scalar_type() != at::kInt || sel_index.dim() != 2 || sel_index.size(0) != Hkv ||
        sel_count.scalar_type() != at::kLong || sel_count.numel() != Hkv || recall.scalar_type() != at::kFloat ||
        recall.numel() != Hkv || !recall.is_contiguous())
      detail::bad("exact_topk: selection must be int32 [n_head_kv, S] + int64 [n_head_kv], recall fp32 [n_head_kv]");
    const at::Tensor idx = sel_index.stride(1) == 1 ? sel_index : sel_index.contiguous();
    a.sel_index = idx.data_ptr<int32_t>();
    a.sel_stride = idx.stride(0);
    a.sel_count = sel_count.data_ptr<int64_t>();
    a.recall = recall.data_ptr<float>();
    if (exact.defined()) {
      if (exact.scalar_type() != at::kInt || exact.dim() != 2 || exact.size(0) != Hkv || !exact.is_contiguous())
        detail::bad("exact_topk: exact must be int32 [n_head_kv, words] contiguous");
      a.exact = reinterpret_cast<uint32_t*>(exact.data_ptr<int32_t>());
      a.exact_words = exact.size(1);
    }
  }
  if (!workspace.defined() || workspace.nbytes() < kk::exact_topk_workspace_bytes(a))
    detail::bad("exact_topk: workspace too small");
  const c10::cuda::CUDAGuard guard(q.device());
  detail::check_cuda(kk::exact_topk(a, workspace.data_ptr(), at::cuda::getCurrentCUDAStream()), "exact_topk");
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

bool capture_stats_supported(const at::Tensor&) { return false; }
at::Tensor attention_stats(const at::Tensor&, int64_t) { detail::unavailable("attention_stats"); }
at::Tensor key_stats(const at::Tensor&) { detail::unavailable("key_stats"); }
at::Tensor principal_axes(const at::Tensor&, int64_t) { detail::unavailable("principal_axes"); }
int64_t exact_topk_workspace_bytes(int64_t, int64_t, int64_t) { return 0; }
void exact_topk(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                const at::Tensor&) {
  detail::unavailable("exact_topk");
}

#endif

}  // namespace kvscope::ops
