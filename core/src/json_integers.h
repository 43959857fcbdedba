#pragma once
// Reading integers out of parsed JSON without undefined behaviour (internal to kvscope_core).
// nlohmann's get<int>() converts a float such as 1e30 with a plain cast, which is undefined
// behaviour when the value does not fit (found by fuzz_tokenizer_json).
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace kvscope {

/// `v` as an integer if it is a JSON integer (not a float, string, ...) within [lo, hi].
inline std::optional<int64_t> json_integer(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) return std::nullopt;
    return lo <= static_cast<int64_t>(u) ? std::optional<int64_t>(static_cast<int64_t>(u)) : std::nullopt;
  }
  if (!v.is_number_integer()) return std::nullopt;
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) return std::nullopt;
  return i;
}

}  // namespace kvscope
