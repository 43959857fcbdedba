// LibTorch adapters over kernels/snapkv_scores (see snapkv_ops.h).
#include "ops/snapkv_ops.h"
#include "ops/no_kernels.h"

#include <stdexcept>
#include <string>

#ifdef KVSCOPE_HAVE_CUDA_KERNELS
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kvscope/kernels/snapkv_scores.h"
#include "ops/cuda_util.h"
#endif

namespace kvscope::ops {

#ifdef KVSCOPE_HAVE_CUDA_KERNELS

namespace {
using detail::bad;
using detail::check_cuda;

/// The kernel arguments for these inputs, or a reason why the kernels cannot take them.
struct Prepared {
  at::Tensor q, k;
  kk::WindowVoteArgs args;
  std::string why_not;
};

Prepared prepare(const at::Tensor& window_queries, const at::Tensor& keys) {
  Prepared p;
  const auto refuse = [&](const std::string& why) {
    p.why_not = "window_vote: " + why;
    return p;
  };
  if (!window_queries.defined() || !keys.defined() || window_queries.dim() != 3 || keys.dim() != 3)
    return refuse("window_queries must be [w, n_head, D] and keys [n_head_kv, n, D]");
  if (!window_queries.is_cuda() || !keys.is_cuda() || window_queries.device() != keys.device())
    return refuse("tensors must be on one CUDA device");
  if (window_queries.scalar_type() != keys.scalar_type() ||
      (keys.scalar_type() != at::kBFloat16 && keys.scalar_type() != at::kHalf))
    return refuse("queries and keys must both be bf16 or fp16");
  const int64_t w = window_queries.size(0), H = window_queries.size(1), D = window_queries.size(2);
  const int64_t Hkv = keys.size(0), n = keys.size(1);
  if (keys.size(2) != D || Hkv == 0 || H % Hkv != 0) return refuse("queries do not fit the keys' heads / head_dim");
  if (D % 16 != 0 || D > 256) return refuse("head_dim must be a multiple of 16 and <= 256");
  if (w < 1 || w >= n) return refuse("need 1 <= w < n");
  const int64_t G = H / Hkv;
  if (G * w > kk::window_vote_max_rows(static_cast<int>(D)) || G > 64)
    return refuse("G * w = " + std::to_string(G * w) + " window rows exceed the kernel's resident rows");
  // Rows of D contiguous; any token / head stride (the kernels load 16-byte vectors).
  p.q = window_queries.stride(2) == 1 && window_queries.stride(1) == D ? window_queries : window_queries.contiguous();
  p.k = keys.stride(2) == 1 && keys.stride(1) == D ? keys : keys.contiguous();
  if (p.q.stride(0) % 8 != 0 || p.k.stride(0) % 8 != 0) p.q = p.q.contiguous(), p.k = p.k.contiguous();
  kk::WindowVoteArgs& a = p.args;
  a.dtype = detail::kernel_dtype(keys, "window_vote");
  a.n_head_kv = static_cast<int>(Hkv);
  a.group = static_cast<int>(G);
  a.head_dim = static_cast<int>(D);
  a.n = n;
  a.window = static_cast<int>(w);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  a.q = p.q.data_ptr();
  a.q_row_stride = p.q.stride(0);
  a.k = p.k.data_ptr();
  a.k_head_stride = p.k.stride(0);
  return p;
}

at::Tensor run_vote(Prepared& p) {
  const c10::cuda::CUDAGuard guard(p.k.device());
  kk::WindowVoteArgs& a = p.args;
  at::Tensor out =
      at::empty({a.n_head_kv, a.group, a.all_columns ? a.n : a.n - a.window}, p.k.options().dtype(at::kFloat));
  a.out = out.data_ptr<float>();
  at::Tensor ws = at::empty({static_cast<int64_t>(kk::window_vote_workspace_bytes(a))}, p.k.options().dtype(at::kByte));
  check_cuda(kk::window_vote(a, ws.data_ptr(), at::cuda::getCurrentCUDAStream()), "window_vote");
  return out;
}

}  // namespace

at::Tensor window_vote(const at::Tensor& window_queries, const at::Tensor& keys, bool all_columns) {
  Prepared p = prepare(window_queries, keys);
  if (!p.why_not.empty()) bad(p.why_not);
  p.args.all_columns = all_columns;
  return run_vote(p);
}

bool window_vote_supported(const at::Tensor& window_queries, const at::Tensor& keys) {
  return prepare(window_queries, keys).why_not.empty();
}

at::Tensor snapkv_window_scores(const at::Tensor& window_queries, const at::Tensor& keys, int64_t pool_kernel,
                                bool max_pool, GroupReduce reduce) {
  Prepared p = prepare(window_queries, keys);
  if (!p.why_not.empty() || pool_kernel < 1 || pool_kernel % 2 == 0 || pool_kernel > (1 << 20)) return {};
  const at::Tensor vote = run_vote(p);
  const kk::WindowVoteArgs& v = p.args;
  at::Tensor out = at::empty({v.n_head_kv, v.n - v.window}, vote.options());
  kk::PoolGroupsArgs a;
  a.n_head_kv = v.n_head_kv;
  a.group = v.group;
  a.len = v.n - v.window;
  a.kernel = static_cast<int>(pool_kernel);
  a.max_pool = max_pool;
  a.reduce = reduce == GroupReduce::kMean  ? kk::GroupReduce::kMean
             : reduce == GroupReduce::kSum ? kk::GroupReduce::kSum
                                           : kk::GroupReduce::kMax;
  a.in = vote.data_ptr<float>();
  a.out = out.data_ptr<float>();
  a.out_stride = a.len;
  check_cuda(kk::pool_groups(a, at::cuda::getCurrentCUDAStream()), "pool_groups");
  return out;
}

#else  // !KVSCOPE_HAVE_CUDA_KERNELS

at::Tensor window_vote(const at::Tensor&, const at::Tensor&, bool) { detail::unavailable("window_vote"); }

bool window_vote_supported(const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor snapkv_window_scores(const at::Tensor&, const at::Tensor&, int64_t, bool, GroupReduce) { return {}; }

#endif

}  // namespace kvscope::ops
