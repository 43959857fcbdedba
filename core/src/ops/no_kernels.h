#pragma once
// The error every LibTorch adapter over kvscope_kernels throws in a build without the CUDA kernels
// (KVSCOPE_WITH_CUDA=OFF). Internal to kvscope_core.
#include <stdexcept>
#include <string>

namespace kvscope::ops::detail {

[[noreturn]] inline void unavailable(const char* op) {
  throw std::runtime_error(std::string(op) + ": kvscope was built without the CUDA kernels (KVSCOPE_WITH_CUDA=OFF)");
}

}  // namespace kvscope::ops::detail
