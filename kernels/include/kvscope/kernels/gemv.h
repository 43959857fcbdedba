#pragma once
// Matrix-vector products for the decode step's projections: Y = X Wᵀ (+ b) for m = 1..8 rows of X
// (batch 1, or a decode batch's rows), the weight streamed once from memory at close to the copy
// bandwidth. Raw device pointers, no torch headers.
//
//   W: dtype [n, k] row-major (a linear layer's weight), X: dtype [m, k] contiguous, b: dtype [n]
//   (b_stride 0) or [m, n] with row stride b_stride (the residual stream), or null; Y: dtype [m, n]
//   or fp32 [m, n] (y_fp32: the LM head's logits), optionally in column segments (y_split). fp32
//   accumulation, one rounding of acc + b to the output type.
//   m = 1: one warp per row of W on the CUDA cores (gemv.cu). m = 2..8 (bf16 / fp16 only): tensor
//   cores, W's rows as the 16-row operand of mma m16n8k16 and X's rows as its 8 columns
//   (gemv_rows.cu).
// Requires k % 8 == 0, 16-byte aligned W, X (and rows: k * itemsize % 16 == 0), k <= 32768.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"
#include "kvscope/kernels/rope.h"

namespace kvscope::kernels {

/// What a GEMV does with its outputs before storing them. The paired ones need two rows of W per
/// output (gate and up; the two channels of one rotation), which the kernels stream side by side.
enum class GemvEpilogue : int {
  kPlain = 0,
  /// W holds [gate; up] (n = 2I rows; pair c = rows c and I + c): y = silu(x·W[:I]ᵀ + b[:I]) ⊙
  /// (x·W[I:]ᵀ + b[I:]), dtype [m, I], each product rounded to dtype before the activation as in
  /// the two-kernel path (then one rounding of the product). The Llama MLP's gate/up projection
  /// and SiLU-mul in one launch. Needs an even n, no y_split, no y_fp32.
  kSwiGlu = 1,
  /// W holds the fused QKV projection [W_q; W_k; W_v] (n = (n_head + 2 n_head_kv) * head_dim) and
  /// y comes in the q / k / v column segments (y_split = {n_head * D, (n_head + n_head_kv) * D}).
  /// Each output is rounded to dtype (+ bias) as the plain GEMV stores it, then RoPE and the
  /// KV-cache append of one decode token are applied exactly as kernels/rope.h's rope_append
  /// does them (same formulas, same roundings; pair c = the two channels one rotation mixes):
  /// q and k rotated, k' and v written to row offset[h] + length[h] of KV head h's cache, pos of
  /// that row set, and length[h] advanced by one once every warp has read it
  /// (GemvRopeAppend::tickets). Replaces the projection + rope_append
  /// pair of launches in the batch-1 decode step (one dependent launch fewer per layer; at 2..8
  /// rows the tensor-core tiles' epilogue was slower than the two launches: docs/performance.md).
  /// Needs m == 1, dtype rows (no y_fp32), head_dim % 16 == 0.
  kRopeAppend = 2,
  /// kSwiGlu with GeGLU: gelu_tanh(gate) * up (Gemma 2/3's MLP).
  kGeGlu = 3,
};

/// The RoPE + cache-append epilogue's operands (GemvEpilogue::kRopeAppend; see rope.h for the
/// formulas). Device pointers; the caller guarantees length[h] < capacity[h].
struct GemvRopeAppend {
  RopeMode mode = RopeMode::kRotateHalf;
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t ring = 0;                 ///< sliding-window ring W (rope.h); 0 = row offset + length
  const void* cos = nullptr;        ///< dtype [head_dim / 2]
  const void* sin = nullptr;        ///< dtype [head_dim / 2]
  void* k_cache = nullptr;          ///< dtype [rows, head_dim] contiguous
  void* v_cache = nullptr;          ///< dtype [rows, head_dim] contiguous
  int64_t* pos = nullptr;           ///< int64 [rows] (may be null)
  const int64_t* offset = nullptr;  ///< int64 [n_head_kv]
  /// int64 [n_head_kv]: head h's key row is k_offset[h] + length[h] instead (kvscope::LayerKv's
  /// compact keys hold K in a buffer of their own layout); null = offset.
  const int64_t* k_offset = nullptr;
  /// int64 [n_head_kv]: head h's value row is v_offset[h] + length[h] instead (compact values);
  /// null = offset. The position still goes to row offset[h] + length[h].
  const int64_t* v_offset = nullptr;
  int64_t* length = nullptr;              ///< int64 [n_head_kv]: the row written; then +1
  int64_t position = 0;                   ///< the token's position (host value) ...
  const int64_t* position_dev = nullptr;  ///< ... or read from the device when set (graph replays)
  /// uint64 [n_head_kv], zero before the launch and left zero: the warps that write a KV head's
  /// cache rows count themselves here; the last advances the head's length (every other warp has
  /// read it by then) and clears its ticket.
  unsigned long long* tickets = nullptr;
};

struct GemvArgs {
  DType dtype = DType::kBFloat16;
  int64_t m = 1;  ///< rows of x and y, 1..8 (2..8: bf16 / fp16)
  int64_t n = 0, k = 0;
  const void* w = nullptr;
  const void* x = nullptr;
  const void* b = nullptr;  ///< optional bias: [n] (b_stride 0) or [m, n]
  int64_t b_stride = 0;     ///< elements between the bias rows of consecutive rows of x (0: shared)
  void* y = nullptr;
  bool y_fp32 = false;  ///< write fp32 instead of dtype
  /// Column boundaries 0 <= s0 <= s1 <= n of three output segments [0, s0), [s0, s1), [s1, n),
  /// each stored as its own row-major [m, width] block, the blocks one after the other (element
  /// (r, j) of segment [a, e) at y + m * a + r * (e - a) + j - a). A decode batch's fused QKV
  /// projection comes out as q [m * n_head, D], k and v [m * n_head_kv, D] from one launch. {0, 0}:
  /// one segment, the plain [m, n]; with m = 1 every split is the plain layout.
  int64_t y_split[2] = {0, 0};
  /// What the kernel does with its outputs before storing them (GemvEpilogue).
  GemvEpilogue epilogue = GemvEpilogue::kPlain;
  /// kRopeAppend only: the heads, the rotation and the cache rows (GemvRopeAppend).
  GemvRopeAppend rope;
  /// The RMSNorm of x folded into the product (Zhang & Sennrich 2019, eq. 4, in HF Llama's
  /// LlamaRMSNorm order), so that the norm needs no launch of its own: x then holds g ⊙ r, the
  /// norm's weight times the un-normalised rows r (rounded to dtype), and norm_sumsq the partial
  /// sums of r² that the projection producing r left (next_norm_*): fp32 [m, norm_parts], a row's
  /// parts adding up to Σ_j r_j². Each output is acc · rsqrt(Σ / k + norm_eps) before the bias and
  /// the epilogue. Null: x is used as it is.
  const float* norm_sumsq = nullptr;
  int64_t norm_parts = 0;
  float norm_eps = 0.f;
  /// The next RMSNorm of the output left pending for the projection that consumes it (kPlain, dtype
  /// output, no y_split): with next_norm_g (dtype [n], that norm's weight) set, the kernel also
  /// writes next_norm_gx = g ⊙ y (dtype [m, n], y as stored, one rounding) and next_norm_sumsq =
  /// Σ y² over each block's outputs (fp32 [m, gemv_norm_parts(m, n)]), the consumer's x and
  /// norm_sumsq.
  const void* next_norm_g = nullptr;
  void* next_norm_gx = nullptr;
  float* next_norm_sumsq = nullptr;
};

/// Partial sums of squares per row that a GEMV of m rows and n outputs leaves with next_norm_g
/// (one per block of outputs: ceil(n / 8) for one row, ceil(n / 16) for 2..8 rows).
int64_t gemv_norm_parts(int64_t m, int64_t n);

/// The most norm parts a consumer of 2..8 rows takes (its shared memory holds m x parts floats).
constexpr int64_t kGemvMaxNormParts = 1024;

/// True when the shapes and alignment meet the kernel's requirements.
bool gemv_supported(const GemvArgs& a);

/// One launch on `stream`. Returns cudaErrorInvalidValue when !gemv_supported(a).
cudaError_t gemv(const GemvArgs& a, cudaStream_t stream);

}  // namespace kvscope::kernels
