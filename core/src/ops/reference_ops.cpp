// Plain LibTorch reference / baseline versions of the CUDA kernels' ops (see reference_ops.h).
#include "ops/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace kvscope::ops::ref {

namespace {

/// Attention of the `group` query rows qg [G, D] over keys kh / values vh [n, D].
at::Tensor attend(const at::Tensor& qg, const at::Tensor& kh, const at::Tensor& vh, double scale,
                  at::ScalarType compute) {
  if (kh.size(0) == 0) return at::zeros({qg.size(0), qg.size(1)}, qg.options().dtype(at::kFloat));
  if (compute == at::kFloat) {
    at::Tensor s = at::matmul(qg.to(at::kFloat), kh.to(at::kFloat).t()) * scale;
    return at::matmul(at::softmax(s, -1), vh.to(at::kFloat));
  }
  // The engine's dtype path: scores in dtype, fp32 softmax, probabilities cast back, P V in dtype.
  at::Tensor s = at::matmul(qg.to(compute), kh.to(compute).t()).to(at::kFloat) * scale;
  at::Tensor p = at::softmax(s, -1).to(compute);
  return at::matmul(p, vh.to(compute)).to(at::kFloat);
}

double default_scale(double scale, const at::Tensor& q) {
  return scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

void check_heads(const at::Tensor& q, size_t n_head_kv, int64_t group) {
  if (q.dim() != 2 || group <= 0 || q.size(0) != static_cast<int64_t>(n_head_kv) * group)
    throw std::invalid_argument("ref::decode_attention: q must be [n_head_kv * group, D]");
}

}  // namespace

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::vector<int64_t>& offset, const std::vector<int64_t>& length, int64_t group,
                            double scale, at::ScalarType compute) {
  check_heads(q, offset.size(), group);
  scale = default_scale(scale, q);
  std::vector<at::Tensor> outs;
  for (size_t h = 0; h < offset.size(); ++h)
    outs.push_back(attend(q.narrow(0, h * group, group), k.narrow(0, offset[h], length[h]),
                          v.narrow(0, offset[h], length[h]), scale, compute));
  return at::cat(outs, 0);
}

at::Tensor decode_attention_gather(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::vector<int64_t>& offset, const at::Tensor& index,
                                   const std::vector<int64_t>& count, int64_t group, double scale,
                                   at::ScalarType compute) {
  check_heads(q, offset.size(), group);
  scale = default_scale(scale, q);
  std::vector<at::Tensor> outs;
  for (size_t h = 0; h < offset.size(); ++h) {
    at::Tensor rows = index[h].narrow(0, 0, count[h]).to(k.device(), at::kLong) + offset[h];
    outs.push_back(
        attend(q.narrow(0, h * group, group), k.index_select(0, rows), v.index_select(0, rows), scale, compute));
  }
  return at::cat(outs, 0);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::ScalarType compute) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (compute == at::kFloat) return w.to(at::kFloat) * normed;
  return (w.to(compute) * normed.to(compute)).to(at::kFloat);
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeLayout layout,
                at::ScalarType compute) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor xc = x.to(compute), c = cos.reshape({half}).to(compute), s = sin.reshape({half}).to(compute);
  at::Tensor out;
  if (layout == RopeLayout::kRotateHalf) {
    at::Tensor x1 = xc.narrow(-1, 0, half), x2 = xc.narrow(-1, half, half);
    out = at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
  } else {
    at::Tensor pairs = xc.unflatten(-1, {half, 2});
    at::Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
    out = at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).flatten(-2);
  }
  return out.to(at::kFloat);
}

at::Tensor silu_mul(const at::Tensor& gate_up, at::ScalarType compute) {
  const int64_t inter = gate_up.size(-1) / 2;
  at::Tensor g = gate_up.narrow(-1, 0, inter).to(compute), u = gate_up.narrow(-1, inter, inter).to(compute);
  return (at::silu(g) * u).to(at::kFloat);
}

std::pair<at::Tensor, at::Tensor> page_minmax(const at::Tensor& k_h, int64_t page) {
  const at::Tensor k = k_h.to(at::kFloat);
  const int64_t n = k.size(0), n_pages = (n + page - 1) / page;
  std::vector<at::Tensor> lo, hi;
  for (int64_t P = 0; P < n_pages; ++P) {
    const at::Tensor rows = k.narrow(0, P * page, std::min(page, n - P * page));
    lo.push_back(rows.amin(0));
    hi.push_back(rows.amax(0));
  }
  return {at::stack(lo), at::stack(hi)};
}

at::Tensor page_select_rows(bool hsa, const at::Tensor& q_g, const at::Tensor& kmin, const at::Tensor& kmax, int64_t n,
                            int64_t page, int64_t k1, int64_t keep) {
  const at::Tensor q = q_g.to(at::kFloat).cpu(), lo = kmin.to(at::kFloat).cpu(), hi = kmax.to(at::kFloat).cpu();
  const int64_t D = q.size(1), n_pages = (n + page - 1) / page;
  const auto all = at::arange(n, at::TensorOptions().dtype(at::kLong));
  // Stable descending order: sort by (-score, index).
  auto top = [](const at::Tensor& score, int64_t k) {
    const at::Tensor order = std::get<1>(at::sort(-score, /*stable=*/true, 0, false));
    return std::get<0>(at::sort(order.narrow(0, 0, k)));
  };
  if (hsa) {
    if (n <= keep) return all;
    const at::Tensor absq = q.abs();
    const at::Tensor i1 = top(absq.sum(0), std::min(k1, D));  // channels
    const at::Tensor qhat = q.index_select(1, i1);            // [G, k1]
    const at::Tensor use_max = qhat.sum(0).ge(0);             // [k1]
    const at::Tensor khat = at::where(use_max, hi.narrow(0, 0, n_pages).index_select(1, i1),
                                      lo.narrow(0, 0, n_pages).index_select(1, i1));  // [P, k1]
    at::Tensor s = at::matmul(qhat, khat.t());                                        // [G, P]
    s = s.repeat_interleave(page, 1).narrow(1, 0, n);                                 // [G, n]
    const at::Tensor num = qhat.abs().sum(1, true), den = absq.sum(1, true);
    const at::Tensor ratio = at::where(den.gt(0), num / den, at::ones_like(den));
    const at::Tensor pi = at::softmax(s / (ratio * static_cast<double>(D)).sqrt(), 1);
    return top(pi.sum(0), keep);
  }
  if (n_pages <= keep) return all;
  const at::Tensor u = (at::matmul(q.clamp_min(0), hi.narrow(0, 0, n_pages).t()) +
                        at::matmul(q.clamp_max(0), lo.narrow(0, 0, n_pages).t()))
                           .sum(0);  // [P]
  const at::Tensor pages = top(u, keep);
  const at::Tensor rows = (pages.unsqueeze(1) * page + at::arange(page, pages.options())).reshape({-1});
  return rows.masked_select(rows.lt(n));
}

}  // namespace kvscope::ops::ref
