#pragma once
// The element type every kvscope kernel takes (activations, weights and cache share one per call).
#include <cstddef>

namespace kvscope::kernels {

enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
inline constexpr size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

}  // namespace kvscope::kernels
