#include "kvscope/core/rope.h"

#include <cmath>

#include <ATen/ATen.h>

namespace kvscope {

at::Tensor rope_inv_freq(const ModelConfig& c, int64_t layer) {
  // HF: 1 / base ** (arange(0, dim, 2, int64).float() / dim), in fp32; dim = the rotated channels.
  const bool local = layer >= 0 && layer < static_cast<int64_t>(c.layer_rope_theta.size());
  const double theta = local ? c.layer_rope_theta[static_cast<std::size_t>(layer)] : c.rope_theta;
  const int64_t dim = c.rope_dim();
  at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim);
  // Gemma 3's local layers use their own base without the model's scaling.
  if (local && c.window(layer) > 0) return inv;
  const auto& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) return inv / s.factor;
  if (s.type == RopeScaling::Type::kLlama3) {
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
    at::Tensor smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv = at::where(medium, smoothed, scaled);
  }
  return inv;
}

RopeTable rope_table(const at::Tensor& positions, const at::Tensor& inv_freq, c10::ScalarType dtype) {
  at::Tensor angles = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // fp32 [T, D/2]
  return {angles.cos().to(dtype).unsqueeze(1), angles.sin().to(dtype).unsqueeze(1)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTable& t, RopeLayout layout) {
  // Partial rotary (Phi-3): the table covers the first 2 * t.cos.size(-1) channels; the rest pass.
  const int64_t rd = 2 * t.cos.size(-1);
  if (rd < x.size(-1))
    return at::cat({apply_rope(x.narrow(-1, 0, rd), t, layout), x.narrow(-1, rd, x.size(-1) - rd)}, -1);
  const int64_t half = x.size(-1) / 2;
  if (layout == RopeLayout::kRotateHalf) {
    at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    return at::cat({x1 * t.cos - x2 * t.sin, x2 * t.cos + x1 * t.sin}, -1);
  }
  at::Tensor pairs = x.unflatten(-1, {half, 2});
  at::Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  return at::stack({x0 * t.cos - x1 * t.sin, x0 * t.sin + x1 * t.cos}, -1).flatten(-2);
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq, RopeLayout layout) {
  return apply_rope(x, rope_table(positions, inv_freq, x.scalar_type()), layout);
}

}  // namespace kvscope
