#include "kvscope/core/attention.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "torch_compat.h"

namespace kvscope {

at::Tensor gqa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionShape& shape,
                         const at::Tensor& q_positions, const at::Tensor& k_positions) {
  const int64_t T = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t Hkv = k.size(0), N = k.size(1), G = H / Hkv;
  const double scale = shape.scale > 0 ? shape.scale : 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor kt = k.transpose(1, 2);                             // [Hkv, D, N]
  at::Tensor qg = q.view({T, Hkv, G, D}).permute({1, 2, 0, 3});  // [Hkv, G, T, D]
  const int64_t max_scores = int64_t{64} << 20;                  // fp32 elements per block
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(T, max_scores / std::max<int64_t>(1, H * N)));
  std::vector<at::Tensor> outs;
  const bool by_position = q_positions.defined() && k_positions.defined();
  for (int64_t t0 = 0; t0 < T; t0 += block) {
    const int64_t tb = std::min(block, T - t0);
    // Without positions, query t0 + i sits at key index N - T + t0 + i: the block reads only the
    // keys some query of it can see, [k0, k0 + n) (causal end; with a window, its start), so a
    // causal prefill computes about half the scores of the full [T, N] rectangle.
    int64_t k0 = 0, n = N;
    if (!by_position) {
      const int64_t last = N - T + t0 + tb - 1;
      if (shape.window > 0) k0 = std::max<int64_t>(0, N - T + t0 - shape.window + 1);
      n = last + 1 - k0;
    }
    at::Tensor qb = qg.narrow(2, t0, tb).reshape({Hkv, G * tb, D});
    at::Tensor s = at::bmm(qb, kt.narrow(2, k0, n)).to(at::kFloat).mul_(scale).view({Hkv, G, tb, n});
    if (shape.softcap > 0) s = at::tanh(s / shape.softcap) * shape.softcap;
    if (T > 1 || shape.window > 0 || by_position) {
      // Keys after a query are masked, and with a window those at or before its index - window.
      // By position: the same on positions.
      const auto li = s.options().dtype(at::kLong);
      at::Tensor qi = by_position ? q_positions.narrow(0, t0, tb).to(li).unsqueeze(1)
                                  : at::arange(t0, t0 + tb, li).unsqueeze(1) + (N - T);
      at::Tensor kj = by_position ? k_positions.to(li).unsqueeze(0) : at::arange(k0, k0 + n, li).unsqueeze(0);
      at::Tensor masked = kj > qi;
      if (shape.window > 0) masked = masked.logical_or(kj <= qi - shape.window);
      s.masked_fill_(masked, -std::numeric_limits<float>::infinity());
    }
    at::Tensor p = at::softmax(s, -1).to(q.scalar_type()).view({Hkv, G * tb, n});
    at::Tensor o = at::bmm(p, v.narrow(1, k0, n)).view({Hkv, G, tb, D}).permute({2, 0, 1, 3});  // [tb, Hkv, G, D]
    outs.push_back(o.reshape({tb, H * D}));
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs, 0);
}

at::Tensor gqa_causal_self_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const AttentionShape& shape) {
  const int64_t T = q.size(0), H = q.size(1), D = q.size(2);
  if (!shape.plain()) return gqa_attention(q, k, v, shape);
  if (q.is_cuda()) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    if (auto o = compat::fused_causal_attention(q.transpose(0, 1).unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), scale))
      return o->squeeze(0).transpose(0, 1).reshape({T, H * D});
  }
  return gqa_attention(q, k, v);
}

}  // namespace kvscope
