#include "kvscope/core/rope.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace kvscope {

namespace {

/// theta^(2i/dim), i < dim/2, in fp32: HF's `base ** (arange(0, dim, 2).float() / dim)`.
at::Tensor rope_powers(double theta, int64_t dim) {
  return at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim);
}

/// HF `_compute_llama3_parameters`, from the plain frequencies.
at::Tensor llama3_inv_freq(const RopeScaling& s, const at::Tensor& inv) {
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
  at::Tensor wavelen = 2 * M_PI / inv;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
  at::Tensor smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return at::where(medium, smoothed, scaled);
}

/// HF `_compute_yarn_parameters` (YaRN, Peng et al. 2023, NTK-by-parts): the dimensions rotating
/// more than beta_fast times over the original context extrapolate (plain frequency), those
/// rotating fewer than beta_slow times interpolate (frequency / factor), a linear ramp between.
at::Tensor yarn_inv_freq(const RopeScaling& s, double theta, int64_t dim) {
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           std::log(static_cast<double>(s.original_max_position_embeddings) / (rotations * 2 * M_PI)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevents a division by zero
  const at::Tensor pos_freqs = rope_powers(theta, dim);
  const at::Tensor extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (s.factor * pos_freqs);
  const at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  const at::Tensor extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

/// HF `_compute_dynamic_ntk_parameters`. Above max_position_embeddings in fp32 tensor arithmetic, as
/// in HF's forward (seq_len there is the int64 tensor max(position_ids) + 1); at or below it in
/// double, as at HF's init (seq_len = max_position_embeddings).
at::Tensor dynamic_inv_freq(const ModelConfig& c, double theta, int64_t dim, int64_t seq_len) {
  const double factor = c.rope_scaling.factor, exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  const int64_t max_pos = c.max_position_embeddings;
  const at::Tensor shape = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim;
  if (seq_len <= max_pos) {
    const double base =
        theta * std::pow(factor * static_cast<double>(max_pos) / static_cast<double>(max_pos) - (factor - 1), exponent);
    return 1.0 / at::pow(base, shape);
  }
  const at::Tensor n = at::scalar_tensor(seq_len, at::kLong);                              // int64, > max_pos
  const at::Tensor base = theta * at::pow(n * factor / max_pos - (factor - 1), exponent);  // fp32 0-d
  return 1.0 / at::pow(base, shape);
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t layer, int64_t seq_len) {
  // HF: 1 / base ** (arange(0, dim, 2, int64).float() / dim), in fp32; dim = the rotated channels.
  const bool local = layer >= 0 && layer < static_cast<int64_t>(c.layer_rope_theta.size());
  const double theta = local ? c.layer_rope_theta[static_cast<std::size_t>(layer)] : c.rope_theta;
  const int64_t dim = c.rope_dim();
  // Gemma 3's local layers use their own base without the model's scaling.
  if (local && c.window(layer) > 0) return {1.0 / rope_powers(theta, dim), 1.0};
  const RopeScaling& s = c.rope_scaling;
  switch (s.type) {
    case RopeScaling::Type::kNone:
      return {1.0 / rope_powers(theta, dim), 1.0};
    case RopeScaling::Type::kLinear:
      return {1.0 / rope_powers(theta, dim) / s.factor, 1.0};
    case RopeScaling::Type::kLlama3:
      return {llama3_inv_freq(s, 1.0 / rope_powers(theta, dim)), 1.0};
    case RopeScaling::Type::kDynamic:
      return {dynamic_inv_freq(c, theta, dim, seq_len), 1.0};
    case RopeScaling::Type::kYarn:
      return {yarn_inv_freq(s, theta, dim), s.attention_scaling()};
    case RopeScaling::Type::kLongRope: {
      // HF: the factors as an fp32 tensor; long ones once seq_len > original_max_position_embeddings.
      const std::vector<double>& f = seq_len > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
      if (static_cast<int64_t>(f.size()) != dim / 2)
        throw std::invalid_argument("rope_frequencies: longrope needs " + std::to_string(dim / 2) + " factors, has " +
                                    std::to_string(f.size()));
      const at::Tensor factors = at::tensor(at::ArrayRef<double>(f), at::kDouble).to(at::kFloat);
      return {1.0 / (factors * rope_powers(theta, dim)), s.attention_scaling()};
    }
  }
  return {1.0 / rope_powers(theta, dim), 1.0};
}

at::Tensor rope_inv_freq(const ModelConfig& c, int64_t layer) { return rope_frequencies(c, layer, 0).inv_freq; }

RopeSeqDependence rope_seq_dependence(const ModelConfig& c, int64_t layer) {
  const bool local = layer >= 0 && layer < static_cast<int64_t>(c.layer_rope_theta.size()) && c.window(layer) > 0;
  if (local) return {};
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope)
    return {RopeSeqDependence::Kind::kLongShort, c.rope_scaling.original_max_position_embeddings};
  if (c.rope_scaling.type == RopeScaling::Type::kDynamic)
    return {RopeSeqDependence::Kind::kDynamic, c.max_position_embeddings};
  return {};
}

int64_t rope_forward_seq_len(const ModelConfig& c, int64_t& cached, int64_t seq_len) {
  if (c.rope_scaling.type != RopeScaling::Type::kDynamic) return seq_len;
  const int64_t original = c.max_position_embeddings;  // HF: original_max_seq_len
  const int64_t before = cached > 0 ? cached : original;
  cached = before;
  if (seq_len > before) cached = seq_len;                          // growth: recompute at seq_len
  if (seq_len < original && before > original) cached = original;  // reset to the plain frequencies
  return cached;
}

RopeTable rope_table(const at::Tensor& positions, const at::Tensor& inv_freq, c10::ScalarType dtype,
                     double attention_scaling) {
  at::Tensor angles = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // fp32 [T, D/2]
  at::Tensor cos = angles.cos(), sin = angles.sin();
  if (attention_scaling != 1.0) {  // HF: emb.cos() * attention_scaling, in fp32, before the cast
    cos = cos * attention_scaling;
    sin = sin * attention_scaling;
  }
  return {cos.to(dtype).unsqueeze(1), sin.to(dtype).unsqueeze(1)};
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
