#include "fault_injection.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#include "kvscope/core/errors.h"

namespace kvscope::cli {

std::function<void(std::string_view, int64_t)> fault_hook_from_environment() {
  const char* env = std::getenv("KVSCOPE_TEST_FAULT");
  if (env == nullptr || *env == '\0') return {};
  const std::string spec(env);
  std::string phase;
  int64_t step = 0;
  if (spec == "torch@prefill") {
    return [](std::string_view at, int64_t) {
      // c10::IndexError "index out of range in self", with 16 lines of stack trace in what()
      if (at == "prefill") (void)at::zeros({2}).index_select(0, at::tensor({5}));
    };
  }
  if (spec == "oom@prefill") {
    phase = "prefill";
  } else if (spec.rfind("oom@decode:", 0) == 0) {
    phase = "decode";
    try {
      step = std::stoll(spec.substr(11));
    } catch (const std::exception&) {
      throw InputError("KVSCOPE_TEST_FAULT: bad decode step in '" + spec + "'");
    }
  } else {
    throw InputError("KVSCOPE_TEST_FAULT: expected oom@prefill, oom@decode:N or torch@prefill, got '" + spec + "'");
  }
  return [phase, step](std::string_view at, int64_t n) {
    if (at == phase && n == step)
      throw c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                       "CUDA out of memory. Tried to allocate 2.00 GiB (injected by KVSCOPE_TEST_FAULT)");
  };
}

}  // namespace kvscope::cli
