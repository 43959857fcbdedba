#pragma once
// Timing helpers shared by the benchmarks: waiting for queued device work, and the device copy
// bandwidth every roofline divides by.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace kvscope::bench {

/// Forces completion of the device work that produces `t` (a 1-element read-back).
void sync(const at::Tensor& t);

/// Device copy bandwidth in bytes/s, counting bytes read plus bytes written (device METHOD.md):
/// 1 GiB bf16 buffers, 3 warm-up copies, then 20 timed copies (3 on the CPU).
double copy_bandwidth(c10::Device dev);

}  // namespace kvscope::bench
