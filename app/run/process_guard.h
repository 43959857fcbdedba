#pragma once
// What kvscope's executables do about process resource limits (ulimit -f / -v) before and just
// after their libraries start, so that a limit ends in one clear line and a non-zero exit within
// seconds instead of a signal, an abort or a hang. docs/reliability.md "Resource limits" lists the
// faults and the tests.
//
// Each executable (kvscope-cli, kvscope) installs guard_process_before_libraries in its
// .preinit_array, which the dynamic loader runs before any shared library's constructors:
//
//   [[gnu::used, gnu::section(".preinit_array")]] static void (*const guard)(int, char**, char**) =
//       &kvscope::run::guard_process_before_libraries;
//
// and calls reserve_blas_buffers() first thing in main().
#include <cstdint>

namespace kvscope::run {

/// The smallest address-space limit (RLIMIT_AS, `ulimit -v`) kvscope starts under, in MiB:
/// LibTorch, oneDNN, OpenBLAS and the rest of the ~290 shared libraries map about 600 MiB before
/// main() and LibTorch's static initialisation allocates more. A model's weights and KV cache come
/// on top (measured in docs/reliability.md).
inline constexpr uint64_t kMinimumAddressSpaceMiB = 1024;

/// Address space kept free at start for OpenBLAS's buffer (128 MiB) and the first tensors, in MiB.
inline constexpr uint64_t kStartHeadroomMiB = 320;

/// Runs before any library initialises (from .preinit_array; glibc passes argc, argv, envp):
///  - ignores SIGXFSZ, so a write past RLIMIT_FSIZE fails with EFBIG, which the session store
///    reports ("the disk is full or the file reached a size limit") and rolls back, instead of the
///    signal killing the process without a word;
///  - makes an exception that escapes everything (std::bad_alloc thrown by a library's static
///    initialisation under a low `ulimit -v`) print one line and exit 1 instead of abort();
///  - under a finite RLIMIT_AS: refuses to start below kMinimumAddressSpaceMiB (one line, exit 1),
///    caps glibc's malloc arenas (each reserves 64 MiB of address space) and runs OpenBLAS and
///    OpenMP with one thread unless OPENBLAS_NUM_THREADS / OMP_NUM_THREADS say otherwise (OpenBLAS
///    retries a failed buffer allocation forever: each of its threads needs a 128 MiB buffer).
/// Uses only async-signal-safe libc calls; never throws.
void guard_process_before_libraries(int argc, char** argv, char** envp);

/// Under a finite RLIMIT_AS, allocates OpenBLAS's buffer now (one small matrix product) after
/// checking that kStartHeadroomMiB of address space is left, so that a later out-of-memory is
/// LibTorch's allocator failing (a ResourceError naming the step) and never OpenBLAS spinning.
/// Prints one line and exits 1 when the headroom is not there. Does nothing without a limit.
void reserve_blas_buffers();

}  // namespace kvscope::run
