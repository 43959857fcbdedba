#pragma once
// Properties of the current CUDA device that launch planning needs (internal to kvscope_kernels).
namespace kvscope::kernels::detail {

/// Streaming multiprocessors of the current device, queried once per device and cached (132 when
/// the query fails: an H100 / H200).
int sm_count();

/// L2 cache bytes of the current device (50 MB when the query fails: an H100).
int l2_bytes();

}  // namespace kvscope::kernels::detail
