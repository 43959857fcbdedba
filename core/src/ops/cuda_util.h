#pragma once
// Helpers shared by the LibTorch adapters over kvscope_kernels (cuda_ops.cpp, page_ops.cpp):
// argument checks, dtype mapping, pinned uploads. CUDA builds only (needs a CUDA LibTorch).
#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include "kvscope/kernels/decode.h"

namespace kvscope::ops {
namespace kk = kvscope::kernels;
namespace detail {

[[noreturn]] inline void bad(const std::string& what) { throw std::invalid_argument(what); }

inline void check_cuda(cudaError_t err, const char* op) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(op) + ": " + cudaGetErrorString(err));
}

inline kk::DType kernel_dtype(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return kk::DType::kFloat32;
    case at::kBFloat16:
      return kk::DType::kBFloat16;
    case at::kHalf:
      return kk::DType::kFloat16;
    default:
      bad(std::string(op) + ": dtype must be fp32, bf16 or fp16");
  }
}

/// Every tensor defined, on CUDA, on the device of the first, in the dtype of the first.
inline void check_same(const char* op, std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor& first = **ts.begin();
  for (const at::Tensor* t : ts) {
    if (!t->defined()) bad(std::string(op) + ": undefined tensor");
    if (!t->is_cuda()) bad(std::string(op) + ": tensors must be on a CUDA device");
    if (t->device() != first.device()) bad(std::string(op) + ": tensors on different devices");
    if (t->scalar_type() != first.scalar_type()) bad(std::string(op) + ": tensors of different dtypes");
  }
}

/// A destination: `out` if defined (checked), else a fresh tensor.
inline at::Tensor make_out(at::Tensor out, at::IntArrayRef sizes, const at::TensorOptions& opts, const char* op) {
  if (!out.defined()) return at::empty(sizes, opts);
  if (out.sizes() != sizes || !out.is_contiguous() || out.scalar_type() != opts.dtype().toScalarType() ||
      out.device() != opts.device())
    bad(std::string(op) + ": out must be a contiguous tensor of the result's shape, dtype and device");
  return out;
}

/// Host int64 vectors concatenated, copied to `device` through pinned memory without blocking.
inline at::Tensor upload(const std::vector<int64_t>& a, const std::vector<int64_t>& b, c10::Device device) {
  at::Tensor host =
      at::empty({static_cast<int64_t>(a.size() + b.size())}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  int64_t* p = host.data_ptr<int64_t>();
  std::copy(a.begin(), a.end(), p);
  std::copy(b.begin(), b.end(), p + a.size());
  return host.to(device, /*non_blocking=*/true);
}

}  // namespace detail
}  // namespace kvscope::ops
