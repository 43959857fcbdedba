#include "process_guard.h"

#include <exception>
#include <new>

#include <ATen/ATen.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

namespace kvscope::run {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

/// The program's name for messages ("kvscope-cli"), set before libraries start.
const char* program_name = "kvscope";

/// RLIMIT_AS in bytes, or 0 when there is none.
uint64_t address_space_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  return uint64_t(rl.rlim_cur);
}

/// Address space mapped now (VmSize of /proc/self/status), in bytes; 0 if unreadable.
/// Reads with open/read only: it runs before libc's stdio may be used safely.
uint64_t mapped_bytes() {
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = ::strstr(buf, "VmSize:");
  return p ? uint64_t(::strtoull(p + 7, nullptr, 10)) * 1024 : 0;
}

/// One line on stderr, then exit 1 without running destructors or atexit handlers (the process is
/// out of resources; LibTorch's and OpenBLAS's teardown is what hangs there).
[[noreturn]] void fail(const char* what) {
  ::dprintf(2, "%s: error: %s\n", program_name, what);
  ::_exit(1);
}

[[noreturn]] void on_terminate() {
  char line[512];
  const uint64_t limit = address_space_limit();
  try {
    if (const std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    fail("terminated without an exception (std::terminate)");
  } catch (const std::bad_alloc&) {
    if (limit)
      ::snprintf(line, sizeof line,
                 "out of memory (std::bad_alloc) under an address-space limit (ulimit -v) of %llu MiB; kvscope "
                 "needs at least %llu MiB plus the model's weights and KV cache",
                 (unsigned long long)(limit / kMiB), (unsigned long long)kMinimumAddressSpaceMiB);
    else
      ::snprintf(line, sizeof line, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    ::snprintf(line, sizeof line, "uncaught exception: %s", e.what());
    if (char* nl = ::strchr(line, '\n')) *nl = '\0';
  } catch (...) {
    ::snprintf(line, sizeof line, "uncaught exception of an unknown type");
  }
  fail(line);
}

}  // namespace

void guard_process_before_libraries(int argc, char** argv, char** /*envp*/) {
  if (argc > 0 && argv && argv[0]) {
    const char* slash = ::strrchr(argv[0], '/');
    program_name = slash ? slash + 1 : argv[0];
  }
  ::signal(SIGXFSZ, SIG_IGN);
  std::set_terminate(on_terminate);
  const uint64_t limit = address_space_limit();
  if (!limit) return;
  if (limit < kMinimumAddressSpaceMiB * kMiB) {
    char line[384];
    ::snprintf(line, sizeof line,
               "the address-space limit (ulimit -v) is %llu MiB; kvscope needs at least %llu MiB to start (its "
               "libraries map %llu MiB before main) plus the model's weights and KV cache",
               (unsigned long long)(limit / kMiB), (unsigned long long)kMinimumAddressSpaceMiB,
               (unsigned long long)(mapped_bytes() / kMiB));
    fail(line);
  }
  ::mallopt(M_ARENA_MAX, 2);
  ::setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/0);
  ::setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0);
}

void reserve_blas_buffers() {
  const uint64_t limit = address_space_limit();
  if (!limit) return;
  const uint64_t mapped = mapped_bytes();
  if (mapped + kStartHeadroomMiB * kMiB > limit) {
    char line[384];
    ::snprintf(line, sizeof line,
               "the address-space limit (ulimit -v) is %llu MiB and %llu MiB are mapped at start; kvscope needs "
               "%llu MiB more before loading a model",
               (unsigned long long)(limit / kMiB), (unsigned long long)(mapped / kMiB),
               (unsigned long long)kStartHeadroomMiB);
    fail(line);
  }
  // One product through BLAS: OpenBLAS allocates its calling thread's buffer now, while the space
  // is there, and reuses it for every later product.
  const at::Tensor a = at::ones({64, 64});
  (void)at::mm(a, a).sum().item<float>();
}

}  // namespace kvscope::run
