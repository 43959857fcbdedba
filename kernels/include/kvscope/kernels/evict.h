#pragma once
// Eviction while decoding at its cap, on the device (Pipeline::evict_decode_device; docs/methods.md
// §7.13): in every KV head of a uniform layer, the live entry with the lowest rank score is dropped
// and the entries after it move down one row (K, V and positions), keeping the others in order, in
// one launch. Raw device pointers, no torch headers.
//
// The dropped row is argmin_j scores[h, j] over the first `candidates` entries as at::argmin picks
// it: the first index of the minimum, a NaN counting as smaller than every number. The entries past
// the candidates are always kept (the newest: H2O's recent window).
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kvscope/kernels/dtype.h"

namespace kvscope::kernels {

struct DropLowestArgs {
  DType dtype = DType::kBFloat16;
  int n_head_kv = 0;
  int head_dim = 0;               ///< D; D * dtype_size a multiple of 16 bytes
  int64_t n = 0;                  ///< live entries of every head, 1..capacity
  const float* scores = nullptr;  ///< fp32 [n_head_kv, n], contiguous: lower = dropped first
  void* k = nullptr;              ///< dtype [n_head_kv * capacity, D], 16-byte aligned: head h at row h * capacity
  void* v = nullptr;              ///< the same layout
  int64_t* pos = nullptr;         ///< int64 [n_head_kv * capacity]: true positions
  int64_t capacity = 0;           ///< rows per head
  int64_t* length = nullptr;      ///< optional int64 [n_head_kv]: each decremented by one
  int64_t* dropped = nullptr;     ///< optional int64 [n_head_kv]: the row each head dropped
  int64_t candidates = 0;         ///< entries the argmin ranges over, 1..n (0: all n)
  float* alongside = nullptr;     ///< optional fp32 [n_head_kv, alongside_stride]: shifted with the rows
  int64_t alongside_stride = 0;   ///< >= n (H2O's running totals, which may be `scores` itself)
};

/// Whether drop_lowest takes rows of head_dim elements of `dtype`: 128 bytes or more, a multiple of
/// 16 (every head_dim the decode kernels take, in every dtype).
bool drop_lowest_supported(DType dtype, int head_dim);

/// One block per KV head. Returns cudaErrorInvalidValue on bad sizes, rows drop_lowest_supported
/// refuses or null pointers, else the launch error.
cudaError_t drop_lowest(const DropLowestArgs& args, cudaStream_t stream);

}  // namespace kvscope::kernels
