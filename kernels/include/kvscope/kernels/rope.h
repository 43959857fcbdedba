#pragma once
// RoPE (Su et al. 2021) for one decode token fused with the KV-cache append. Raw device pointers.
//
// For every query head i and KV head h (fp32 math, one rounding to dtype at the end):
//   rotate-half layout (HF Llama):  x' = [x1 * c - x2 * s, x2 * c + x1 * s], x1/x2 = halves of x
//   adjacent-pairs layout (GPT-J / llama2.c / Meta):  (x[2j], x[2j+1]) rotated by angle j
// with c = cos[j], s = sin[j], j < D/2 (dtype arrays, computed by the caller in fp32 and cast, as
// HF does). q is rotated in place, k is rotated in place and appended; v is appended unchanged:
//   k_cache[offset[h] + length[h]] = k'[h], v_cache[...] = v[h], pos[offset[h] + length[h]] = position
// then length[h] += 1 (the device-side bookkeeping of a CUDA-graph step; the host mirrors it). The
// kernel does not check capacity: the caller guarantees length[h] < capacity[h].
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

enum class RopeMode : int { kRotateHalf = 0, kAdjacentPairs = 1 };

struct RopeAppendArgs {
  DType dtype = DType::kBFloat16;
  RopeMode mode = RopeMode::kRotateHalf;
  int n_head = 0, n_head_kv = 0, head_dim = 0;  ///< head_dim even
  void* q = nullptr;                            ///< dtype, head i at q + i * q_stride (in place)
  int64_t q_stride = 0;
  void* k = nullptr;  ///< dtype, head h at k + h * k_stride (rotated in place)
  int64_t k_stride = 0;
  const void* v = nullptr;  ///< dtype, head h at v + h * v_stride
  int64_t v_stride = 0;
  const void* cos = nullptr;        ///< dtype [head_dim / 2]
  const void* sin = nullptr;        ///< dtype [head_dim / 2]
  void* k_cache = nullptr;          ///< dtype [rows, head_dim] contiguous
  void* v_cache = nullptr;          ///< dtype [rows, head_dim] contiguous
  int64_t* pos = nullptr;           ///< int64 [rows] (may be null: positions not recorded)
  const int64_t* offset = nullptr;  ///< int64 [n_head_kv] device
  int64_t* length = nullptr;        ///< int64 [n_head_kv] device: row of head h written = offset + length; then +1
  int64_t position = 0;             ///< the token's true position (host value)
  /// If set, the position is read from this device int64 instead (CUDA-graph replays).
  const int64_t* position_dev = nullptr;
};

/// One launch. Returns cudaErrorInvalidValue on bad arguments, else the launch error.
cudaError_t rope_append(const RopeAppendArgs& args, cudaStream_t stream);

}  // namespace kvscope::kernels
