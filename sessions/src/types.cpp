#include "kvscope/sessions/types.h"

#include <cmath>

namespace kvscope::sessions {

namespace {
template <class E, size_t N>
std::optional<E> lookup(std::string_view text, const std::pair<E, std::string_view> (&table)[N]) {
  for (const auto& [e, name] : table)
    if (name == text) return e;
  return std::nullopt;
}
template <class E, size_t N>
std::string_view name_of(E e, const std::pair<E, std::string_view> (&table)[N]) {
  for (const auto& [v, name] : table)
    if (v == e) return name;
  return "?";
}

constexpr std::pair<RunStatus, std::string_view> kStatus[] = {
    {RunStatus::kRunning, "running"}, {RunStatus::kComplete, "complete"}, {RunStatus::kFailed, "failed"}};
constexpr std::pair<DType, std::string_view> kDTypes[] = {{DType::kF32, "f32"},   {DType::kF16, "f16"},
                                                          {DType::kBF16, "bf16"}, {DType::kI32, "i32"},
                                                          {DType::kI64, "i64"},   {DType::kU8, "u8"}};

/// IEEE half -> float, exact (subnormals, inf, nan included).
float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}
}  // namespace

std::string_view to_string(RunStatus s) { return name_of(s, kStatus); }
std::optional<RunStatus> parse_run_status(std::string_view text) { return lookup(text, kStatus); }
std::string_view to_string(DType d) { return name_of(d, kDTypes); }
std::optional<DType> parse_dtype(std::string_view text) { return lookup(text, kDTypes); }

size_t dtype_size(DType d) {
  switch (d) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 1;
}

int64_t Blob::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> Blob::to_f32() const {
  const size_t n = data.size() / dtype_size(dtype);
  std::vector<float> out(n);
  const uint8_t* p = data.data();
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kF32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = half_to_float(h);
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_float(h);
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::kI64: {
        int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::kU8:
        out[i] = static_cast<float>(p[i]);
        break;
    }
  }
  return out;
}

}  // namespace kvscope::sessions
