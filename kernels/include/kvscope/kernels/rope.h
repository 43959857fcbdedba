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
// Family features (ModelConfig): with q_norm / k_norm set, every q and k head is first
// RMS-normalised over its head_dim (Qwen3, Gemma 3: x_n = x_fp32 * rsqrt(mean(x_fp32²) + eps);
// dtype weight w: w * x_n.to(dtype); fp32 weight (Gemma's 1 + w): (x_n * w).to(dtype)), in place;
// with rotary_dim < head_dim only the first rotary_dim channels rotate (Phi-3/4 partial rotary),
// pairs (j, j + rotary_dim / 2); with ring = W > 0 (a sliding-window layer, Mistral / Gemma 2/3) the
// row written is offset[h] + position % W and length[h] becomes min(length[h] + 1, W): the head
// holds the last W tokens, each at row position % W (attention is order-free once RoPE is applied).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

enum class RopeMode : int { kRotateHalf = 0, kAdjacentPairs = 1 };

/// rope_append's largest head_dim (a warp holds a head in registers).
inline constexpr int kRopeAppendMaxHeadDim = 256;

struct RopeAppendArgs {
  DType dtype = DType::kBFloat16;
  RopeMode mode = RopeMode::kRotateHalf;
  int n_head = 0, n_head_kv = 0, head_dim = 0;  ///< head_dim even
  int rotary_dim = 0;                           ///< channels rotated, even, <= head_dim (0 = head_dim)
  void* q = nullptr;                            ///< dtype, head i at q + i * q_stride (in place)
  int64_t q_stride = 0;
  void* k = nullptr;  ///< dtype, head h at k + h * k_stride (rotated in place)
  int64_t k_stride = 0;
  const void* v = nullptr;  ///< dtype, head h at v + h * v_stride
  int64_t v_stride = 0;
  const void* cos = nullptr;     ///< dtype [rotary_dim / 2]
  const void* sin = nullptr;     ///< dtype [rotary_dim / 2]
  const void* q_norm = nullptr;  ///< per-head RMSNorm weights [head_dim] (dtype, or fp32 with norm_fp32), or null
  const void* k_norm = nullptr;  ///< set together with q_norm
  bool norm_fp32 = false;        ///< q_norm / k_norm are fp32 (Gemma's 1 + w)
  float norm_eps = 1e-6f;
  int64_t ring = 0;                 ///< sliding window W of the layer (0: append at offset + length)
  void* k_cache = nullptr;          ///< dtype [rows, head_dim] contiguous
  void* v_cache = nullptr;          ///< dtype [rows, head_dim] contiguous
  int64_t* pos = nullptr;           ///< int64 [rows] (may be null: positions not recorded)
  const int64_t* offset = nullptr;  ///< int64 [n_head_kv] device
  int64_t* length = nullptr;        ///< int64 [n_head_kv] device: row of head h written = offset + length; then +1
  /// int64 [n_head_kv] device: the key row is k_offset[h] + length[h] instead (kvscope::LayerKv's
  /// compact keys); null = offset. Not with ring.
  const int64_t* k_offset = nullptr;
  /// Same for the value row (compact values); null = offset. The position goes to offset + length.
  const int64_t* v_offset = nullptr;
  int64_t position = 0;  ///< the token's true position (host value)
  /// If set, the position is read from this device int64 instead (CUDA-graph replays).
  const int64_t* position_dev = nullptr;
};

/// One launch. Returns cudaErrorInvalidValue on bad arguments, else the launch error.
cudaError_t rope_append(const RopeAppendArgs& args, cudaStream_t stream);

}  // namespace kvscope::kernels
