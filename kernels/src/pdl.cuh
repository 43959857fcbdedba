#pragma once
// Programmatic dependent launch (PDL, sm_90+; CUDA Programming Guide §4.5) for the decode step's
// chain of kernels (internal to kvscope_kernels).
//
// A decode step is ~10 short kernels per layer, each waiting for the previous one. Launched with
// launch_pdl, a kernel may be scheduled while its predecessor in the stream still runs: every
// kernel calls pdl_trigger() first (its dependents may be scheduled once all its blocks have), may
// then touch memory no kernel writes (weights: prefetch), and calls pdl_wait() before anything
// else (it returns once the predecessor has completed and its writes are visible). As every kernel
// of the chain waits before it reads or writes activations, completion stays transitive: kernel
// n+2 passes its wait only after n+1 completed, which waited for n. Blocks of a kernel launched
// early sit resident until the wait returns, so the launch latency, the block prologue and the
// first weight loads of the next projections overlap the latency-bound kernels before them (page
// scoring and selection, attention over a few rows, norms). Captured into CUDA graphs as
// programmatic edges. Without PDL (older GPUs, a predecessor that never triggers, e.g. a LibTorch
// kernel) both calls are no-ops and the launch is an ordinary stream-ordered one.
#include <cuda_runtime.h>

#include <utility>

namespace kvscope::kernels {

/// Lets the kernel's dependents be scheduled (once every block has called it or exited).
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Blocks until the predecessor grid has completed and its memory operations are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Asks L2 for the 128-byte line holding p (no register written; the weight and summary prefetches
/// issued before pdl_wait()).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

/// Launches `kernel` on `stream` as a programmatic dependent of the stream's previous kernel, in
/// thread-block clusters of `cluster` blocks along x when cluster > 1 (grid.x a multiple of it;
/// sm_90). The kernel must call pdl_wait() before touching any memory another kernel of the stream
/// writes. Returns the launch error.
template <typename... Params, typename... Args>
cudaError_t launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster, size_t smem,
                               cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/// launch_pdl_cluster without clusters.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  return launch_pdl_cluster(kernel, grid, block, 1u, smem, stream, std::forward<Args>(args)...);
}

}  // namespace kvscope::kernels
