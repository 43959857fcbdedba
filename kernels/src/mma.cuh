#pragma once
// Warp-level tensor-core product used by the skinny kernels (internal to kvscope_kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kvscope::kernels {

/// c += A B on tensor cores (PTX ISA "mma.sync.aligned.m16n8k16", sm_80+): A 16 x 16 (row-major),
/// B 16 x 8 (column-major), c 16 x 8 fp32; T = __nv_bfloat16 or __half, two values per 32-bit
/// register, the lower column / row in the low half. Lane (g, t) = (lane / 4, lane % 4) holds
/// a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1], a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9],
/// b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g], c = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}.
/// Callers may permute k freely as long as A and B use the same lane / register -> k mapping.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace kvscope::kernels
