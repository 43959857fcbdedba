#include "kvscope/core/compact_keys.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace kvscope {

at::Tensor pack_bits(const at::Tensor& bits) {
  const int64_t rows = bits.size(0), cols = bits.size(1), bytes = (cols + 7) / 8;
  at::Tensor b = bits.to(at::kByte);
  if (bytes * 8 != cols) b = at::constant_pad_nd(b, {0, bytes * 8 - cols}, 0);
  const at::Tensor weights = at::tensor({1, 2, 4, 8, 16, 32, 64, 128}, b.options().dtype(at::kInt));
  return b.view({rows, bytes, 8}).to(at::kInt).mul(weights).sum(-1).to(at::kByte);
}

at::Tensor unpack_bits(const at::Tensor& packed, int64_t cols) {
  const int64_t rows = packed.size(0), bytes = packed.size(1);
  const at::Tensor shifts = at::arange(8, packed.options());
  return packed.unsqueeze(-1)
      .bitwise_right_shift(shifts)
      .bitwise_and(1)
      .view({rows, bytes * 8})
      .narrow(1, 0, cols)
      .to(at::kBool);
}

CompactKeys CompactKeys::pack(const at::Tensor& keys, const at::Tensor& mask, const at::Tensor& scale,
                              const at::Tensor& inv_a) {
  if (keys.dim() != 2 || mask.dim() != 2 || mask.size(1) != keys.size(1) ||
      (mask.size(0) != keys.size(0) && mask.size(0) != 1))
    throw std::invalid_argument("CompactKeys::pack: keys " + std::to_string(keys.dim()) + "-d and mask " +
                                std::to_string(mask.dim()) + "-d do not match ([n, D] and [n or 1, D])");
  if (scale.defined() != inv_a.defined() ||
      (scale.defined() && (scale.numel() != keys.size(0) || inv_a.numel() != keys.size(1))))
    throw std::invalid_argument("CompactKeys::pack: the recovery needs scale [n] and inv_a [D] together");
  CompactKeys c;
  c.n = keys.size(0);
  c.head_dim = keys.size(1);
  const int64_t n = c.n, D = c.head_dim;
  const at::Tensor m = mask.to(keys.device(), at::kBool);
  c.kept = pack_bits(m);
  const at::Tensor counts = m.sum(1);  // [n or 1]
  int64_t lo = 0, hi = 0;
  if (counts.numel() > 0) {
    const at::Tensor ends = at::stack({counts.min(), counts.max()}).to(at::kCPU);  // the one host read
    lo = ends[0].item<int64_t>();
    hi = ends[1].item<int64_t>();
  }
  const at::Tensor full = m.expand({n, D});
  if (lo == hi) {
    c.stride = lo;
    // Kept channels of each entry in ascending order: the kept ones sort before the absent ones.
    const at::Tensor j = at::arange(D, keys.options().dtype(at::kLong));
    const at::Tensor order = std::get<1>(at::where(full, j, j + D).sort(1)).narrow(1, 0, lo);
    c.values = keys.gather(1, order).reshape({-1});
  } else {
    c.values = keys.masked_select(full);
    c.row = at::constant_pad_nd(counts.cumsum(0), {1, 0}, 0);
  }
  if (scale.defined()) {
    const at::Tensor absent = full.logical_not();
    const int64_t most = D - lo;  // absent channels of the entry that keeps fewest
    const at::Tensor rank = absent.to(at::kLong).cumsum(1).sub_(1).clamp_min_(0);
    const at::Tensor col = at::where(absent, rank, at::full_like(rank, most));
    at::Tensor neg = at::zeros({n, most + 1}, m.options());
    neg.scatter_(1, col, keys.lt(0).logical_and(absent));
    c.sign = pack_bits(neg.narrow(1, 0, most));
    c.scale = scale.to(keys.device(), at::kFloat).reshape({n}).contiguous();
    c.inv_a = inv_a.to(keys.device(), at::kFloat).reshape({D}).contiguous();
  }
  return c;
}

at::Tensor CompactKeys::kept_mask() const { return unpack_bits(kept, head_dim).expand({n, head_dim}); }

at::Tensor CompactKeys::recover() const {
  const int64_t D = head_dim;
  const at::Tensor bits = kept_mask();
  const auto dev = values.device();
  at::Tensor out;
  if (values.numel() == 0) {
    out = at::zeros({n, D}, values.options());
  } else {
    const at::Tensor rank = bits.to(at::kLong).cumsum(1).sub_(1).clamp_min_(0);
    const at::Tensor base = row.defined() ? row.narrow(0, 0, n) : at::arange(n, rank.options()).mul_(stride);
    const at::Tensor idx = (base.unsqueeze(1) + rank).clamp_max_(values.numel() - 1);
    out = values.index_select(0, idx.reshape({-1})).view({n, D});
  }
  at::Tensor fill = at::zeros({n, D}, values.options());
  if (sign.defined() && sign.size(1) > 0 && n > 0) {
    const int64_t most = sign.size(1) * 8;
    const at::Tensor absent = bits.logical_not();
    const at::Tensor rank = absent.to(at::kLong).cumsum(1).sub_(1).clamp_(0, most - 1);
    const at::Tensor neg = unpack_bits(sign, most).gather(1, rank);
    const at::Tensor mag = scale.to(dev).unsqueeze(1) * inv_a.to(dev).unsqueeze(0);  // fp32 [n, D]
    fill = at::where(neg, -mag, mag).to(values.scalar_type());
  }
  return at::where(bits, out, fill);
}

int64_t CompactKeys::bytes() const {
  int64_t b = 0;
  for (const at::Tensor* t : {&kept, &values, &row, &sign, &scale, &inv_a})
    if (t->defined()) b += t->numel() * t->element_size();
  return b;
}

CompactKeys CompactKeys::clone() const {
  CompactKeys c = *this;
  for (at::Tensor* t : {&c.kept, &c.values, &c.row, &c.sign, &c.scale, &c.inv_a})
    if (t->defined()) *t = t->clone();
  return c;
}

}  // namespace kvscope
