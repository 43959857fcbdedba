#pragma once
// Properties of the current CUDA device that launch planning needs (internal to kvscope_kernels).
namespace kvscope::kernels::detail {

/// Streaming multiprocessors of the current device, queried once per device and cached (132 when
/// the query fails: an H100 / H200).
int sm_count();

}  // namespace kvscope::kernels::detail
